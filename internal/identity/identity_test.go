package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
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

// The identities of the XFCC tests: Envoy (the edge, and a second edge),
// a workload calling lockd directly and the workload Envoy forwards.
const (
	edgeID       = "spiffe://lockd.local/ns/lockd/sa/envoy"
	otherEdgeID  = "spiffe://lockd.local/ns/lockd/sa/envoy-canary"
	directID     = "spiffe://lockd.local/payments/direct"
	forwardedID  = "spiffe://lockd.local/payments/worker"
	envoyXFCCFmt = "By=" + edgeID + ";Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;URI=%s"
)

// svids issues an X.509 SVID for each id from one dev CA and returns the
// parsed leaves, by id.
func svids(t *testing.T, ids ...string) map[string]*x509.Certificate {
	t.Helper()
	pki := t.TempDir()
	_, err := devpki.Ensure(pki, []string{"localhost"}, devID, time.Now())
	require.NoError(t, err)
	out := make(map[string]*x509.Certificate, len(ids))
	for _, id := range ids {
		certPath, _, err := devpki.IssueSVID(pki, id, t.TempDir(), time.Now())
		require.NoError(t, err)
		out[id] = parseCert(t, certPath)
	}
	return out
}

func TestXFCCIsTrustedOnlyFromTheEdge(t *testing.T) {
	certs := svids(t, edgeID, otherEdgeID, directID)
	edges := []spiffeid.ID{spiffeid.RequireFromString(edgeID), spiffeid.RequireFromString(otherEdgeID)}
	behindEnvoy := Extractor{Edges: edges}

	// from is a request over mTLS from the peer with SVID id, carrying md.
	from := func(id string, md metadata.MD) context.Context {
		var info credentials.TLSInfo
		info.State.VerifiedChains = [][]*x509.Certificate{{certs[id]}}
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 40000}, AuthInfo: info})
		if md != nil {
			ctx = metadata.NewIncomingContext(ctx, md)
		}
		return ctx
	}
	xfcc := func(vals ...string) metadata.MD { return metadata.MD{XFCCHeader: vals} }
	envoySet := func(uri string) metadata.MD { return xfcc(fmt.Sprintf(envoyXFCCFmt, uri)) }

	tests := []struct {
		name     string
		ext      *Extractor // nil: behindEnvoy
		ctx      context.Context
		wantID   string
		wantText string // the refusal's reason
	}{
		// Any other peer is the caller, whatever it sends.
		{name: "direct peer without XFCC", ctx: from(directID, nil), wantID: directID},
		{name: "direct peer spoofing XFCC is itself", ctx: from(directID, envoySet(forwardedID)), wantID: directID},
		{name: "direct peer with a malformed XFCC is itself", ctx: from(directID, xfcc(`URI="unterminated`)), wantID: directID},
		{name: "direct peer with two XFCC headers is itself", ctx: from(directID, xfcc("URI="+forwardedID, "URI="+edgeID)), wantID: directID},
		{name: "Envoy is not an edge unless configured", ext: &Extractor{}, ctx: from(edgeID, envoySet(forwardedID)), wantID: edgeID},

		// The edge: the one element Envoy set, with one SPIFFE URI.
		{name: "edge as Envoy sets it: By and Hash before URI", ctx: from(edgeID, envoySet(forwardedID)), wantID: forwardedID},
		{name: "edge with URI only", ctx: from(edgeID, xfcc("URI="+forwardedID)), wantID: forwardedID},
		{name: "edge with URI first", ctx: from(edgeID, xfcc("URI="+forwardedID+";By="+edgeID+";Hash=abc")), wantID: forwardedID},
		{name: "second edge", ctx: from(otherEdgeID, envoySet(forwardedID)), wantID: forwardedID},
		{name: "field keys without case", ctx: from(edgeID, xfcc("by="+edgeID+";hash=abc;uri="+forwardedID)), wantID: forwardedID},
		{name: "quoted URI", ctx: from(edgeID, xfcc(`By=`+edgeID+`;URI="`+forwardedID+`"`)), wantID: forwardedID},
		{name: "quoted subject holding separators and an escaped quote", ctx: from(edgeID,
			xfcc(`Hash=abc;Subject="CN=Test \"Client\",OU=a;b,O=c=d";URI=`+forwardedID+`;DNS=worker.payments`)), wantID: forwardedID},
		{name: "header key in mixed case", ctx: from(edgeID, metadata.MD{"X-Forwarded-Client-Cert": {"URI=" + forwardedID}}), wantID: forwardedID},

		// Anything else from the edge is refused, never the edge itself.
		{name: "edge without XFCC", ctx: from(edgeID, nil), wantText: "no x-forwarded-client-cert header"},
		{name: "edge with other headers only", ctx: from(edgeID, metadata.Pairs("x-lock-key", "payments/a")), wantText: "no x-forwarded-client-cert header"},
		{name: "edge with two XFCC headers", ctx: from(edgeID, xfcc("URI="+forwardedID, "URI="+forwardedID)), wantText: "2 x-forwarded-client-cert headers"},
		{name: "edge with two elements (appended, not set)", ctx: from(edgeID,
			xfcc("By=spiffe://evil.test/proxy;URI=spiffe://lockd.local/ops/oncall,"+fmt.Sprintf(envoyXFCCFmt, forwardedID))), wantText: "has 2 elements"},
		{name: "edge with no URI", ctx: from(edgeID, xfcc("By="+edgeID+";Hash=abc")), wantText: "0 URI fields"},
		{name: "edge with an empty URI (a client cert without URI SAN)", ctx: from(edgeID, envoySet("")), wantText: "not a SPIFFE ID"},
		{name: "edge with two URIs", ctx: from(edgeID, xfcc("URI="+forwardedID+";URI=spiffe://lockd.local/ops/oncall")), wantText: "2 URI fields"},
		{name: "edge with a URI that is not SPIFFE", ctx: from(edgeID, envoySet("https://payments.example/worker")), wantText: "not a SPIFFE ID"},
		{name: "edge with a SPIFFE ID without trust domain", ctx: from(edgeID, envoySet("spiffe:///worker")), wantText: "not a SPIFFE ID"},
		{name: "edge forwarding its own identity", ctx: from(edgeID, envoySet(edgeID)), wantText: "names an edge"},
		{name: "edge forwarding another edge", ctx: from(edgeID, envoySet(otherEdgeID)), wantText: "names an edge"},
		{name: "empty XFCC", ctx: from(edgeID, xfcc("")), wantText: "malformed"},
		{name: "unterminated quote", ctx: from(edgeID, xfcc(`URI="`+forwardedID)), wantText: "unterminated quoted value"},
		{name: "text after a closing quote", ctx: from(edgeID, xfcc(`URI="`+forwardedID+`"x`)), wantText: "after a quoted value"},
		{name: "bad escape", ctx: from(edgeID, xfcc(`Subject="a\b";URI=`+forwardedID)), wantText: "bad escape"},
		{name: "unquoted value holding '='", ctx: from(edgeID, xfcc("URI="+forwardedID+"?a=b")), wantText: "unquoted value"},
		{name: "field without '='", ctx: from(edgeID, xfcc("Hash;URI="+forwardedID)), wantText: "without key=value"},
		{name: "trailing ';'", ctx: from(edgeID, xfcc("URI="+forwardedID+";")), wantText: "without key=value"},
		{name: "empty element", ctx: from(edgeID, xfcc("URI="+forwardedID+",,")), wantText: "without key=value"},
		{name: "empty key", ctx: from(edgeID, xfcc("=x;URI="+forwardedID)), wantText: "empty key"},
		{name: "edge without a verified certificate", ctx: peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}),
			wantText: "no verified client certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ext := behindEnvoy
			if tc.ext != nil {
				ext = *tc.ext
			}
			id, err := ext.Identity(tc.ctx)
			if tc.wantID == "" {
				require.ErrorIs(t, err, ErrUnauthenticated)
				require.ErrorContains(t, err, tc.wantText)
				require.Equal(t, spiffeid.ID{}, id, "a refusal carries no identity")
				require.NotContains(t, err.Error(), "468ed33b", "a refusal never repeats the header's Hash")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantID, id.String())
			c, err := ext.Caller(tc.ctx)
			require.NoError(t, err)
			require.Equal(t, Workload(tc.wantID), c)
		})
	}

	t.Run("insecure mode ignores the edges and XFCC", func(t *testing.T) {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(InsecureIdentityHeader, devID, XFCCHeader, "URI="+forwardedID))
		id, err := Extractor{Insecure: true, Edges: edges}.Identity(ctx)
		require.NoError(t, err)
		require.Equal(t, devID, id.String())
	})
}

