package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	sslinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/ssl/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite envoy.yaml from the generator")

// goldenFile is the committed bootstrap, generated from DefaultParams.
const goldenFile = "envoy.yaml"

// validator is a message with protoc-gen-validate's rules: the checks
// Envoy itself runs on its configuration before it uses it.
type validator interface{ ValidateAll() error }

// visit calls fn on m and on every message below it, unpacking every Any
// (which ValidateAll does not look into) on the way; path names each
// message's place, an Any's by its type URL.
func visit(t *testing.T, m proto.Message, path string, fn func(path string, m proto.Message)) {
	t.Helper()
	if a, ok := m.(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s: Any of %s does not unpack: %v", path, a.GetTypeUrl(), err)
		}
		if got := "type.googleapis.com/" + string(inner.ProtoReflect().Descriptor().FullName()); got != a.GetTypeUrl() {
			t.Fatalf("%s: Any of %s unpacked into %s", path, a.GetTypeUrl(), got)
		}
		visit(t, inner, path+"<"+a.GetTypeUrl()+">", fn)
		return
	}
	fn(path, m)
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(t, mv.Message().Interface(), p+"["+k.String()+"]", fn)
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				visit(t, v.List().Get(i).Message().Interface(), p+"["+strconv.Itoa(i)+"]", fn)
			}
		case !fd.IsMap() && !fd.IsList() && fd.Message() != nil:
			visit(t, v.Message().Interface(), p, fn)
		}
		return true
	})
}

// TestEveryMessageValidates checks the bootstrap as Envoy would before
// using it: every message, the ones inside each typed_config included,
// passes its validation rules, and every Any unpacks into its type, which
// is one of the extensions the configuration means to use.
func TestEveryMessageValidates(t *testing.T) {
	b := mustBootstrap(t, DefaultParams())
	validated, types := 0, map[string]bool{}
	visit(t, b, "bootstrap", func(path string, m proto.Message) {
		types[string(m.ProtoReflect().Descriptor().FullName())] = true
		v, ok := m.(validator)
		if !ok {
			return
		}
		validated++
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	})
	if validated < 100 {
		t.Fatalf("only %d messages validated; the walk missed most of the bootstrap", validated)
	}
	for _, want := range []string{
		"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
		"envoy.extensions.filters.http.router.v3.Router",
		"envoy.extensions.matching.common_inputs.ssl.v3.UriSanInput",
		"envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
		"envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
		"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
		"envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
	} {
		if !types[want] {
			t.Errorf("no %s in the bootstrap", want)
		}
	}

	// As an xDS snapshot, the listeners and clusters reference nothing
	// that is missing (a route or endpoints served separately).
	var resources = map[resourcev3.Type][]cachetypes.Resource{}
	for _, l := range b.GetStaticResources().GetListeners() {
		resources[resourcev3.ListenerType] = append(resources[resourcev3.ListenerType], l)
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		resources[resourcev3.ClusterType] = append(resources[resourcev3.ClusterType], c)
	}
	snap, err := cachev3.NewSnapshot("1", resources)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Consistent(); err != nil {
		t.Fatalf("inconsistent as an xDS snapshot: %v", err)
	}
}

