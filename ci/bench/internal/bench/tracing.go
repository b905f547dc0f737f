package bench

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

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

// tracingCompare measures lockd and its Go clients with tracing off and on
// (abba, the audit tailer off in both): on, lockd exports over OTLP as
// configured by OTEL_* (every span sampled, the default) and the load
// generator's clients export with their own provider, both to one sink.
func tracingCompare(ctx context.Context, o Options, exe, lockd string) (*result.Tracing, error) {
	sc, err := scenarioNamed(tracingScenario)
	if err != nil {
		return nil, err
	}
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.g.Stop()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(sink.addr), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	off, on, err := abba(ctx, o, exe, lockd, "tracing", sc, func(isOn bool) abbaPass {
		if !isOn {
			return abbaPass{rig: rig.Config{Audit: "off"}}
		}
		return abbaPass{rig: rig.Config{Audit: "off",
			Env:           []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + sink.addr, "OTEL_EXPORTER_OTLP_INSECURE=true"},
			ClientOptions: []client.Option{client.WithTracerProvider(tp)}}}
	})
	if err != nil {
		return nil, err
	}
	_ = tp.ForceFlush(ctx)
	t := &result.Tracing{Scenario: tracingScenario, OffGrantsPerSec: off.GrantsPerSec, OnGrantsPerSec: on.GrantsPerSec,
		OffP99: off.P99, OnP99: on.P99, SpansExported: sink.spans.Load()}
	if t.OffGrantsPerSec > 0 {
		t.Ratio = t.OnGrantsPerSec / t.OffGrantsPerSec
	}
	if t.SpansExported == 0 {
		return nil, fmt.Errorf("bench: tracing on exported no spans to the sink at %s: the comparison measured nothing", sink.addr)
	}
	logf(o.Log, "tracing: lockd %s %.0f grants/s with tracing off, %.0f on (%.2fx); p99 %s off, %s on; %d spans exported",
		tracingScenario, t.OffGrantsPerSec, t.OnGrantsPerSec, t.Ratio, t.OffP99, t.OnP99, t.SpansExported)
	return t, nil
}
