package tracing_test

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lockd-dev/lockd/internal/tracing"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// tracedEnv is a lockd on an etcd reached over gRPC, the Go client and
// lockd both tracing into one in-memory exporter.
func tracedEnv(t *testing.T, o lockdtest.Options) (*lockdtest.Env, *tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	o.TracerProvider, o.ExternalEtcd = tp, true
	return lockdtest.Start(t, o), exp, tp
}

func attr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestOneAcquireIsOneTrace: an Acquire through the Go client is one trace:
// the client's Acquire span, its RPCs, lockd's server spans under them, and
// lockd's etcd calls under those, with the namespace, class and wait on the
// spans that know them.
func TestOneAcquireIsOneTrace(t *testing.T) {
	env, exp, tp := tracedEnv(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice, client.WithTracerProvider(tp))
	exp.Reset() // lockd's start-up
	l, err := c.Acquire(t.Context(), "t/trace/1", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}

	spans := exp.GetSpans()
	var root tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "lockd.client/Acquire" {
			root = s
		}
	}
	if !root.SpanContext.IsValid() {
		t.Fatalf("no lockd.client/Acquire span among %d", len(spans))
	}
	if root.Parent.IsValid() {
		t.Errorf("the client's Acquire span has a parent: %v", root.Parent)
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanContext.TraceID() == root.SpanContext.TraceID() {
			byID[s.SpanContext.SpanID()] = s
		}
	}
	// Each span's chain of parents, by kind and name.
	chain := func(s tracetest.SpanStub) string {
		var parts []string
		for {
			parts = append([]string{s.SpanKind.String() + ":" + s.Name}, parts...)
			p, ok := byID[s.Parent.SpanID()]
			if !s.Parent.IsValid() || !ok {
				return strings.Join(parts, " > ")
			}
			s = p
		}
	}
	want := map[string]bool{
		"internal:lockd.client/Acquire > client:lock.v1.LockService/Acquire > server:lock.v1.LockService/Acquire":                              false,
		"internal:lockd.client/Acquire > client:lock.v1.LockService/Acquire > server:lock.v1.LockService/Acquire > client:etcdserverpb.KV/Txn": false,
		"internal:lockd.client/Acquire > client:lock.v1.LockService/OpenSession > server:lock.v1.LockService/OpenSession":                      false,
	}
	var got []string
	for _, s := range byID {
		c := chain(s)
		got = append(got, c)
		if _, ok := want[c]; ok {
			want[c] = true
		}
	}
	for c, seen := range want {
		if !seen {
			t.Errorf("no span chain %q in the Acquire's trace; it has:\n  %s", c, strings.Join(got, "\n  "))
		}
	}
	for _, s := range byID {
		if s.SpanKind != trace.SpanKindServer || s.Name != "lock.v1.LockService/Acquire" {
			continue
		}
		for k, v := range map[attribute.Key]string{tracing.AttrNamespace: "t", tracing.AttrClass: "std"} {
			if got, ok := attr(s, k); !ok || got.AsString() != v {
				t.Errorf("lockd's Acquire span: %s = %q, want %q", k, got.AsString(), v)
			}
		}
		if _, ok := attr(s, tracing.AttrWaited); !ok {
			t.Errorf("lockd's Acquire span has no %s", tracing.AttrWaited)
		}
	}
	if v, _ := attr(root, tracing.AttrNamespace); v.AsString() != "t" {
		t.Errorf("client span namespace = %q", v.AsString())
	}

	// The release is a trace of its own: the client's Release span, its
	// RPC, lockd's server span.
	exp.Reset()
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	kinds := map[trace.SpanID]string{}
	parents := map[string]trace.SpanID{}
	for _, s := range exp.GetSpans() {
		name := s.SpanKind.String() + ":" + s.Name
		kinds[s.SpanContext.SpanID()] = name
		parents[name] = s.Parent.SpanID()
	}
	for child, parent := range map[string]string{
		"server:lock.v1.LockService/Release": "client:lock.v1.LockService/Release",
		"client:lock.v1.LockService/Release": "internal:lockd.client/Release",
	} {
		if got := kinds[parents[child]]; got != parent {
			t.Errorf("the parent of %s is %q, want %s", child, got, parent)
		}
	}
}

// TestProbesAreNotTraced: a health check every few seconds must not be a
// trace every few seconds.
func TestProbesAreNotTraced(t *testing.T) {
	env, exp, _ := tracedEnv(t, lockdtest.Options{})
	conn, err := grpc.NewClient(env.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exp.Reset()
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	lc, _ := env.Raw(t, lockdtest.Alice)
	if _, err := lc.ListClasses(t.Context(), &lockv1.ListClassesRequest{}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	if strings.Contains(strings.Join(names, " "), "grpc.health") {
		t.Errorf("a health check was traced: %v", names)
	}
	if !strings.Contains(strings.Join(names, " "), "lock.v1.LockService/ListClasses") {
		t.Errorf("a lock.v1 call was not traced: %v", names)
	}
}

// TestLockdFollowsTheCallersSamplingDecision: lockd records a call whose
// caller sampled it, not one whose caller decided against it (whatever
// lockd's own sampler would say for a root), and a call with no trace
// context goes to lockd's sampler.
func TestLockdFollowsTheCallersSamplingDecision(t *testing.T) {
	env, exp, _ := tracedEnv(t, lockdtest.Options{}) // lockd samples every root
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	c := env.Client(t, lockdtest.Alice, client.WithTracerProvider(never))
	exp.Reset()
	l, err := c.Acquire(t.Context(), "t/trace/unsampled", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil { // under the client's unsampled Release span
		t.Fatal(err)
	}
	for _, s := range exp.GetSpans() {
		if s.Name == "lock.v1.LockService/Acquire" || s.Name == "lock.v1.LockService/Release" || s.Name == "etcdserverpb.KV/Txn" {
			t.Errorf("lockd recorded %s (%s) of a caller that did not sample it", s.Name, s.SpanKind)
		}
	}
	lc, _ := env.Raw(t, lockdtest.Alice) // a caller that sends no trace context
	if _, err := lc.ListClasses(t.Context(), &lockv1.ListClassesRequest{}); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range exp.GetSpans() {
		found = found || (s.Name == "lock.v1.LockService/ListClasses" && s.SpanKind == trace.SpanKindServer && !s.Parent.IsValid())
	}
	if !found {
		t.Error("a call with no trace context was not recorded by lockd's own sampler")
	}
}