// TestTheBootstrapDoesWhatLockdNeeds checks the parts lockd relies on.
func TestTheBootstrapDoesWhatLockdNeeds(t *testing.T) {
	p := DefaultParams()
	b := mustBootstrap(t, p)
	const envoyID, lockdID, bundle = "spiffe://example.org/ns/lockd/sa/envoy", "spiffe://example.org/ns/lockd/sa/lockd", "spiffe://example.org"

	l := listener(t, b, "lockd")
	if got := l.GetAddress().GetSocketAddress().GetPortValue(); got != 8443 {
		t.Errorf("lockd listener on port %d, want 8443", got)
	}
	chain := l.GetFilterChains()[0]
	down := unpack[*tlsv3.DownstreamTlsContext](t, chain.GetTransportSocket().GetTypedConfig())
	if !down.GetRequireClientCertificate().GetValue() {
		t.Error("callers are not required to present a certificate")
	}
	checkSPIFFETLS(t, "downstream", down.GetCommonTlsContext(), envoyID, bundle,
		&tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: prefixMatcher("spiffe://example.org/")})

	hcm := resourcev3.GetHTTPConnectionManager(chain.GetFilters()[0])
	if hcm == nil {
		t.Fatal("the lockd listener's filter is not an HTTP connection manager")
	}
	if hcm.GetCodecType() != hcmv3.HttpConnectionManager_HTTP2 {
		t.Errorf("codec %v, want HTTP2 (gRPC)", hcm.GetCodecType())
	}
	if hcm.GetForwardClientCertDetails() != hcmv3.HttpConnectionManager_SANITIZE_SET || !hcm.GetSetCurrentClientCertDetails().GetUri() {
		t.Errorf("XFCC: %v with %v; lockd needs SANITIZE_SET with uri: true (one element, Envoy's)",
			hcm.GetForwardClientCertDetails(), hcm.GetSetCurrentClientCertDetails())
	}
	filters := hcm.GetHttpFilters()
	if n := len(filters); n != 2 || filters[0].GetName() != "envoy.filters.http.local_ratelimit" || filters[1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("HTTP filters %v; want the local rate limit, then the router", filters)
	}

	// The route: lock.v1 to lockd, hashed on the lock key, no timeouts
	// but the caller's.
	routes := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 1 {
		t.Fatalf("%d routes, want the lock.v1 route only", len(routes))
	}
	r := routes[0]
	if r.GetMatch().GetPrefix() != RoutePrefix || r.GetMatch().GetGrpc() == nil {
		t.Errorf("route matches %v; want gRPC calls under %s", r.GetMatch(), RoutePrefix)
	}
	action := r.GetRoute()
	if action.GetCluster() != LockdCluster {
		t.Errorf("route to %q, want %q", action.GetCluster(), LockdCluster)
	}
	if hp := action.GetHashPolicy(); len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != LockKeyHeader {
		t.Errorf("hash policy %v; want the %s header alone", hp, LockKeyHeader)
	}
	for name, d := range map[string]*durationpb.Duration{
		"timeout": action.GetTimeout(), "idle_timeout": action.GetIdleTimeout(),
		"grpc_timeout_header_max": action.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax(),
	} {
		if d == nil || d.AsDuration() != 0 {
			t.Errorf("route %s %v; want 0 set (unset is Envoy's default, 15 s or 5 min; waits and keepalive streams are longer)", name, d)
		}
	}

	// The rate limit: one bucket per caller URI SAN.
	rl := unpack[*localratelimitv3.LocalRateLimit](t, filters[0].GetTypedConfig())
	actions := rl.GetRateLimits()
	if len(actions) != 1 || len(actions[0].GetActions()) != 1 {
		t.Fatalf("rate limit actions %v; want one, on the caller's URI SAN", actions)
	}
	ext := actions[0].GetActions()[0].GetExtension()
	unpack[*sslinputsv3.UriSanInput](t, ext.GetTypedConfig())
	if ext.GetName() != CallerDescriptor {
		t.Errorf("the URI SAN descriptor is keyed %q, want %q", ext.GetName(), CallerDescriptor)
	}
	d := rl.GetDescriptors()
	if len(d) != 1 || len(d[0].GetEntries()) != 1 || d[0].GetEntries()[0].GetKey() != CallerDescriptor || d[0].GetEntries()[0].GetValue() != "" {
		t.Fatalf("descriptors %v; want one wildcard entry %q (a bucket per identity)", d, CallerDescriptor)
	}
	if tb := d[0].GetTokenBucket(); tb.GetTokensPerFill().GetValue() != p.Rate || tb.GetMaxTokens() != p.Burst || tb.GetFillInterval().AsDuration() != time.Second {
		t.Errorf("per-identity bucket %v; want %d a second, burst %d", tb, p.Rate, p.Burst)
	}
	if rl.GetAlwaysConsumeDefaultTokenBucket().GetValue() || rl.GetAlwaysConsumeDefaultTokenBucket() == nil {
		t.Error("every request also spends the shared default bucket: one identity's burst would limit everyone's")
	}
	if rl.GetMaxDynamicDescriptors().GetValue() != p.MaxIdentities || rl.GetLocalRateLimitPerDownstreamConnection() {
		t.Errorf("dynamic buckets: %v per Envoy, per connection %v; want %d per Envoy",
			rl.GetMaxDynamicDescriptors(), rl.GetLocalRateLimitPerDownstreamConnection(), p.MaxIdentities)
	}
	for name, f := range map[string]*corev3.RuntimeFractionalPercent{"enabled": rl.GetFilterEnabled(), "enforced": rl.GetFilterEnforced()} {
		if f.GetDefaultValue().GetNumerator() != 100 {
			t.Errorf("rate limit %s for %v; want every request (Envoy's default is none)", name, f.GetDefaultValue())
		}
	}
	if !rl.GetRateLimitedAsResourceExhausted() {
		t.Error("a rate-limited call is UNAVAILABLE, which callers take as an unknown outcome")
	}

	// The lockd cluster: ring hash over the headless service, HTTP/2,
	// mTLS to lockd's identity only, gRPC health.
	c := cluster(t, b, LockdCluster)
	if c.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
		t.Errorf("lb_policy %v, want RING_HASH", c.GetLbPolicy())
	}
	if c.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("discovery %v, want STRICT_DNS", c.GetType())
	}
	addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if addr.GetAddress() != "lockd-headless.lockd.svc.cluster.local" || addr.GetPortValue() != 7420 {
		t.Errorf("lockd at %s:%d", addr.GetAddress(), addr.GetPortValue())
	}
	opts := unpack[*upstreamhttpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("lockd is not spoken to in HTTP/2")
	}
	up := unpack[*tlsv3.UpstreamTlsContext](t, c.GetTransportSocket().GetTypedConfig())
	checkSPIFFETLS(t, "upstream", up.GetCommonTlsContext(), envoyID, bundle,
		&tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: exactMatcher(lockdID)})
	if hc := c.GetHealthChecks(); len(hc) != 1 || hc[0].GetGrpcHealthCheck().GetServiceName() != HealthService {
		t.Errorf("health checks %v; want gRPC health of %s", hc, HealthService)
	}
	if th := c.GetCircuitBreakers().GetThresholds(); len(th) != 1 || th[0].GetMaxRequests().GetValue() != p.MaxRequests {
		t.Errorf("circuit breaker %v; want %d concurrent requests (Envoy's default is 1,024)", th, p.MaxRequests)
	}

	// SDS is the SPIRE agent's socket.
	spire := cluster(t, b, SPIRECluster)
	if got := spire.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetPipe().GetPath(); got != p.SPIRESocket {
		t.Errorf("SDS at %q, want the SPIRE agent's socket %q", got, p.SPIRESocket)
	}

	// The admin interface stays on loopback; only its metrics are served.
	if a := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); a != "127.0.0.1" {
		t.Errorf("admin on %s, want loopback only", a)
	}
	statsRoutes := resourcev3.GetHTTPConnectionManager(listener(t, b, "stats").GetFilterChains()[0].GetFilters()[0]).
		GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	if len(statsRoutes) != 1 || statsRoutes[0].GetMatch().GetPath() != "/stats/prometheus" {
		t.Errorf("stats routes %v; want /stats/prometheus alone", statsRoutes)
	}
}

