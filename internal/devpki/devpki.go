// Package devpki implements the development PKI used by lockd's embedded
// mode: a local certificate authority, a server certificate and X.509
// SVIDs (SPIFFE client certificates), all stored as PEM files in a
// directory.
//
// This PKI is for development and tests only. Its CA private key lives
// unencrypted on disk next to the data it protects, there is no revocation,
// and the CA will sign any SPIFFE ID in any trust domain. Anyone who can
// read the CA key can impersonate every lockd client and server that trusts
// it. Do not use it to secure production deployments.
package devpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Sentinel errors returned (wrapped) by this package. Use errors.Is to test
// for them.
var (
	// ErrInvalidSPIFFEID reports a SPIFFE ID that cannot be used for an
	// X.509 SVID. The wrapped error names the violated rule.
	ErrInvalidSPIFFEID = errors.New("devpki: invalid SPIFFE ID")
	// ErrNoServerHosts reports that Ensure was called without any server
	// host name or IP address.
	ErrNoServerHosts = errors.New("devpki: no server hosts")
	// ErrNoCA reports that the CA certificate or key could not be found.
	ErrNoCA = errors.New("devpki: CA not found")
	// ErrBadCA reports a CA certificate or key that exists but is unusable
	// (not a CA, expired, or the key does not match the certificate).
	ErrBadCA = errors.New("devpki: unusable CA")
	// ErrBadPEM reports a certificate or key file that is not valid PEM of
	// the expected type.
	ErrBadPEM = errors.New("devpki: malformed PEM file")
)

// File names used inside the directories managed by this package.
const (
	caCertName     = "ca.crt"
	caKeyName      = "ca.key"
	serverCertName = "server.crt"
	serverKeyName  = "server.key"
	devCertName    = "dev.crt"
	devKeyName     = "dev.key"
	svidCertName   = "svid.crt"
	svidKeyName    = "svid.key"

	caCommonName = "lockd dev CA"

	dirPerm  fs.FileMode = 0o700
	keyPerm  fs.FileMode = 0o600
	certPerm fs.FileMode = 0o644

	// backdate is subtracted from now for NotBefore to tolerate small clock
	// skew between processes.
	backdate = 5 * time.Minute
)

// Bundle holds the paths of the files written by Ensure. All paths are
// inside the directory passed to Ensure.
type Bundle struct {
	// CACert is the PEM CA certificate; use it as the trust bundle for both
	// server and client verification.
	CACert string
	// CAKey is the PEM (PKCS#8) CA private key. It can mint any identity;
	// keep it private.
	CAKey string
	// ServerCert is the PEM server certificate (ExtKeyUsage ServerAuth).
	ServerCert string
	// ServerKey is the PEM (PKCS#8) server private key.
	ServerKey string
	// ClientCert is the PEM client X.509 SVID (ExtKeyUsage ClientAuth).
	ClientCert string
	// ClientKey is the PEM (PKCS#8) client private key.
	ClientKey string
}

// Ensure makes sure dir holds a development CA, a server certificate valid
// for every entry of serverHosts and a client X.509 SVID for devID, creating
// whatever is missing, and returns the file paths. dir is created with mode
// 0700 if it does not exist; private keys are written with mode 0600.
//
// Ensure is idempotent: existing files are reused, never blindly replaced.
// The CA (ca.crt, ca.key) is never overwritten; if ca.crt exists without
// ca.key, or the CA is expired or inconsistent, Ensure returns an error
// wrapping ErrNoCA or ErrBadCA and the directory must be repaired by hand
// (e.g. by removing it). If only ca.key exists, ca.crt is recreated from it.
// A leaf pair (server or client) is re-issued, with a fresh key, only when
// it no longer fits: it does not chain to the CA, is not valid at now, its
// key does not match, the server certificate lacks one of serverHosts, or
// the client certificate's SPIFFE ID differs from devID. A leaf file that
// exists but cannot be parsed is reported as an error, not replaced.
//
// serverHosts entries that parse as IP addresses become IP SANs, all others
// DNS SANs. devID must be a SPIFFE ID with a non-empty path, such as
// "spiffe://lockd.local/dev".
//
// Ensure is not safe for concurrent use on the same dir, by goroutines or
// processes: callers must serialise it (lockd calls it once at start-up).
func Ensure(dir string, serverHosts []string, devID string, now time.Time) (*Bundle, error) {
	id, err := parseSVIDID(devID)
	if err != nil {
		return nil, err
	}
	dnsNames, ips := splitHosts(serverHosts)
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, ErrNoServerHosts
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("devpki: create %s: %w", dir, err)
	}
	b := &Bundle{
		CACert:     filepath.Join(dir, caCertName),
		CAKey:      filepath.Join(dir, caKeyName),
		ServerCert: filepath.Join(dir, serverCertName),
		ServerKey:  filepath.Join(dir, serverKeyName),
		ClientCert: filepath.Join(dir, devCertName),
		ClientKey:  filepath.Join(dir, devKeyName),
	}

	ca, err := ensureCA(b.CACert, b.CAKey, now)
	if err != nil {
		return nil, err
	}

	// Server certificate.
	fits := func(cert *x509.Certificate) bool {
		for _, h := range append(append([]string{}, dnsNames...), ipStrings(ips)...) {
			if cert.VerifyHostname(h) != nil {
				return false
			}
		}
		return true
	}
	if err := ensureLeaf(ca, b.ServerCert, b.ServerKey, x509.ExtKeyUsageServerAuth, now, fits,
		func(tmpl *x509.Certificate) {
			tmpl.Subject = pkix.Name{CommonName: firstHost(dnsNames, ips)}
			tmpl.DNSNames = dnsNames
			tmpl.IPAddresses = ips
		}); err != nil {
		return nil, err
	}

	// Client SVID.
	if err := ensureLeaf(ca, b.ClientCert, b.ClientKey, x509.ExtKeyUsageClientAuth, now,
		func(cert *x509.Certificate) bool {
			return len(cert.URIs) == 1 && cert.URIs[0].String() == id.String()
		},
		svidTemplate(id)); err != nil {
		return nil, err
	}
	return b, nil
}

