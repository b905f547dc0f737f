// Package identity establishes who is calling lockd: it builds the mutual
// TLS configurations for server and client, extracts the caller's SPIFFE
// ID from a gRPC request context, and defines Caller, the authenticated
// caller the gRPC boundary hands to the arbiter.
//
// Authentication here only proves that the caller holds a certificate
// issued by the configured CA and carrying a SPIFFE ID; it does not check
// the trust domain or decide what the caller may do. Authorisation is the
// caller's job.
//
// Behind Envoy the TLS peer is Envoy, not the caller. An Extractor given
// the edge's SPIFFE IDs (Extractor.Edges) then takes the caller from the
// x-forwarded-client-cert header Envoy sets, and only from a peer that is
// one of those edges; see Extractor.Identity.
package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/lockd-dev/lockd/pkg/client"
)

// Sentinel errors returned (wrapped) by this package. Use errors.Is to test
// for them.
var (
	// ErrUnauthenticated reports that no identity could be established for
	// a request. The wrapping error carries a short reason.
	ErrUnauthenticated = errors.New("identity: unauthenticated")
	// ErrNotLoopback reports a listen address refused by CheckLoopback.
	ErrNotLoopback = errors.New("identity: --insecure-loopback refuses non-loopback address")
	// ErrTLSConfig reports unusable certificate, key or CA files.
	ErrTLSConfig = errors.New("identity: bad TLS configuration")
)

// InsecureIdentityHeader is the gRPC metadata key from which an Extractor
// in insecure mode takes the caller's SPIFFE ID. The value is asserted by
// the client and not verified in any way.
const InsecureIdentityHeader = client.InsecureIdentityHeader

// XFCCHeader is the header in which Envoy forwards the certificate details
// of the client whose mutual TLS it terminated (forward_client_cert_details
// SANITIZE_SET with set_current_client_cert_details uri: true). An
// Extractor reads it only on requests from one of its Edges.
const XFCCHeader = "x-forwarded-client-cert"

// ServerTLS returns a server TLS configuration that requires TLS 1.3 and a
// client certificate verifying against the CA certificates in clientCAFile
// (PEM). certFile and keyFile are the server's PEM certificate and key.
//
// Every certificate chaining to clientCAFile with ExtKeyUsage ClientAuth is
// accepted, whatever its SPIFFE ID or trust domain; use FromContext or
// Extractor and authorise the returned ID.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: load key pair %s: %w", ErrTLSConfig, certFile, err)
	}
	pool, err := loadPool(clientCAFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// ClientTLS returns a client TLS configuration (TLS 1.3 minimum) that trusts
// the CA certificates in caFile (PEM) and presents the certificate in
// certFile/keyFile. If both certFile and keyFile are empty no client
// certificate is presented, which a ServerTLS server refuses.
//
// serverName overrides the name checked against the server certificate; if
// empty, gRPC uses the host of the dial target.
func ClientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg, err := client.TLSFromFiles(caFile, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLSConfig, err)
	}
	cfg.ServerName = serverName
	return cfg, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: read CA file: %w", ErrTLSConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: no PEM certificates in %s", ErrTLSConfig, caFile)
	}
	return pool, nil
}

// FromContext returns the SPIFFE ID of the caller of a gRPC server handler,
// taken from the leaf of the first verified TLS client chain. It relies on
// the server's TLS configuration (see ServerTLS) having verified the chain;
// it never verifies certificates itself. Errors wrap ErrUnauthenticated.
func FromContext(ctx context.Context) (spiffeid.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return spiffeid.ID{}, fmt.Errorf("%w: no peer in context", ErrUnauthenticated)
	}
	var info credentials.TLSInfo
	switch ai := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		info = ai
	case *credentials.TLSInfo:
		if ai == nil {
			return spiffeid.ID{}, fmt.Errorf("%w: connection is not TLS", ErrUnauthenticated)
		}
		info = *ai
	default:
		return spiffeid.ID{}, fmt.Errorf("%w: connection is not TLS", ErrUnauthenticated)
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return spiffeid.ID{}, fmt.Errorf("%w: no verified client certificate", ErrUnauthenticated)
	}
	id, err := x509svid.IDFromCert(chains[0][0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("%w: no SPIFFE ID in client certificate: %w", ErrUnauthenticated, err)
	}
	return id, nil
}

// Extractor establishes the caller identity for gRPC server handlers.
// The zero value uses mutual TLS (FromContext).
type Extractor struct {
	// Insecure makes Identity trust the InsecureIdentityHeader metadata
	// sent by the client instead of a certificate. Any local process can
	// then claim any identity: it must only be enabled for tests, with a
	// listener checked by CheckLoopback. Identity additionally refuses
	// requests whose peer address is not a loopback IP. Edges do not apply
	// in this mode (lockd refuses the combination).
	Insecure bool

	// Edges are the SPIFFE IDs of the proxies (Envoy) that terminate the
	// callers' mutual TLS in front of lockd. A request whose verified mTLS
	// peer is one of them is made for the caller named in its XFCCHeader,
	// and never for the edge itself: without one valid forwarded SPIFFE ID
	// it is refused. From every other peer the header is ignored. Empty:
	// no peer is an edge, and the caller is always the mTLS peer.
	Edges []spiffeid.ID
}