// checkSPIFFETLS checks one side's mTLS: Envoy's SVID and the bundle from
// SPIRE's SDS, the peer's SAN matched, TLS 1.3 and ALPN h2.
func checkSPIFFETLS(t *testing.T, side string, c *tlsv3.CommonTlsContext, svid, bundle string, san *tlsv3.SubjectAltNameMatcher) {
	t.Helper()
	certs := c.GetTlsCertificateSdsSecretConfigs()
	if len(certs) != 1 || certs[0].GetName() != svid || sdsCluster(certs[0]) != SPIRECluster {
		t.Errorf("%s: certificates %v; want %s from %s", side, certs, svid, SPIRECluster)
	}
	combined := c.GetCombinedValidationContext()
	if v := combined.GetValidationContextSdsSecretConfig(); v.GetName() != bundle || sdsCluster(v) != SPIRECluster {
		t.Errorf("%s: validation context %v; want %s from %s", side, v, bundle, SPIRECluster)
	}
	if got := combined.GetDefaultValidationContext().GetMatchTypedSubjectAltNames(); len(got) != 1 || !proto.Equal(got[0], san) {
		t.Errorf("%s: SAN matchers %v; want %v", side, got, san)
	}
	if tp := c.GetTlsParams(); tp.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 || tp.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 {
		t.Errorf("%s: TLS %v; want 1.3 (lockd refuses older)", side, tp)
	}
	if !slices.Equal(c.GetAlpnProtocols(), []string{"h2"}) {
		t.Errorf("%s: ALPN %v; want h2 (gRPC)", side, c.GetAlpnProtocols())
	}
}

