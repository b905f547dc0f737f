package arbiter_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

const otherID = "spiffe://test.local/other" // granted other/ in lockdtest.Classes

func homedClasses() map[string]string {
	home := func(ns, region string) string {
		return "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockNamespace\nmetadata: {name: home, namespace: " + ns + "}\nspec: {region: " + region + "}\n"
	}
	classes := maps.Clone(lockdtest.Classes)
	classes["t/namespace.yaml"] = home("t", "eu-west")
	classes["other/namespace.yaml"] = home("other", "us-east")
	return classes
}

// TestAKeyHomedToAnotherRegionIsRefusedBeforeAnyEtcdRead: two lockds, each
// on its own etcd, serve regions eu-west (namespace t) and us-east
// (namespace other). eu-west's lockd refuses every per-key call for a key
// of other with WRONG_REGION naming us-east and its lockd, counts it, and
// reads nothing from etcd for it (no etcd span in the call's trace, where
// a call it serves has one); us-east's lockd grants the key.
func TestAKeyHomedToAnotherRegionIsRefusedBeforeAnyEtcdRead(t *testing.T) {
	classes := homedClasses()
	euAddr, usAddr := lockdtest.FreeAddr(t), lockdtest.FreeAddr(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	eu := lockdtest.Start(t, lockdtest.Options{Classes: classes, Addr: euAddr, Region: "eu-west",
		RegionEndpoints: map[string]string{"us-east": usAddr}, TracerProvider: tp, ExternalEtcd: true, Registry: reg})
	us := lockdtest.Start(t, lockdtest.Options{Classes: classes, Addr: usAddr, Region: "us-east",
		RegionEndpoints: map[string]string{"eu-west": euAddr}})
	const key = "other/jobs/1"
	fence := func(*client.Lock) {}

	// The Go client is told where the key is served, and is served there.
	_, err := eu.Client(t, otherID).Acquire(t.Context(), key, "", fence)
	if !errors.Is(err, client.ErrWrongRegion) {
		t.Fatalf("Acquire of %s on eu-west's lockd: %v; want ErrWrongRegion", key, err)
	}
	if region, endpoint, ok := client.Region(err); !ok || region != "us-east" || endpoint != usAddr {
		t.Fatalf("client.Region: %q %q %v; want us-east %s", region, endpoint, ok, usAddr)
	}
	if !strings.Contains(err.Error(), "us-east") {
		t.Fatalf("the refusal does not name the region: %v", err)
	}
	l, err := us.Client(t, otherID).Acquire(t.Context(), key, "", fence)
	if err != nil {
		t.Fatalf("Acquire of %s on us-east's lockd: %v", key, err)
	}
	if _, err := eu.Client(t, lockdtest.Alice).Acquire(t.Context(), "t/jobs/1", "", fence); err != nil {
		t.Fatalf("eu-west's own namespace: %v", err)
	}

	// Every per-key call, raw: refused, and no etcd call under it.
	lock, _ := eu.Raw(t, otherID)
	_, admin := eu.Raw(t, lockdtest.Operator)
	tok := l.Token()
	calls := map[string]func(context.Context) error{
		"Acquire": func(ctx context.Context) error {
			_, err := lock.Acquire(ctx, &lockv1.AcquireRequest{SessionId: 1, Key: key})
			return err
		},
		"Release": func(ctx context.Context) error {
			_, err := lock.Release(ctx, &lockv1.ReleaseRequest{SessionId: 1, Key: key, Token: tok})
			return err
		},
		"Inspect": func(ctx context.Context) error {
			_, err := lock.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			return err
		},
		"ValidateToken": func(ctx context.Context) error {
			_, err := lock.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: tok})
			return err
		},
		"RequestForceRelease": func(ctx context.Context) error {
			_, err := admin.RequestForceRelease(ctx, &lockv1.RequestForceReleaseRequest{Key: key, Reason: "region test"})
			return err
		},
	}
	for name, call := range calls {
		exp.Reset()
		err := call(t.Context())
		if status.Code(err) != codes.FailedPrecondition || client.Reason(err) != "WRONG_REGION" {
			t.Fatalf("%s of %s on eu-west's lockd: %v; want FAILED_PRECONDITION, WRONG_REGION", name, key, err)
		}
		if region, endpoint, _ := client.Region(err); region != "us-east" || endpoint != usAddr {
			t.Fatalf("%s: the refusal names region %q at %q; want us-east at %s", name, region, endpoint, usAddr)
		}
		if etcd := etcdSpansUnder(t, exp, name); len(etcd) > 0 {
			t.Fatalf("%s of a key homed elsewhere read etcd: %v", name, etcd)
		}
	}
	// The check can fail: a call eu-west serves has its etcd read.
	own, _ := eu.Raw(t, lockdtest.Alice)
	exp.Reset()
	if _, err := own.Inspect(t.Context(), &lockv1.InspectRequest{Key: "t/jobs/1"}); err != nil {
		t.Fatal(err)
	}
	if etcd := etcdSpansUnder(t, exp, "Inspect"); len(etcd) == 0 {
		t.Fatal("an Inspect eu-west serves shows no etcd span: the trace check sees nothing")
	}

	refused := counterValue(t, reg, "lockd_wrong_region_total", map[string]string{"namespace": "other"})
	if want := float64(1 + len(calls)); refused != want {
		t.Fatalf("lockd_wrong_region_total{namespace=other} = %v; want %v", refused, want)
	}
}

// etcdSpansUnder returns the etcd client spans in the trace of lockd's
// server span for method (the one recorded since the exporter's reset).
func etcdSpansUnder(t *testing.T, exp *tracetest.InMemoryExporter, method string) []string {
	t.Helper()
	spans := exp.GetSpans()
	var traceID trace.TraceID
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer && strings.HasSuffix(s.Name, "/"+method) {
			traceID = s.SpanContext.TraceID()
		}
	}
	if !traceID.IsValid() {
		t.Fatalf("no server span of %s among %d spans", method, len(spans))
	}
	var etcd []string
	for _, s := range spans {
		if s.SpanContext.TraceID() == traceID && strings.HasPrefix(s.Name, "etcdserverpb.") {
			etcd = append(etcd, s.Name)
		}
	}
	return etcd
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