// Identity returns the caller's SPIFFE ID. Errors wrap ErrUnauthenticated.
//
// With Insecure set it parses the single InsecureIdentityHeader value and
// requires a loopback TCP peer. Otherwise it is the mTLS peer's SPIFFE ID
// (FromContext), unless that peer is one of Edges. A request from an edge
// must carry exactly one XFCCHeader value holding exactly one element (the
// one Envoy sets for this hop; SANITIZE_SET replaces whatever the client
// sent) with exactly one URI field, a SPIFFE ID that is not itself an
// edge's: that ID is the caller. Anything else from an edge (no header,
// several headers or elements, no URI or several, a URI that is not a
// SPIFFE ID, malformed quoting) is refused; it never falls back to the
// edge's own ID. The header's By, Hash and other fields are not used.
func (e Extractor) Identity(ctx context.Context) (spiffeid.ID, error) {
	if e.Insecure {
		return assertedIdentity(ctx)
	}
	id, err := FromContext(ctx)
	if err != nil || !slices.Contains(e.Edges, id) {
		return id, err
	}
	return e.forwarded(ctx)
}

// assertedIdentity is Identity in Insecure mode.
func assertedIdentity(ctx context.Context) (spiffeid.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return spiffeid.ID{}, fmt.Errorf("%w: no peer address in context", ErrUnauthenticated)
	}
	if !isLoopbackAddr(p.Addr) {
		return spiffeid.ID{}, fmt.Errorf("%w: insecure identity from non-loopback peer %q", ErrUnauthenticated, p.Addr.String())
	}
	vals := metadata.ValueFromIncomingContext(ctx, InsecureIdentityHeader) // one key, without copying the rest
	switch len(vals) {
	case 0:
		return spiffeid.ID{}, fmt.Errorf("%w: missing %s header", ErrUnauthenticated, InsecureIdentityHeader)
	case 1:
	default:
		return spiffeid.ID{}, fmt.Errorf("%w: multiple %s headers", ErrUnauthenticated, InsecureIdentityHeader)
	}
	id, err := spiffeid.FromString(vals[0])
	if err != nil {
		return spiffeid.ID{}, fmt.Errorf("%w: bad %s header: %w", ErrUnauthenticated, InsecureIdentityHeader, err)
	}
	return id, nil
}

// forwarded is the caller an edge forwarded in the XFCCHeader. The
// refusals name what is wrong, never the header's value.
func (e Extractor) forwarded(ctx context.Context) (spiffeid.ID, error) {
	refuse := func(format string, args ...any) (spiffeid.ID, error) {
		return spiffeid.ID{}, fmt.Errorf("%w: request from the edge: "+format, append([]any{ErrUnauthenticated}, args...)...)
	}
	vals := metadata.ValueFromIncomingContext(ctx, XFCCHeader)
	switch len(vals) {
	case 0:
		return refuse("no %s header (the edge's own identity is never a caller)", XFCCHeader)
	case 1:
	default:
		return refuse("%d %s headers, want exactly 1", len(vals), XFCCHeader)
	}
	elems, err := parseXFCC(vals[0])
	if err != nil {
		return refuse("malformed %s header: %w", XFCCHeader, err)
	}
	if len(elems) != 1 {
		return refuse("%s header has %d elements, want exactly 1 (the edge must replace it: SANITIZE_SET)", XFCCHeader, len(elems))
	}
	var uris []string
	for _, f := range elems[0] {
		if strings.EqualFold(f.key, "URI") {
			uris = append(uris, f.value)
		}
	}
	if len(uris) != 1 {
		return refuse("%s element has %d URI fields, want exactly 1", XFCCHeader, len(uris))
	}
	id, err := spiffeid.FromString(uris[0])
	if err != nil {
		return refuse("%s URI is not a SPIFFE ID: %w", XFCCHeader, err)
	}
	if slices.Contains(e.Edges, id) {
		return refuse("%s URI names an edge, which is never a caller", XFCCHeader)
	}
	return id, nil
}

// xfccField is one key=value pair of an XFCC element.
type xfccField struct{ key, value string }

// errXFCCSyntax reports an x-forwarded-client-cert value that does not
// follow Envoy's format.
var errXFCCSyntax = errors.New("not in Envoy's XFCC format")

