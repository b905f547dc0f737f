package main

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	sslinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/ssl/v3"
	connectionsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names the configuration uses, and tests look for.
const (
	// LockdCluster is the upstream cluster of lockd's replicas.
	LockdCluster = "lockd"
	// SPIRECluster reaches the SPIRE agent's SDS over its socket.
	SPIRECluster = "spire_agent"
	// AdminCluster is Envoy's own admin interface, for the stats listener.
	AdminCluster = "envoy_admin"
	// LockKeyHeader carries the lock key: the hash that picks a lockd.
	LockKeyHeader = "x-lock-key"
	// CallerDescriptor is the rate-limit descriptor key whose value is the
	// caller's URI SAN (its SPIFFE ID).
	CallerDescriptor = "caller_uri_san"
	// HealthService is the gRPC health service Envoy checks on lockd.
	HealthService = "lock.v1.LockService"
	// RoutePrefix matches both lock.v1 services (LockService, AdminService).
	RoutePrefix = "/lock.v1."

	adminPort = 9901 // on 127.0.0.1 only
	statsPort = 9902 // /stats/prometheus only
)

// Params are the deployment's parameters.
type Params struct {
	// TrustDomain is the SPIFFE trust domain of Envoy, lockd and callers.
	TrustDomain string
	// EnvoyID is Envoy's SPIFFE ID: the SVID it asks SPIRE for, presented
	// to callers and to lockd (lockd's --edge-identity). Empty:
	// spiffe://<TrustDomain>/ns/lockd/sa/envoy.
	EnvoyID string
	// LockdID is lockd's SPIFFE ID, the only server identity Envoy accepts
	// upstream. Empty: spiffe://<TrustDomain>/ns/lockd/sa/lockd.
	LockdID string
	// LockdAddress is lockd's headless service, host:port: every address
	// it resolves to is one lockd on the hash ring.
	LockdAddress string
	// SPIRESocket is the SPIRE agent's unix socket, which serves SDS.
	SPIRESocket string
	// ListenPort is where callers reach Envoy.
	ListenPort uint32
	// Rate and Burst are each caller identity's token bucket on one Envoy:
	// Rate requests a second, Burst at once.
	Rate, Burst uint32
	// MaxIdentities is how many identities' buckets one Envoy keeps.
	MaxIdentities uint32
	// MaxRequests is the circuit breaker on concurrent requests to lockd.
	MaxRequests uint32
	// MaxConnections caps downstream connections per Envoy.
	MaxConnections int64
}

// DefaultParams are the generator's defaults, from which the committed
// envoy.yaml is generated.
func DefaultParams() Params {
	return Params{
		TrustDomain:    "example.org",
		LockdAddress:   "lockd-headless.lockd.svc.cluster.local:7420",
		SPIRESocket:    "/run/spire/sockets/agent.sock",
		ListenPort:     8443,
		Rate:           100,
		Burst:          200,
		MaxIdentities:  10000,
		MaxRequests:    100000,
		MaxConnections: 50000,
	}
}

// ErrParams marks Params that break a rule; the message names the flag.
var ErrParams = errors.New("envoy: invalid parameters")

// trustDomain is a SPIFFE trust domain name's form.
var trustDomain = regexp.MustCompile(`^[a-z0-9._-]+$`)

