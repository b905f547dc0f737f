package client

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/ringhash" // registers ring_hash_experimental
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// RouteHeader is the request header that carries a call's lock key, so that
// every call about one key reaches the same lockd: the client's own ring
// hash over several lockd addresses hashes on it, and so does Envoy's
// hash_policy in front of a fleet (deploy/envoy). Every call whose request
// names a key sends it.
const RouteHeader = "x-lock-key"

// ringHashConfig routes each call by the hash of its RouteHeader over the
// lockd addresses (gRFC A76); a call without one (sessions, keepalives of
// sessions any lockd can serve) goes to a ready lockd picked at random.
// When the lockd a key hashes to cannot be reached, its calls go to the
// next one on the ring: one other lockd, the same for every caller.
const ringHashConfig = `{"loadBalancingConfig":[{"ring_hash_experimental":{"requestHashHeader":"` + RouteHeader + `"}}]}`

// endpointScheme names the resolver of a client given several addresses;
// each client registers its own (resolverSeq keeps them apart).
const endpointScheme = "lockd-endpoints"

var resolverSeq atomic.Uint64

// dialTarget turns the target a client was given into what grpc dials:
//   - "host:port": that one lockd, as before;
//   - "host1:port,host2:port,…": every one of them, calls routed by key;
//   - "dns:///name:port": every address the name resolves to (re-resolved
//     as grpc's DNS resolver does), calls routed by key.
//
// routed reports whether calls are routed by key over several lockds.
func dialTarget(target string) (dial string, opts []grpc.DialOption, routed bool, err error) {
	switch {
	case strings.HasPrefix(target, "dns:"):
		return target, []grpc.DialOption{grpc.WithDefaultServiceConfig(ringHashConfig)}, true, nil
	case !strings.Contains(target, ","):
		return target, nil, false, nil
	}
	var endpoints []resolver.Endpoint
	seen := map[string]bool{}
	for _, a := range strings.Split(target, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return "", nil, false, fmt.Errorf("%w: lockd address %q in %q: want host:port", ErrConfig, a, target)
		}
		if seen[a] {
			return "", nil, false, fmt.Errorf("%w: lockd address %q is listed twice in %q", ErrConfig, a, target)
		}
		seen[a] = true
		endpoints = append(endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a, ServerName: host}}})
	}
	r := manual.NewBuilderWithScheme(fmt.Sprintf("%s-%d", endpointScheme, resolverSeq.Add(1)))
	r.InitialState(resolver.State{Endpoints: endpoints})
	return r.Scheme() + ":///lockd", []grpc.DialOption{grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(ringHashConfig)}, true, nil
}

// keyed is a request that names a lock key.
type keyed interface{ GetKey() string }

// routeUnary sends a unary call's key in RouteHeader, unless the caller
// set one (withRoute).
func routeUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if k, ok := req.(keyed); ok {
		ctx = withRoute(ctx, k.GetKey())
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// withRoute routes the calls made with ctx by key, unless ctx routes by a
// key already. A key that cannot be a header value (only an invalid key:
// lockd refuses it) is not sent.
func withRoute(ctx context.Context, key string) context.Context {
	if key == "" || len(key) > 512 || !printable(key) {
		return ctx
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(RouteHeader)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, RouteHeader, key)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
