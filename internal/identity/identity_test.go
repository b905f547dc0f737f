package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/devpki"
)

const devID = "spiffe://lockd.local/dev"

// recorder is a unary interceptor remembering the identity of the last call.
type recorder struct {
	ext Extractor

	mu    sync.Mutex
	calls int
	id    spiffeid.ID
	err   error
}

func (r *recorder) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	id, err := r.ext.Identity(ctx)
	r.mu.Lock()
	r.calls++
	r.id, r.err = id, err
	r.mu.Unlock()
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return handler(ctx, req)
}

func (r *recorder) last() (int, spiffeid.ID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.id, r.err
}

// serve starts a health server on 127.0.0.1:0 and returns its address.
func serve(t *testing.T, rec *recorder, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(append(opts, grpc.UnaryInterceptor(rec.intercept))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func check(t *testing.T, addr string, opts ...grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestMutualTLS(t *testing.T) {
	now := time.Now()
	b, err := devpki.Ensure(t.TempDir(), []string{"127.0.0.1", "localhost"}, devID, now)
	require.NoError(t, err)
	other, err := devpki.Ensure(t.TempDir(), []string{"127.0.0.1"}, devID, now)
	require.NoError(t, err)

	serverCfg, err := ServerTLS(b.ServerCert, b.ServerKey, b.CACert)
	require.NoError(t, err)
	require.Equal(t, uint16(tls.VersionTLS13), serverCfg.MinVersion)
	require.Equal(t, tls.RequireAndVerifyClientCert, serverCfg.ClientAuth)

	rec := &recorder{}
	addr := serve(t, rec, grpc.Creds(credentials.NewTLS(serverCfg)))

	tests := []struct {
		name       string
		ca         string
		cert, key  string
		serverName string
		wantID     string // empty: the handshake must refuse the call
	}{
		{name: "dev svid", ca: b.CACert, cert: b.ClientCert, key: b.ClientKey, wantID: devID},
		{name: "dev svid localhost", ca: b.CACert, cert: b.ClientCert, key: b.ClientKey, serverName: "localhost", wantID: devID},
		{name: "no client cert", ca: b.CACert},
		{name: "svid from another CA", ca: b.CACert, cert: other.ClientCert, key: other.ClientKey},
		{name: "server cert as client cert", ca: b.CACert, cert: b.ServerCert, key: b.ServerKey},
		{name: "client does not trust server", ca: other.CACert, cert: b.ClientCert, key: b.ClientKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clientCfg, err := ClientTLS(tc.ca, tc.cert, tc.key, tc.serverName)
			require.NoError(t, err)
			before, _, _ := rec.last()

			err = check(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(clientCfg)))
			after, id, idErr := rec.last()
			if tc.wantID == "" {
				require.Error(t, err)
				require.Equal(t, codes.Unavailable, status.Code(err), "want handshake failure, got %v", err)
				require.Equal(t, before, after, "handler must not be reached")
				return
			}
			require.NoError(t, err)
			require.Equal(t, before+1, after)
			require.NoError(t, idErr)
			require.Equal(t, tc.wantID, id.String())
		})
	}
}

func TestInsecureLoopback(t *testing.T) {
	rec := &recorder{ext: Extractor{Insecure: true}}
	addr := serve(t, rec)
	require.NoError(t, CheckLoopback(addr))

	tests := []struct {
		name    string
		creds   credentials.PerRPCCredentials
		wantID  string
		wantErr bool
	}{
		{name: "header set", creds: InsecurePerRPC(devID), wantID: devID},
		{name: "other id", creds: InsecurePerRPC("spiffe://example.org/ci"), wantID: "spiffe://example.org/ci"},
		{name: "no header", wantErr: true},
		{name: "not a spiffe id", creds: InsecurePerRPC("http://x"), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if tc.creds != nil {
				opts = append(opts, grpc.WithPerRPCCredentials(tc.creds))
			}
			err := check(t, addr, opts...)
			_, id, idErr := rec.last()
			if tc.wantErr {
				require.Equal(t, codes.Unauthenticated, status.Code(err))
				require.ErrorIs(t, idErr, ErrUnauthenticated)
				return
			}
			require.NoError(t, err)
			require.NoError(t, idErr)
			require.Equal(t, tc.wantID, id.String())
		})
	}
}

func TestTLSExtractorOnPlaintext(t *testing.T) {
	rec := &recorder{}
	addr := serve(t, rec)
	err := check(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(InsecurePerRPC(devID)))
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, _, idErr := rec.last()
	require.ErrorIs(t, idErr, ErrUnauthenticated)
	require.ErrorContains(t, idErr, "not TLS")
}

type fakeAuth struct{}

func (fakeAuth) AuthType() string { return "fake" }