// withDefaults fills the derived IDs and checks every field.
func (p Params) withDefaults() (Params, error) {
	if p.EnvoyID == "" {
		p.EnvoyID = "spiffe://" + p.TrustDomain + "/ns/lockd/sa/envoy"
	}
	if p.LockdID == "" {
		p.LockdID = "spiffe://" + p.TrustDomain + "/ns/lockd/sa/lockd"
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !trustDomain.MatchString(p.TrustDomain) {
		add("-trust-domain %q: must be a SPIFFE trust domain (lower-case letters, digits, '.', '-', '_')", p.TrustDomain)
	}
	for _, id := range []struct{ flag, v string }{{"-envoy-id", p.EnvoyID}, {"-lockd-id", p.LockdID}} {
		path, ok := strings.CutPrefix(id.v, p.trustDomainID()+"/")
		if !ok || path == "" {
			add("%s %q: must be a SPIFFE ID in %s with a path", id.flag, id.v, p.trustDomainID())
		}
	}
	if p.EnvoyID == p.LockdID {
		add("-envoy-id, -lockd-id: must differ (lockd refuses its edge's own identity as a caller)")
	}
	if _, _, err := splitHostPort(p.LockdAddress); err != nil {
		add("-lockd-address %q: %v", p.LockdAddress, err)
	}
	if !strings.HasPrefix(p.SPIRESocket, "/") {
		add("-spire-socket %q: must be an absolute path", p.SPIRESocket)
	}
	if p.ListenPort == 0 || p.ListenPort > 65535 || p.ListenPort == adminPort || p.ListenPort == statsPort {
		add("-listen-port %d: must be a port from 1 to 65535, not %d or %d (admin and stats)", p.ListenPort, adminPort, statsPort)
	}
	if p.Rate == 0 || p.Burst < p.Rate {
		add("-rate %d, -burst %d: the rate must be positive and the burst at least the rate", p.Rate, p.Burst)
	}
	if p.MaxIdentities == 0 || p.MaxRequests == 0 || p.MaxConnections <= 0 {
		add("-max-identities %d, -max-requests %d, -max-connections %d: must be positive", p.MaxIdentities, p.MaxRequests, p.MaxConnections)
	}
	if len(errs) > 0 {
		return p, fmt.Errorf("%w: %w", ErrParams, errors.Join(errs...))
	}
	return p, nil
}

// trustDomainID is the trust domain's SPIFFE ID, the name SPIRE's SDS
// gives its bundle.
func (p Params) trustDomainID() string { return "spiffe://" + p.TrustDomain }

func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("must be host:port: %w", err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || host == "" {
		return "", 0, errors.New("must be host:port with a port from 1 to 65535")
	}
	return host, uint32(n), nil
}

// Bootstrap builds Envoy's bootstrap for p.
func Bootstrap(p Params) (*bootstrapv3.Bootstrap, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	host, port, _ := splitHostPort(p.LockdAddress)
	return &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: "lockd-envoy", Cluster: "lockd-envoy"},
		// The admin interface can stop Envoy and change its log level: it
		// listens on loopback, and only /stats/prometheus is exposed (by
		// the stats listener).
		Admin: &bootstrapv3.Admin{Address: socketAddress("127.0.0.1", adminPort)},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: []*listenerv3.Listener{lockdListener(p), statsListener()},
			Clusters:  []*clusterv3.Cluster{lockdCluster(p, host, port), spireCluster(p), adminCluster()},
		},
		// Without a limit Envoy accepts connections until it runs out of
		// memory or file descriptors (and says so at start).
		OverloadManager: &overloadv3.OverloadManager{
			ResourceMonitors: []*overloadv3.ResourceMonitor{{
				Name: "envoy.resource_monitors.global_downstream_max_connections",
				ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: mustAny(
					&connectionsv3.DownstreamConnectionsConfig{MaxActiveDownstreamConnections: p.MaxConnections})},
			}},
		},
	}, nil
}

// lockdListener is where callers connect: SPIFFE mTLS, then HTTP/2 (gRPC)
// to the lock.v1 route.
func lockdListener(p Params) *listenerv3.Listener {
	downstreamTLS := &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: commonTLS(p, &tlsv3.CertificateValidationContext{
			// Only callers of the trust domain: the chain is checked against
			// its bundle, and the URI SAN must be one of its SPIFFE IDs.
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: p.trustDomainID() + "/"}},
			}},
		}),
	}
	return &listenerv3.Listener{
		Name:    "lockd",
		Address: socketAddress("0.0.0.0", p.ListenPort),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(lockdConnectionManager(p))},
			}},
			TransportSocket: transportSocket(downstreamTLS),
		}},
	}
}

// lockdConnectionManager is the gRPC side of the lockd listener.
func lockdConnectionManager(p Params) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: "lockd",
		CodecType:  hcmv3.HttpConnectionManager_HTTP2,
		// Envoy is the edge: the peer address is the caller's.
		UseRemoteAddress: wrapperspb.Bool(true),
		// The caller's identity for lockd (--edge-identity): whatever
		// x-forwarded-client-cert a caller sends is dropped, and Envoy sets
		// one element with the URI SAN of the certificate it verified.
		ForwardClientCertDetails:    hcmv3.HttpConnectionManager_SANITIZE_SET,
		SetCurrentClientCertDetails: &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Uri: true},
		// Waits and keepalive streams are quiet for long stretches, so
		// routes disable the idle timeout; pings find dead callers
		// instead, and Envoy then resets their streams to lockd, which
		// drops their waiters.
		Http2ProtocolOptions: &corev3.Http2ProtocolOptions{ConnectionKeepalive: keepalive()},
		RouteSpecifier:       &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: lockdRoutes()},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: "envoy.filters.http.local_ratelimit", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(callerRateLimit(p))}},
			{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
	}
}