// IssueSVID issues a client X.509 SVID for spiffeID, signed by the CA found
// in caDir (ca.crt, ca.key as written by Ensure). It writes outDir/svid.crt,
// outDir/svid.key (mode 0600) and a copy of the CA certificate as
// outDir/ca.crt for peers to verify against, creating outDir with mode 0700
// if needed. Existing svid.crt/svid.key in outDir are replaced. The
// certificate is valid for one year (capped at the CA's expiry) and carries
// ExtKeyUsage ClientAuth, KeyUsage DigitalSignature and the SPIFFE ID as
// its only SAN.
//
// spiffeID is validated with spiffeid.FromString and must have a non-empty
// path; a violation returns an error wrapping ErrInvalidSPIFFEID that names
// the rule. Any trust domain is accepted: the dev CA is not constrained.
func IssueSVID(caDir string, spiffeID string, outDir string, now time.Time) (certPath, keyPath string, err error) {
	id, err := parseSVIDID(spiffeID)
	if err != nil {
		return "", "", err
	}
	caCertPath := filepath.Join(caDir, caCertName)
	ca, err := loadCA(caCertPath, filepath.Join(caDir, caKeyName), now)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(outDir, dirPerm); err != nil {
		return "", "", fmt.Errorf("devpki: create %s: %w", outDir, err)
	}
	certPath = filepath.Join(outDir, svidCertName)
	keyPath = filepath.Join(outDir, svidKeyName)
	if err := issueLeaf(ca, certPath, keyPath, x509.ExtKeyUsageClientAuth, now, svidTemplate(id)); err != nil {
		return "", "", err
	}
	if err := copyCACert(caCertPath, filepath.Join(outDir, caCertName)); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// authority is a loaded CA certificate and its signing key.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// parseSVIDID validates s as a SPIFFE ID usable in an X.509 SVID.
func parseSVIDID(s string) (spiffeid.ID, error) {
	id, err := spiffeid.FromString(s)
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("%w %q: %w", ErrInvalidSPIFFEID, s, err)
	}
	if id.Path() == "" {
		return spiffeid.ID{}, fmt.Errorf("%w %q: an X.509 SVID must have a non-empty path", ErrInvalidSPIFFEID, s)
	}
	return id, nil
}

// splitHosts separates IP addresses from DNS names, dropping blanks and
// duplicates. Bracketed IPv6 literals ("[::1]") are accepted.
func splitHosts(hosts []string) (dnsNames []string, ips []net.IP) {
	seen := map[string]bool{}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		dnsNames = append(dnsNames, h)
	}
	return dnsNames, ips
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func firstHost(dnsNames []string, ips []net.IP) string {
	if len(dnsNames) > 0 {
		return dnsNames[0]
	}
	return ips[0].String()
}

// svidTemplate returns a template mutator for an X.509 SVID leaf: the SPIFFE
// ID as sole URI SAN and no DNS or IP SANs.
func svidTemplate(id spiffeid.ID) func(*x509.Certificate) {
	return func(tmpl *x509.Certificate) {
		tmpl.Subject = pkix.Name{Organization: []string{"lockd dev SVID"}}
		tmpl.URIs = []*url.URL{id.URL()}
	}
}

