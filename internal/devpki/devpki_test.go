package devpki

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/stretchr/testify/require"
)

const devID = "spiffe://lockd.local/dev"

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func mustCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	cert, err := readCert(path)
	require.NoError(t, err)
	return cert
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

func pool(t *testing.T, caPath string) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	require.True(t, p.AppendCertsFromPEM(mustRead(t, caPath)))
	return p
}

func TestEnsureIdempotent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	hosts := []string{"127.0.0.1", "localhost"}

	b1, err := Ensure(dir, hosts, devID, testNow)
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, p := range []string{b1.CACert, b1.CAKey, b1.ServerCert, b1.ServerKey, b1.ClientCert, b1.ClientKey} {
		files[p] = mustRead(t, p)
	}

	b2, err := Ensure(dir, hosts, devID, testNow.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, b1, b2)
	for p, want := range files {
		require.Equal(t, want, mustRead(t, p), "%s changed on second Ensure", p)
	}
}

func TestEnsurePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	b, err := Ensure(dir, []string{"localhost"}, devID, testNow)
	require.NoError(t, err)

	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	for _, p := range []string{b.CAKey, b.ServerKey, b.ClientKey} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), p)
		block, _ := pem.Decode(mustRead(t, p))
		require.NotNil(t, block)
		require.Equal(t, "PRIVATE KEY", block.Type)
	}
}

func TestEnsureCA(t *testing.T) {
	b, err := Ensure(t.TempDir(), []string{"localhost"}, devID, testNow)
	require.NoError(t, err)
	ca := mustCert(t, b.CACert)
	require.True(t, ca.IsCA)
	require.Equal(t, "lockd dev CA", ca.Subject.CommonName)
	require.Equal(t, "ECDSA", ca.PublicKeyAlgorithm.String())
	require.Equal(t, testNow.AddDate(10, 0, 0), ca.NotAfter)
}