func TestFromContext(t *testing.T) {
	b, err := devpki.Ensure(t.TempDir(), []string{"localhost"}, devID, time.Now())
	require.NoError(t, err)
	svid := parseCert(t, b.ClientCert)
	server := parseCert(t, b.ServerCert)
	withAuth := func(ai credentials.AuthInfo) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, AuthInfo: ai})
	}
	tlsInfo := func(leaf *x509.Certificate) credentials.TLSInfo {
		var info credentials.TLSInfo
		if leaf != nil {
			info.State.VerifiedChains = [][]*x509.Certificate{{leaf}}
		}
		return info
	}

	tests := []struct {
		name     string
		ctx      context.Context
		wantID   string
		wantText string
	}{
		{name: "svid", ctx: withAuth(tlsInfo(svid)), wantID: devID},
		{name: "svid pointer info", ctx: withAuth(func() *credentials.TLSInfo { i := tlsInfo(svid); return &i }()), wantID: devID},
		{name: "no peer", ctx: context.Background(), wantText: "no peer"},
		{name: "not tls", ctx: withAuth(fakeAuth{}), wantText: "not TLS"},
		{name: "nil auth", ctx: withAuth(nil), wantText: "not TLS"},
		{name: "no client cert", ctx: withAuth(tlsInfo(nil)), wantText: "no verified client certificate"},
		{name: "no URI SAN", ctx: withAuth(tlsInfo(server)), wantText: "no SPIFFE ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := FromContext(tc.ctx)
			if tc.wantID == "" {
				require.ErrorIs(t, err, ErrUnauthenticated)
				require.ErrorContains(t, err, tc.wantText)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantID, id.String())
		})
	}
}

func TestExtractorInsecure(t *testing.T) {
	ctxFor := func(addr net.Addr, vals ...string) context.Context {
		ctx := context.Background()
		if addr != nil {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
		}
		md := metadata.MD{}
		for _, v := range vals {
			md.Append(InsecureIdentityHeader, v)
		}
		return metadata.NewIncomingContext(ctx, md)
	}
	loop4 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	loop6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 1}
	remote := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}

	tests := []struct {
		name     string
		ctx      context.Context
		wantID   string
		wantText string
	}{
		{name: "ipv4 loopback", ctx: ctxFor(loop4, devID), wantID: devID},
		{name: "ipv6 loopback", ctx: ctxFor(loop6, devID), wantID: devID},
		{name: "remote peer", ctx: ctxFor(remote, devID), wantText: "non-loopback peer"},
		{name: "unix peer", ctx: ctxFor(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, devID), wantText: "non-loopback peer"},
		{name: "no peer", ctx: ctxFor(nil, devID), wantText: "no peer"},
		{name: "missing header", ctx: ctxFor(loop4), wantText: "missing"},
		{name: "two headers", ctx: ctxFor(loop4, devID, devID), wantText: "multiple"},
		{name: "bad id", ctx: ctxFor(loop4, "spiffe://"), wantText: "trust domain is missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := Extractor{Insecure: true}.Identity(tc.ctx)
			if tc.wantID == "" {
				require.ErrorIs(t, err, ErrUnauthenticated)
				require.ErrorContains(t, err, tc.wantText)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantID, id.String())
		})
	}
}

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{addr: "127.0.0.1:7420", ok: true},
		{addr: "127.1.2.3:0", ok: true},
		{addr: "[::1]:7420", ok: true},
		{addr: "localhost:7420", ok: true},
		{addr: "LOCALHOST:7420", ok: true},
		{addr: "[::ffff:127.0.0.1]:7420", ok: true},
		{addr: ":7420"},
		{addr: "0.0.0.0:7420"},
		{addr: "[::]:7420"},
		{addr: "10.0.0.1:7420"},
		{addr: "example.com:7420"},
		{addr: "localhost.example.com:7420"},
		{addr: "127.0.0.1"},
		{addr: ""},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			err := CheckLoopback(tc.addr)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrNotLoopback)
			require.ErrorContains(t, err, `identity: --insecure-loopback refuses non-loopback address "`+tc.addr+`"`)
		})
	}
}

func TestTLSConfigErrors(t *testing.T) {
	b, err := devpki.Ensure(t.TempDir(), []string{"localhost"}, devID, time.Now())
	require.NoError(t, err)
	junk := filepath.Join(t.TempDir(), "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not pem"), 0o600))
	missing := filepath.Join(t.TempDir(), "missing.pem")

	tests := []struct {
		name string
		fn   func() error
	}{
		{name: "server missing CA", fn: func() error { _, err := ServerTLS(b.ServerCert, b.ServerKey, missing); return err }},
		{name: "server junk CA", fn: func() error { _, err := ServerTLS(b.ServerCert, b.ServerKey, junk); return err }},
		{name: "server mismatched key", fn: func() error { _, err := ServerTLS(b.ServerCert, b.ClientKey, b.CACert); return err }},
		{name: "client junk CA", fn: func() error { _, err := ClientTLS(junk, b.ClientCert, b.ClientKey, ""); return err }},
		{name: "client cert without key", fn: func() error { _, err := ClientTLS(b.CACert, b.ClientCert, "", ""); return err }},
		{name: "client missing key", fn: func() error { _, err := ClientTLS(b.CACert, b.ClientCert, missing, ""); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.fn(), ErrTLSConfig)
		})
	}
}

func parseCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(data)
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

func TestCaller(t *testing.T) {
	w := Workload(devID)
	require.False(t, w.IsOperator())
	require.Equal(t, devID, w.String(), "a workload is recorded as its SPIFFE ID")

	op := Operator("ann-sub", "ann", devID)
	require.True(t, op.IsOperator())
	require.Equal(t, "oidc:ann-sub", op.String(), "an operator is recorded as oidc: and the subject")
	require.Equal(t, Caller{Kind: KindOperator, ID: "ann-sub", Name: "ann", Via: devID}, op)

	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(InsecureIdentityHeader, devID))
	c, err := Extractor{Insecure: true}.Caller(ctx)
	require.NoError(t, err)
	require.Equal(t, w, c)
	_, err = Extractor{Insecure: true}.Caller(context.Background())
	require.ErrorIs(t, err, ErrUnauthenticated)
}