func sdsCluster(s *tlsv3.SdsSecretConfig) string {
	return s.GetSdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
}

// TestTheCommittedFileIsGenerated: envoy.yaml is what the generator writes
// from its defaults, byte for byte (go test -update rewrites it), and it
// reads back into the same bootstrap.
func TestTheCommittedFileIsGenerated(t *testing.T) {
	got, err := Generate(DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(goldenFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the generator writes; run go generate (or go test -update) in deploy/envoy and commit it", goldenFile)
	}

	js, err := yaml.YAMLToJSON(want)
	if err != nil {
		t.Fatal(err)
	}
	var read bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &read); err != nil {
		t.Fatalf("%s does not read back as a bootstrap: %v", goldenFile, err)
	}
	if !proto.Equal(&read, mustBootstrap(t, DefaultParams())) {
		t.Fatalf("%s reads back as another bootstrap", goldenFile)
	}
}

// TestTheGeneratorRefusesBadParameters: each rule names its flag, and the
// command writes nothing and exits 2.
func TestTheGeneratorRefusesBadParameters(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Params)
		want string
	}{
		{"trust domain", func(p *Params) { p.TrustDomain = "Example.org" }, "-trust-domain"},
		{"Envoy's ID in another trust domain", func(p *Params) { p.EnvoyID = "spiffe://other.org/envoy" }, "-envoy-id"},
		{"lockd's ID without a path", func(p *Params) { p.LockdID = "spiffe://example.org" }, "-lockd-id"},
		{"the same ID for both", func(p *Params) { p.LockdID = "spiffe://example.org/ns/lockd/sa/envoy" }, "must differ"},
		{"address without a port", func(p *Params) { p.LockdAddress = "lockd-headless" }, "-lockd-address"},
		{"relative socket", func(p *Params) { p.SPIRESocket = "agent.sock" }, "-spire-socket"},
		{"listen on the admin port", func(p *Params) { p.ListenPort = 9901 }, "-listen-port"},
		{"burst below the rate", func(p *Params) { p.Burst = p.Rate - 1 }, "-burst"},
		{"no identities", func(p *Params) { p.MaxIdentities = 0 }, "-max-identities"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			tt.mod(&p)
			_, err := Generate(p)
			if !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Generate: %v; want ErrParams naming %s", err, tt.want)
			}
		})
	}

	out := filepath.Join(t.TempDir(), "envoy.yaml")
	var stderr bytes.Buffer
	if code := run([]string{"-out", out, "-trust-domain", "Bad"}, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "-trust-domain") {
		t.Fatalf("run: exit %d, %q; want %d naming -trust-domain", code, stderr.String(), exitUsage)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused run wrote %s", out)
	}
	if code := run([]string{"-out", out, "-trust-domain", "corp.example", "-rate", "5", "-burst", "10"}, &stderr); code != exitOK {
		t.Fatalf("run: exit %d: %s", code, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"spiffe://corp.example/ns/lockd/sa/envoy", "prefix: spiffe://corp.example/", "tokens_per_fill: 5"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("generated with flags, the file lacks %q", want)
		}
	}
}

func mustBootstrap(t *testing.T, p Params) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := Bootstrap(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func listener(t *testing.T, b *bootstrapv3.Bootstrap, name string) *listenerv3.Listener {
	t.Helper()
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetName() == name {
			return l
		}
	}
	t.Fatalf("no listener %q", name)
	return nil
}

func cluster(t *testing.T, b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	t.Helper()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	t.Fatalf("no cluster %q", name)
	return nil
}

// unpack is a's message, which must be an M.
func unpack[M proto.Message](t *testing.T, a *anypb.Any) M {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("Any of %s: %v", a.GetTypeUrl(), err)
	}
	out, ok := m.(M)
	if !ok {
		t.Fatalf("Any of %s, not the %T expected", a.GetTypeUrl(), out)
	}
	return out
}

func prefixMatcher(p string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p}}
}

func exactMatcher(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}