// lockdRoutes sends the lock.v1 services to lockd, hashing on the lock key
// so every waiter for a key reaches the same lockd (which queues them in
// memory); other paths get no route (gRPC UNIMPLEMENTED).
func lockdRoutes() *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: "lockd",
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "lockd",
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Name: "lock.v1",
				Match: &routev3.RouteMatch{
					PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: RoutePrefix},
					Grpc:          &routev3.RouteMatch_GrpcRouteMatchOptions{},
				},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: LockdCluster},
					// A call without the header (OpenSession, KeepAlive, the
					// admin calls) gets no hash, and a random lockd.
					HashPolicy: []*routev3.RouteAction_HashPolicy{{
						PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
							Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: LockKeyHeader},
						},
					}},
					// An Acquire waits in line as long as the caller asks, and
					// a KeepAlive stream lives as long as its session: no
					// route timeout and no idle timeout; the caller's
					// grpc-timeout, uncapped, is the deadline.
					Timeout:     durationpb.New(0),
					IdleTimeout: durationpb.New(0),
					MaxStreamDuration: &routev3.RouteAction_MaxStreamDuration{
						GrpcTimeoutHeaderMax: durationpb.New(0),
					},
				}},
			}},
		}},
	}
}

// callerRateLimit limits each caller identity on this Envoy. The
// descriptor's value is the URI SAN of the caller's verified client
// certificate (the envoy.matching.inputs.uri_san input, used as a rate
// limit descriptor: every URI SAN, comma-joined; an SVID has exactly one,
// its SPIFFE ID). Its entry has no value, so Envoy keeps one bucket per
// distinct identity, up to MaxIdentities (least recently used evicted: an
// evicted identity comes back to a full bucket). The limit is per Envoy
// replica, so an identity gets up to replicas × Rate in all, and counts
// calls and streams opened, not messages on a stream.
func callerRateLimit(p Params) *localratelimitv3.LocalRateLimit {
	bucket := &typev3.TokenBucket{
		MaxTokens:     p.Burst,
		TokensPerFill: wrapperspb.UInt32(p.Rate),
		FillInterval:  durationpb.New(time.Second),
	}
	always := func(key string) *corev3.RuntimeFractionalPercent {
		return &corev3.RuntimeFractionalPercent{
			RuntimeKey:   key,
			DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED},
		}
	}
	return &localratelimitv3.LocalRateLimit{
		StatPrefix: "lockd_caller",
		// A request without a URI SAN (none passes the listener's SAN
		// match) would share this one bucket; every other request spends
		// only its identity's.
		TokenBucket:                     bucket,
		AlwaysConsumeDefaultTokenBucket: wrapperspb.Bool(false),
		FilterEnabled:                   always("lockd_caller_ratelimit_enabled"),
		FilterEnforced:                  always("lockd_caller_ratelimit_enforced"),
		// RESOURCE_EXHAUSTED, a definite refusal, rather than UNAVAILABLE,
		// which callers must treat as an unknown outcome.
		RateLimitedAsResourceExhausted: true,
		RateLimits: []*routev3.RateLimit{{
			Actions: []*routev3.RateLimit_Action{{
				ActionSpecifier: &routev3.RateLimit_Action_Extension{Extension: &corev3.TypedExtensionConfig{
					Name:        CallerDescriptor,
					TypedConfig: mustAny(&sslinputsv3.UriSanInput{}),
				}},
			}},
		}},
		Descriptors: []*ratelimitv3.LocalRateLimitDescriptor{{
			Entries:     []*ratelimitv3.RateLimitDescriptor_Entry{{Key: CallerDescriptor}},
			TokenBucket: bucket,
		}},
		MaxDynamicDescriptors: wrapperspb.UInt32(p.MaxIdentities),
	}
}