// parseXFCC splits an x-forwarded-client-cert value into its elements, in
// Envoy's documented format: elements are separated by ',', each is a list
// of key=value fields separated by ';'. A value holding ',', ';' or '='
// must be double-quoted; inside quotes '"' and '\' are escaped with a
// backslash. Keys are returned as written (they compare without case),
// values unquoted. Empty keys, empty elements, an unquoted value holding
// '=' or '"', an unterminated quote or a stray character after one are
// errors wrapping errXFCCSyntax.
func parseXFCC(s string) ([][]xfccField, error) {
	var elems [][]xfccField
	var cur []xfccField
	for i := 0; ; {
		n := strings.IndexAny(s[i:], "=;,\"")
		if n < 0 || s[i+n] != '=' {
			return nil, fmt.Errorf("%w: a field without key=value", errXFCCSyntax)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: a field with an empty key", errXFCCSyntax)
		}
		key := s[i : i+n]
		i += n + 1
		var value string
		if i < len(s) && s[i] == '"' {
			var b strings.Builder
			closed := false
			for i++; i < len(s) && !closed; i++ {
				switch c := s[i]; c {
				case '"':
					closed = true
				case '\\':
					if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
						return nil, fmt.Errorf("%w: a bad escape in a quoted value", errXFCCSyntax)
					}
					i++
					b.WriteByte(s[i])
				default:
					b.WriteByte(c)
				}
			}
			if !closed {
				return nil, fmt.Errorf("%w: an unterminated quoted value", errXFCCSyntax)
			}
			value = b.String()
		} else {
			n := strings.IndexAny(s[i:], ";,=\"")
			if n < 0 {
				n = len(s) - i
			} else if c := s[i+n]; c == '=' || c == '"' {
				return nil, fmt.Errorf("%w: an unquoted value holding %q", errXFCCSyntax, c)
			}
			value = s[i : i+n]
			i += n
		}
		cur = append(cur, xfccField{key: key, value: value})
		if i == len(s) {
			return append(elems, cur), nil
		}
		switch s[i] {
		case ';':
		case ',':
			elems, cur = append(elems, cur), nil
		default:
			return nil, fmt.Errorf("%w: %q after a quoted value", errXFCCSyntax, s[i])
		}
		i++
	}
}

func isLoopbackAddr(a net.Addr) bool {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.IsLoopback()
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// CheckLoopback returns an error wrapping ErrNotLoopback unless listenAddr
// ("host:port") has a loopback IP host (127.0.0.0/8, ::1) or the host
// "localhost". An empty host (":7420"), which listens on all interfaces, is
// refused. "localhost" is trusted by name; a resolver that maps it to a
// non-loopback address defeats this check.
func CheckLoopback(listenAddr string) error {
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return fmt.Errorf("%w %q: %w", ErrNotLoopback, listenAddr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w %q", ErrNotLoopback, listenAddr)
}

// InsecurePerRPC returns client credentials that send id in the
// InsecureIdentityHeader metadata of every call, over plaintext
// (client.InsecureIdentity). Only for tests against a server using
// Extractor{Insecure: true}; the server takes the value on trust.
func InsecurePerRPC(id string) credentials.PerRPCCredentials { return client.InsecureIdentity(id) }

// Kind says how a caller was authenticated.
type Kind int

// Caller kinds.
const (
	// KindWorkload is a workload, named by its SPIFFE ID.
	KindWorkload Kind = iota + 1
	// KindOperator is a person signed in with OIDC, verified by lockd.
	KindOperator
)

// operatorPrefix marks an operator in the identity strings lockd records.
const operatorPrefix = "oidc:"

// Caller is who is calling lockd. Only the gRPC boundary builds one: from
// the mTLS certificate (Extractor.Caller) or a verified operator token
// (Operator).
type Caller struct {
	// Kind says how the caller was authenticated.
	Kind Kind
	// ID is a workload's SPIFFE ID or an operator's OIDC subject.
	ID string
	// Name is an operator's preferred_username (or subject).
	Name string
	// Via is the SPIFFE ID an operator's call came over.
	Via string
}

// Workload is the caller with SPIFFE ID id.
func Workload(id string) Caller { return Caller{Kind: KindWorkload, ID: id} }

// Operator is a signed-in operator with OIDC subject and name, calling
// over the workload identity via.
func Operator(subject, name, via string) Caller {
	return Caller{Kind: KindOperator, ID: subject, Name: name, Via: via}
}

// IsOperator reports whether c is a signed-in operator.
func (c Caller) IsOperator() bool { return c.Kind == KindOperator }

// String is the caller as lockd records and shows it: the SPIFFE ID, or
// "oidc:" and the subject.
func (c Caller) String() string {
	if c.Kind == KindOperator {
		return operatorPrefix + c.ID
	}
	return c.ID
}

// Caller is Identity as a workload Caller.
func (e Extractor) Caller(ctx context.Context) (Caller, error) {
	id, err := e.Identity(ctx)
	if err != nil {
		return Caller{}, err
	}
	return Workload(id.String()), nil
}
