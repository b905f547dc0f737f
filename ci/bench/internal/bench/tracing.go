package bench

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	"github.com/lockd-dev/lockd/pkg/client"
)

// tracingScenario is where tracing's cost is measured: uncontended W=64,
// lockd's highest grant rate, so the most spans per second.
const tracingScenario = "uncontended-w64"

// otlpSink is an OTLP/gRPC trace receiver that counts the spans it is sent
// and keeps nothing: the far end of the exporters, so the measured cost
// includes recording, batching, encoding and sending every span.
type otlpSink struct {
	coltrace.UnimplementedTraceServiceServer
	spans atomic.Int64
	addr  string
	g     *grpc.Server
}

func (s *otlpSink) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	s.spans.Add(n)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func startSink() (*otlpSink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{addr: lis.Addr().String(), g: grpc.NewServer()}
	coltrace.RegisterTraceServiceServer(s.g, s)
	go func() { _ = s.g.Serve(lis) }()
	return s, nil
}

// tracingRounds: the tracing comparison runs its three sides in three
// rounds of there and back, as the cost it looks for (a few percent) is
// smaller than the drift of one pass to the next on a shared machine.
const tracingRounds = 3

// sampledRatio is the sampling ratio of the comparison's sampled side: a
// tenth of new traces, the rest following their parent.
const sampledRatio = 0.1

// tracingCompare measures lockd and its Go clients with tracing off, on
// with one trace in ten sampled (parentbased_traceidratio 0.1) and on with
// every trace sampled, in one run (off, 10 %, all, all, 10 %, off, three
// times; the audit tailer off throughout). On, lockd exports over OTLP as configured
// by OTEL_* and the load generator's clients with their own provider, both
// to a sink of the side's own.
func tracingCompare(ctx context.Context, o Options, exe, lockd string) (*result.Tracing, error) {
	sc, err := scenarioNamed(tracingScenario)
	if err != nil {
		return nil, err
	}
	type side struct {
		sink *otlpSink
		tp   *sdktrace.TracerProvider
		env  []string
	}
	sides := map[string]*side{}
	for name, sampler := range map[string]sdktrace.Sampler{
		"sampled": sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampledRatio)),
		"all":     sdktrace.ParentBased(sdktrace.AlwaysSample()),
	} {
		sink, err := startSink()
		if err != nil {
			return nil, err
		}
		defer sink.g.Stop()
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(sink.addr), otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + sink.addr, "OTEL_EXPORTER_OTLP_INSECURE=true"}
		if name == "sampled" {
			env = append(env, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", fmt.Sprintf("OTEL_TRACES_SAMPLER_ARG=%g", sampledRatio))
		}
		sides[name] = &side{sink: sink, tp: tp, env: env}
	}
	// Fewer rounds when passes would be shorter than about 3 s (the smoke run).
	rounds := min(tracingRounds, max(1, int(o.Duration/(6*time.Second))))
	got, err := abba(ctx, o, exe, lockd, "tracing", sc, []string{"off", "sampled", "all"}, rounds, func(name string) abbaPass {
		s := sides[name]
		if s == nil {
			return abbaPass{rig: rig.Config{Audit: "off"}}
		}
		return abbaPass{rig: rig.Config{Audit: "off", Env: s.env, ClientOptions: []client.Option{client.WithTracerProvider(s.tp)}}}
	})
	if err != nil {
		return nil, err
	}
	for _, s := range sides {
		_ = s.tp.ForceFlush(ctx)
	}
	off, sampled, all := got["off"], got["sampled"], got["all"]
	t := &result.Tracing{Scenario: tracingScenario, SampledRatio: sampledRatio,
		OffGrantsPerSec: off.GrantsPerSec, SampledGrantsPerSec: sampled.GrantsPerSec, AllGrantsPerSec: all.GrantsPerSec,
		OffP99: off.P99, SampledP99: sampled.P99, AllP99: all.P99,
		SampledSpans: sides["sampled"].sink.spans.Load(), AllSpans: sides["all"].sink.spans.Load()}
	if t.OffGrantsPerSec > 0 {
		t.SampledRatioOfOff = t.SampledGrantsPerSec / t.OffGrantsPerSec
		t.AllRatioOfOff = t.AllGrantsPerSec / t.OffGrantsPerSec
	}
	if t.AllSpans == 0 {
		return nil, fmt.Errorf("bench: tracing on exported no spans: the comparison measured nothing")
	}
	logf(o.Log, "tracing: lockd %s %.0f grants/s with tracing off, %.0f with %g of traces sampled (%.2fx), %.0f with all (%.2fx); %d and %d spans exported",
		tracingScenario, t.OffGrantsPerSec, t.SampledGrantsPerSec, sampledRatio, t.SampledRatioOfOff, t.AllGrantsPerSec, t.AllRatioOfOff, t.SampledSpans, t.AllSpans)
	return t, nil
}