// lockdCluster is lockd's replicas, found by DNS, on a hash ring, over
// HTTP/2 and mTLS as Envoy's SVID, checked with gRPC health.
func lockdCluster(p Params, host string, port uint32) *clusterv3.Cluster {
	upstreamTLS := &tlsv3.UpstreamTlsContext{
		CommonTlsContext: commonTLS(p, &tlsv3.CertificateValidationContext{
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: p.LockdID}},
			}},
		}),
	}
	return &clusterv3.Cluster{
		Name: LockdCluster,
		// A headless service: every pod address is a host on the ring. A
		// pod that comes back with a new address takes a new place on it,
		// and ring hash moves more keys than a new host's share (about 30 %
		// from 4 to 5 hosts, measured with grpc-go's ring_hash).
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS},
		LbPolicy:             clusterv3.Cluster_RING_HASH,
		ConnectTimeout:       durationpb.New(2 * time.Second),
		LoadAssignment:       loadAssignment(LockdCluster, socketAddress(host, port)),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(http2Only(keepalive())),
		},
		TransportSocket: transportSocket(upstreamTLS),
		// lockd serves grpc.health.v1 and marks lock.v1.LockService not
		// serving when it shuts down; the check needs no caller identity.
		HealthChecks: []*corev3.HealthCheck{{
			Timeout:            durationpb.New(2 * time.Second),
			Interval:           durationpb.New(5 * time.Second),
			UnhealthyThreshold: wrapperspb.UInt32(2),
			HealthyThreshold:   wrapperspb.UInt32(1),
			HealthChecker: &corev3.HealthCheck_GrpcHealthCheck_{
				GrpcHealthCheck: &corev3.HealthCheck_GrpcHealthCheck{ServiceName: HealthService},
			},
		}},
		// Envoy's default breaker opens at 1,024 concurrent requests per
		// cluster; every waiting Acquire and every session's KeepAlive
		// stream is one.
		CircuitBreakers: &clusterv3.CircuitBreakers{
			Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
				Priority:           corev3.RoutingPriority_DEFAULT,
				MaxConnections:     wrapperspb.UInt32(p.MaxRequests),
				MaxPendingRequests: wrapperspb.UInt32(p.MaxRequests),
				MaxRequests:        wrapperspb.UInt32(p.MaxRequests),
				// Envoy retries nothing here (no retry policy): a lock call
				// is not safe to repeat blindly.
				MaxRetries: wrapperspb.UInt32(0),
			}},
		},
	}
}

// spireCluster is the SPIRE agent's SDS, over its unix socket.
func spireCluster(p Params) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 SPIRECluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment: loadAssignment(SPIRECluster, &corev3.Address{
			Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: p.SPIRESocket}},
		}),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(http2Only(nil)),
		},
	}
}

// statsListener serves Envoy's Prometheus metrics, and nothing else of the
// admin interface, to the scraper.
func statsListener() *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "stats",
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "stats",
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    "stats",
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/stats/prometheus"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: AdminCluster},
					}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
	}
	return &listenerv3.Listener{
		Name:    "stats",
		Address: socketAddress("0.0.0.0", statsPort),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
			}},
		}},
	}
}

// adminCluster is Envoy's admin interface, for the stats listener.
func adminCluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 AdminCluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(time.Second),
		LoadAssignment:       loadAssignment(AdminCluster, socketAddress("127.0.0.1", adminPort)),
	}
}

// commonTLS is Envoy's side of SPIFFE mTLS, both ways: its SVID and the
// trust domain's bundle from SPIRE's SDS (SPIRE names the SVID by its
// SPIFFE ID and the bundle by the trust domain's), TLS 1.3 as lockd
// requires (Envoy's upstream default stops at 1.2), and ALPN h2, which
// gRPC requires.
func commonTLS(p Params, match *tlsv3.CertificateValidationContext) *tlsv3.CommonTlsContext {
	return &tlsv3.CommonTlsContext{
		TlsParams: &tlsv3.TlsParameters{
			TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
			TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
		},
		AlpnProtocols:                  []string{"h2"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(p.EnvoyID)},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         match,
				ValidationContextSdsSecretConfig: sdsSecret(p.trustDomainID()),
			},
		},
	}
}

// sdsSecret is the secret name from the SPIRE agent.
func sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{
		Name: name,
		SdsConfig: &corev3.ConfigSource{
			ResourceApiVersion: corev3.ApiVersion_V3,
			ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{
					TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: SPIRECluster}},
				}},
			}},
		},
	}
}

// http2Only is an upstream spoken to in HTTP/2 only (gRPC).
func http2Only(ka *corev3.KeepaliveSettings) *upstreamhttpv3.HttpProtocolOptions {
	return &upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{ConnectionKeepalive: ka},
				},
			},
		},
	}
}

// keepalive pings an HTTP/2 connection every 30 s and drops it when a ping
// goes unanswered for 10 s. lockd permits pings every 5 s
// (lockd.KeepaliveMinTime), so it never answers these with GOAWAY.
func keepalive() *corev3.KeepaliveSettings {
	return &corev3.KeepaliveSettings{
		Interval: durationpb.New(30 * time.Second),
		Timeout:  durationpb.New(10 * time.Second),
	}
}

func transportSocket(tls proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{
		Name:       "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(tls)},
	}
}

func loadAssignment(cluster string, addr *corev3.Address) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: cluster,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}},
			}},
		}},
	}
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// mustAny packs m; it fails only for a nil message, a bug here.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}