// TestXFCCOverMutualTLS runs the edge rule over real mTLS connections: the
// edge's SVID with a forwarded identity is the forwarded caller, the same
// header from another workload's SVID is ignored, and the edge alone is
// refused.
func TestXFCCOverMutualTLS(t *testing.T) {
	now := time.Now()
	pki := t.TempDir()
	b, err := devpki.Ensure(pki, []string{"127.0.0.1"}, devID, now)
	require.NoError(t, err)
	edgeCert, edgeKey, err := devpki.IssueSVID(pki, edgeID, t.TempDir(), now)
	require.NoError(t, err)

	serverCfg, err := ServerTLS(b.ServerCert, b.ServerKey, b.CACert)
	require.NoError(t, err)
	rec := &recorder{ext: Extractor{Edges: []spiffeid.ID{spiffeid.RequireFromString(edgeID)}}}
	addr := serve(t, rec, grpc.Creds(credentials.NewTLS(serverCfg)))

	tests := []struct {
		name      string
		cert, key string
		xfcc      string
		wantID    string
	}{
		{name: "edge forwarding a caller", cert: edgeCert, key: edgeKey, xfcc: fmt.Sprintf(envoyXFCCFmt, forwardedID), wantID: forwardedID},
		{name: "edge alone", cert: edgeCert, key: edgeKey},
		{name: "workload spoofing XFCC", cert: b.ClientCert, key: b.ClientKey, xfcc: fmt.Sprintf(envoyXFCCFmt, forwardedID), wantID: devID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clientCfg, err := ClientTLS(b.CACert, tc.cert, tc.key, "")
			require.NoError(t, err)
			opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(clientCfg))}
			if tc.xfcc != "" {
				opts = append(opts, grpc.WithPerRPCCredentials(headerCreds{XFCCHeader: tc.xfcc}))
			}
			err = check(t, addr, opts...)
			_, id, idErr := rec.last()
			if tc.wantID == "" {
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

// headerCreds sends fixed metadata with every call.
type headerCreds map[string]string

func (h headerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return h, nil
}

func (headerCreds) RequireTransportSecurity() bool { return true }