func TestEnsureServerCert(t *testing.T) {
	b, err := Ensure(t.TempDir(), []string{"127.0.0.1", "localhost", "::1"}, devID, testNow)
	require.NoError(t, err)
	cert := mustCert(t, b.ServerCert)
	require.Equal(t, []string{"localhost"}, cert.DNSNames)
	require.Len(t, cert.IPAddresses, 2)

	tests := []struct {
		name    string
		host    string
		wantErr bool
	}{
		{name: "ipv4 loopback", host: "127.0.0.1"},
		{name: "localhost", host: "localhost"},
		{name: "ipv6 loopback", host: "::1"},
		{name: "other name", host: "example.com", wantErr: true},
		{name: "other ip", host: "10.0.0.1", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cert.Verify(x509.VerifyOptions{
				DNSName:     tc.host,
				Roots:       pool(t, b.CACert),
				CurrentTime: testNow,
				KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestEnsureClientSVID(t *testing.T) {
	b, err := Ensure(t.TempDir(), []string{"localhost"}, devID, testNow)
	require.NoError(t, err)
	cert := mustCert(t, b.ClientCert)

	id, err := x509svid.IDFromCert(cert)
	require.NoError(t, err)
	require.Equal(t, devID, id.String())
	require.Empty(t, cert.DNSNames)
	require.Empty(t, cert.IPAddresses)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage)
	require.Equal(t, x509.KeyUsageDigitalSignature, cert.KeyUsage)
	require.False(t, cert.IsCA)

	_, err = cert.Verify(x509.VerifyOptions{
		Roots:       pool(t, b.CACert),
		CurrentTime: testNow,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	require.NoError(t, err)
}

func TestEnsureReissue(t *testing.T) {
	tests := []struct {
		name        string
		hosts2      []string
		devID2      string
		now2        time.Time
		wantServer  bool // server pair re-issued
		wantClient  bool // client pair re-issued
		checkServer string
	}{
		{name: "same inputs", hosts2: []string{"localhost"}, devID2: devID, now2: testNow},
		{name: "same host, blanks and duplicates", hosts2: []string{}, devID2: devID, now2: testNow},
		{name: "new host", hosts2: []string{"localhost", "127.0.0.2"}, devID2: devID, now2: testNow, wantServer: true, checkServer: "127.0.0.2"},
		{name: "new dev id", hosts2: []string{"localhost"}, devID2: "spiffe://lockd.local/other", now2: testNow, wantClient: true},
		{name: "leaves expired", hosts2: []string{"localhost"}, devID2: devID, now2: testNow.AddDate(2, 0, 0), wantServer: true, wantClient: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b, err := Ensure(dir, []string{"localhost"}, devID, testNow)
			require.NoError(t, err)
			ca := mustRead(t, b.CACert)
			server := mustRead(t, b.ServerCert)
			client := mustRead(t, b.ClientCert)

			hosts := tc.hosts2
			if len(hosts) == 0 {
				hosts = []string{" localhost ", "localhost"}
			}
			_, err = Ensure(dir, hosts, tc.devID2, tc.now2)
			require.NoError(t, err)
			require.Equal(t, ca, mustRead(t, b.CACert), "CA must never change")
			require.Equal(t, tc.wantServer, string(server) != string(mustRead(t, b.ServerCert)), "server re-issued")
			require.Equal(t, tc.wantClient, string(client) != string(mustRead(t, b.ClientCert)), "client re-issued")
			if tc.checkServer != "" {
				require.NoError(t, mustCert(t, b.ServerCert).VerifyHostname(tc.checkServer))
			}
		})
	}
}

func TestEnsureErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		hosts   []string
		id      string
		wantErr error
	}{
		{name: "no hosts", hosts: nil, id: devID, wantErr: ErrNoServerHosts},
		{name: "bad dev id", hosts: []string{"localhost"}, id: "http://x", wantErr: ErrInvalidSPIFFEID},
		{name: "dev id without path", hosts: []string{"localhost"}, id: "spiffe://lockd.local", wantErr: ErrInvalidSPIFFEID},
		{
			name: "ca cert without key", hosts: []string{"localhost"}, id: devID, wantErr: ErrNoCA,
			setup: func(t *testing.T, dir string) {
				require.NoError(t, os.Remove(filepath.Join(dir, caKeyName)))
			},
		},
		{
			name: "ca key mismatch", hosts: []string{"localhost"}, id: devID, wantErr: ErrBadCA,
			setup: func(t *testing.T, dir string) {
				// Replace the CA key with the server key.
				require.NoError(t, os.Rename(filepath.Join(dir, serverKeyName), filepath.Join(dir, caKeyName)))
			},
		},
		{
			name: "garbage leaf", hosts: []string{"localhost"}, id: devID, wantErr: ErrBadPEM,
			setup: func(t *testing.T, dir string) {
				require.NoError(t, os.WriteFile(filepath.Join(dir, serverCertName), []byte("nope"), 0o644))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.setup != nil {
				_, err := Ensure(dir, []string{"localhost"}, devID, testNow)
				require.NoError(t, err)
				tc.setup(t, dir)
			}
			_, err := Ensure(dir, tc.hosts, tc.id, testNow)
			require.ErrorIs(t, err, tc.wantErr)
		})
	}
}

func TestEnsureRecoversCACertFromKey(t *testing.T) {
	dir := t.TempDir()
	b, err := Ensure(dir, []string{"localhost"}, devID, testNow)
	require.NoError(t, err)
	key := mustRead(t, b.CAKey)
	require.NoError(t, os.Remove(b.CACert))

	_, err = Ensure(dir, []string{"localhost"}, devID, testNow)
	require.NoError(t, err)
	require.Equal(t, key, mustRead(t, b.CAKey))
	// Leaves still chain: same key, same subject.
	_, err = mustCert(t, b.ClientCert).Verify(x509.VerifyOptions{
		Roots:       pool(t, b.CACert),
		CurrentTime: testNow,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	require.NoError(t, err)
}

func TestIssueSVID(t *testing.T) {
	caDir := t.TempDir()
	b, err := Ensure(caDir, []string{"localhost"}, devID, testNow)
	require.NoError(t, err)

	outDir := filepath.Join(t.TempDir(), "out")
	certPath, keyPath, err := IssueSVID(caDir, "spiffe://lockd.local/workload/a", outDir, testNow)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(outDir, "svid.crt"), certPath)
	require.Equal(t, filepath.Join(outDir, "svid.key"), keyPath)

	st, err := os.Stat(outDir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	st, err = os.Stat(keyPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.Equal(t, mustRead(t, b.CACert), mustRead(t, filepath.Join(outDir, "ca.crt")))

	cert := mustCert(t, certPath)
	id, err := x509svid.IDFromCert(cert)
	require.NoError(t, err)
	require.Equal(t, "spiffe://lockd.local/workload/a", id.String())
	_, err = cert.Verify(x509.VerifyOptions{
		Roots:       pool(t, filepath.Join(outDir, "ca.crt")),
		CurrentTime: testNow,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	require.NoError(t, err)

	// Issuing into the CA directory itself must not clobber ca.crt.
	_, _, err = IssueSVID(caDir, "spiffe://lockd.local/self", caDir, testNow)
	require.NoError(t, err)
	require.Equal(t, mustRead(t, b.CACert), mustRead(t, filepath.Join(caDir, "ca.crt")))
}

func TestIssueSVIDErrors(t *testing.T) {
	caDir := t.TempDir()
	_, err := Ensure(caDir, []string{"localhost"}, devID, testNow)
	require.NoError(t, err)

	tests := []struct {
		name     string
		caDir    string
		id       string
		wantErr  error
		wantText string
	}{
		{name: "wrong scheme", caDir: caDir, id: "http://x", wantErr: ErrInvalidSPIFFEID, wantText: "scheme is missing or invalid"},
		{name: "missing trust domain", caDir: caDir, id: "spiffe://", wantErr: ErrInvalidSPIFFEID, wantText: "trust domain is missing"},
		{name: "empty", caDir: caDir, id: "", wantErr: ErrInvalidSPIFFEID, wantText: "cannot be empty"},
		{name: "uppercase trust domain", caDir: caDir, id: "spiffe://LOCKD/x", wantErr: ErrInvalidSPIFFEID, wantText: "trust domain characters"},
		{name: "no CA", caDir: t.TempDir(), id: devID, wantErr: ErrNoCA, wantText: "CA not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outDir := filepath.Join(t.TempDir(), "out")
			_, _, err := IssueSVID(tc.caDir, tc.id, outDir, testNow)
			require.ErrorIs(t, err, tc.wantErr)
			require.ErrorContains(t, err, tc.wantText)
			_, statErr := os.Stat(outDir)
			require.True(t, os.IsNotExist(statErr), "outDir must not be created on error")
		})
	}
}
