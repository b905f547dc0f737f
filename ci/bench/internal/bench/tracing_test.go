package bench

import (
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
)

// TestSinkCountsSpansWithoutDecoding: the sink's count of an encoded
// request is the number of spans in it, across resources and scopes.
func TestSinkCountsSpansWithoutDecoding(t *testing.T) {
	span := &tracepb.Span{Name: "lock.v1.LockService/Acquire", TraceId: make([]byte, 16), SpanId: make([]byte, 8)}
	req := &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{span, span}}, {Spans: []*tracepb.Span{span}}}, SchemaUrl: "x"},
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{span, span, span}}}},
		{},
	}}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := countSpans(b); got != 6 {
		t.Errorf("countSpans = %d, want 6", got)
	}
	if got := countSpans(nil); got != 0 {
		t.Errorf("countSpans(empty) = %d", got)
	}
}

func TestRoundRatiosAndMedian(t *testing.T) {
	sys := func(gs ...float64) []*result.System {
		var out []*result.System
		for _, g := range gs {
			out = append(out, &result.System{GrantsPerSec: g})
		}
		return out
	}
	// Round 1: (90+100)/(100+100); round 2 drifted down: (45+50)/(50+50).
	got := roundRatios(sys(90, 100, 45, 50, 80, 80), sys(100, 100, 50, 50, 100, 100))
	want := []float64{0.95, 0.95, 0.8}
	if len(got) != len(want) {
		t.Fatalf("roundRatios = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] < want[i]-1e-9 || got[i] > want[i]+1e-9 {
			t.Errorf("round %d: %v, want %v", i, got[i], want[i])
		}
	}
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