// ensureCA loads the CA from certPath/keyPath, or creates it if neither
// file exists. If only the key exists, the certificate is recreated from
// it (this recovers from an interrupted first run).
func ensureCA(certPath, keyPath string, now time.Time) (*authority, error) {
	certExists, err := exists(certPath)
	if err != nil {
		return nil, err
	}
	keyExists, err := exists(keyPath)
	if err != nil {
		return nil, err
	}
	switch {
	case certExists && keyExists:
		return loadCA(certPath, keyPath, now)
	case certExists && !keyExists:
		return nil, fmt.Errorf("%w: %s exists but %s is missing; refusing to replace the CA", ErrNoCA, certPath, keyPath)
	}

	var key crypto.Signer
	if keyExists {
		if key, err = readKey(keyPath); err != nil {
			return nil, err
		}
	} else {
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, fmt.Errorf("devpki: generate CA key: %w", err)
		}
		if err := writeKey(keyPath, key); err != nil {
			return nil, err
		}
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("devpki: create CA certificate: %w", err)
	}
	if err := writeCert(certPath, der); err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devpki: parse CA certificate: %w", err)
	}
	return &authority{cert: cert, key: key}, nil
}

// loadCA reads and checks an existing CA.
func loadCA(certPath, keyPath string, now time.Time) (*authority, error) {
	cert, err := readCert(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrNoCA, err)
	}
	if err != nil {
		return nil, err
	}
	key, err := readKey(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrNoCA, err)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, fmt.Errorf("%w: %s is not a CA certificate", ErrBadCA, certPath)
	case !publicKeysEqual(cert.PublicKey, key.Public()):
		return nil, fmt.Errorf("%w: %s does not match %s", ErrBadCA, keyPath, certPath)
	case now.Before(cert.NotBefore) || now.After(cert.NotAfter):
		return nil, fmt.Errorf("%w: %s is not valid at %s (valid %s to %s)", ErrBadCA, certPath,
			now.UTC().Format(time.RFC3339), cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return &authority{cert: cert, key: key}, nil
}

// ensureLeaf keeps the leaf at certPath/keyPath if it chains to ca for usage
// at now, its key matches and fits reports true; otherwise it issues a new
// one with customize applied to the template.
func ensureLeaf(ca *authority, certPath, keyPath string, usage x509.ExtKeyUsage, now time.Time,
	fits func(*x509.Certificate) bool, customize func(*x509.Certificate)) error {
	certExists, err := exists(certPath)
	if err != nil {
		return err
	}
	keyExists, err := exists(keyPath)
	if err != nil {
		return err
	}
	if certExists && keyExists {
		cert, err := readCert(certPath)
		if err != nil {
			return err
		}
		key, err := readKey(keyPath)
		if err != nil {
			return err
		}
		if publicKeysEqual(cert.PublicKey, key.Public()) && chainsTo(cert, ca, usage, now) && fits(cert) {
			return nil
		}
	}
	return issueLeaf(ca, certPath, keyPath, usage, now, customize)
}

// chainsTo reports whether cert verifies against ca for usage at now.
func chainsTo(cert *x509.Certificate, ca *authority, usage x509.ExtKeyUsage, now time.Time) bool {
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	return err == nil
}

// issueLeaf creates a fresh P-256 key and a leaf certificate signed by ca,
// valid for one year from now (capped at the CA's expiry), and writes key
// then certificate.
func issueLeaf(ca *authority, certPath, keyPath string, usage x509.ExtKeyUsage, now time.Time, customize func(*x509.Certificate)) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("devpki: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	notAfter := now.AddDate(1, 0, 0)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	customize(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return fmt.Errorf("devpki: create certificate %s: %w", certPath, err)
	}
	// Key first: a crash in between leaves a mismatched pair, which
	// ensureLeaf detects and repairs.
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writeCert(certPath, der)
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("devpki: generate serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ka, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ka.Equal(b)
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("devpki: %w", err)
	}
}

// readCert parses the first CERTIFICATE block of a PEM file.
func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("devpki: read certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: %s: no CERTIFICATE block", ErrBadPEM, path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadPEM, path, err)
	}
	return cert, nil
}

// readKey parses a PKCS#8 "PRIVATE KEY" (as written here) or SEC 1
// "EC PRIVATE KEY" PEM file. Errors never include key material.
func readKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("devpki: read key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: %s: no PEM block", ErrBadPEM, path)
	}
	var parsed any
	switch block.Type {
	case "PRIVATE KEY":
		parsed, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		parsed, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("%w: %s: unexpected PEM block type %q", ErrBadPEM, path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: cannot parse private key", ErrBadPEM, path)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: %s: key type %T cannot sign", ErrBadPEM, path, parsed)
	}
	return signer, nil
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("devpki: encode key %s: %w", path, err)
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), keyPerm)
}

func writeCert(path string, der []byte) error {
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), certPerm)
}

// copyCACert copies the CA certificate to dst unless dst is the same file.
func copyCACert(src, dst string) error {
	if si, err := os.Stat(src); err == nil {
		if di, err := os.Stat(dst); err == nil && os.SameFile(si, di) {
			return nil
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("devpki: read CA certificate: %w", err)
	}
	return writeFileAtomic(dst, data, certPerm)
}

// writeFileAtomic writes data to a temporary file in path's directory with
// mode perm and renames it over path, so readers never see a partial file.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("devpki: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("devpki: write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("devpki: write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("devpki: write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("devpki: write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("devpki: write %s: %w", path, err)
	}
	return nil
}
