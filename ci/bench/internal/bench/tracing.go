package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	"github.com/lockd-dev/lockd/pkg/client"
)

// tracingScenario is where tracing's cost is measured: uncontended W=64,
// lockd's highest grant rate, so the most spans per second.
const tracingScenario = "uncontended-w64"

// otlpSink is an OTLP/gRPC trace receiver that counts the spans it is sent
// and keeps nothing: the far end of the exporters, so the measured cost
// includes recording, batching, encoding and sending every span. It counts
// them in the encoded request without decoding it: a collector would run
// on a machine of its own, and decoding here would charge its work to the
// two cores lockd shares with the load generator.
type otlpSink struct {
	spans atomic.Int64
	addr  string
	g     *grpc.Server
}

func startSink() (*otlpSink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{addr: lis.Addr().String()}
	s.g = grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(s.export))
	go func() { _ = s.g.Serve(lis) }()
	return s, nil
}

// export answers every call (the exporters make only TraceService/Export)
// with an empty ExportTraceServiceResponse, counting the request's spans.
func (s *otlpSink) export(_ any, stream grpc.ServerStream) error {
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	s.spans.Add(int64(countSpans(req)))
	return stream.SendMsg(&coltrace.ExportTraceServiceResponse{})
}

// countSpans counts the spans in an encoded ExportTraceServiceRequest:
// resource_spans (1) > scope_spans (2) > spans (2).
func countSpans(req []byte) int {
	n := 0
	for _, rs := range fields(req, 1) {
		for _, ss := range fields(rs, 2) {
			n += len(fields(ss, 2))
		}
	}
	return n
}

// fields returns the length-delimited values of field num in msg.
func fields(msg []byte, num protowire.Number) [][]byte {
	var out [][]byte
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return out
		}
		msg = msg[l:]
		if typ == protowire.BytesType && n == num {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return out
			}
			out = append(out, v)
			msg = msg[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return out
		}
		msg = msg[l:]
	}
	return out
}

// rawCodec hands the sink a request's bytes undecoded and encodes its
// answers as protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("bench: the OTLP sink reads raw bytes, not %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// tracingRounds: the tracing comparison runs its three sides in five
// rounds of there and back, as the cost it looks for (a few percent) is
// smaller than the drift of one pass to the next on a shared machine
// (±10 %); each round gives a ratio of its own passes, and the figure is
// their median.
const tracingRounds = 5

// sampledRatio is the sampling ratio of the comparison's sampled side: a
// tenth of new traces, the rest following their parent.
const sampledRatio = 0.1

// tracingCompare measures lockd and its Go clients with tracing off; lockd
// alone tracing one trace in ten (parentbased_traceidratio 0.1) while its
// callers trace nothing (lockd's own cost); lockd and its callers tracing
// one in ten; and both tracing every call; in one run (off, lockd, 10 %,
// all, all, 10 %, lockd, off, per round; the audit tailer off throughout).
// On, lockd exports over OTLP as configured by OTEL_* and the load
// generator's clients with their own provider, both to a sink of the
// side's own.
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
		"lockd":   sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampledRatio)),
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
		if name != "all" {
			env = append(env, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", fmt.Sprintf("OTEL_TRACES_SAMPLER_ARG=%g", sampledRatio))
		}
		sides[name] = &side{sink: sink, tp: tp, env: env}
	}
	// Fewer rounds when passes would be shorter than about 3 s (the smoke run).
	rounds := min(tracingRounds, max(1, int(o.Duration/(6*time.Second))))
	got, each, err := abba(ctx, o, exe, lockd, "tracing", sc, []string{"off", "lockd", "sampled", "all"}, rounds, func(name string) abbaPass {
		s := sides[name]
		switch name {
		case "off":
			return abbaPass{rig: rig.Config{Audit: "off"}}
		case "lockd": // lockd traces, its callers do not
			return abbaPass{rig: rig.Config{Audit: "off", Env: s.env}}
		}
		return abbaPass{rig: rig.Config{Audit: "off", Env: s.env, ClientOptions: []client.Option{client.WithTracerProvider(s.tp)}}}
	})
	if err != nil {
		return nil, err
	}
	for _, s := range sides {
		_ = s.tp.ForceFlush(ctx)
	}
	off, lockdOnly, sampled, all := got["off"], got["lockd"], got["sampled"], got["all"]
	t := &result.Tracing{Scenario: tracingScenario, SampledRatio: sampledRatio, Rounds: rounds,
		LockdOnlyGrantsPerSec: lockdOnly.GrantsPerSec, LockdOnlyP99: lockdOnly.P99, LockdOnlyLockdCPUPerGrant: cpuPerGrant(lockdOnly),
		LockdOnlySpans:  sides["lockd"].sink.spans.Load(),
		OffGrantsPerSec: off.GrantsPerSec, SampledGrantsPerSec: sampled.GrantsPerSec, AllGrantsPerSec: all.GrantsPerSec,
		OffP99: off.P99, SampledP99: sampled.P99, AllP99: all.P99,
		OffLockdCPUPerGrant: cpuPerGrant(off), SampledLockdCPUPerGrant: cpuPerGrant(sampled), AllLockdCPUPerGrant: cpuPerGrant(all),
		SampledSpans: sides["sampled"].sink.spans.Load(), AllSpans: sides["all"].sink.spans.Load()}
	t.LockdOnlyRounds = roundRatios(each["lockd"], each["off"])
	t.LockdOnlyRatioOfOff = median(t.LockdOnlyRounds)
	t.SampledRounds = roundRatios(each["sampled"], each["off"])
	t.AllRounds = roundRatios(each["all"], each["off"])
	t.SampledRatioOfOff, t.AllRatioOfOff = median(t.SampledRounds), median(t.AllRounds)
	if t.AllSpans == 0 || t.LockdOnlySpans == 0 {
		return nil, fmt.Errorf("bench: tracing on exported no spans: the comparison measured nothing")
	}
	logf(o.Log, "tracing: lockd %s %.0f grants/s with tracing off, %.0f with lockd alone sampling %g (clients untraced; %.2fx: %.2f), %.0f with lockd and clients sampling %g (median of rounds %.2fx: %.2f), %.0f with all (%.2fx: %.2f); %d, %d and %d spans exported",
		tracingScenario, t.OffGrantsPerSec, t.LockdOnlyGrantsPerSec, sampledRatio, t.LockdOnlyRatioOfOff, t.LockdOnlyRounds,
		t.SampledGrantsPerSec, sampledRatio, t.SampledRatioOfOff, t.SampledRounds,
		t.AllGrantsPerSec, t.AllRatioOfOff, t.AllRounds, t.LockdOnlySpans, t.SampledSpans, t.AllSpans)
	return t, nil
}

// roundRatios is, for each round of an abba run, side's grants in its two
// passes of the round over base's in theirs: neighbouring passes, so a
// drift of the machine over the run cancels out.
func roundRatios(side, base []*result.System) []float64 {
	var out []float64
	for i := 0; i+1 < len(side) && i+1 < len(base); i += 2 {
		b := base[i].GrantsPerSec + base[i+1].GrantsPerSec
		if b > 0 {
			out = append(out, (side[i].GrantsPerSec+side[i+1].GrantsPerSec)/b)
		}
	}
	return out
}

// median of xs (the mean of the middle two for an even count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuPerGrant is lockd's CPU time (its embedded etcd's included) per grant.
func cpuPerGrant(s *result.System) time.Duration {
	if s.GrantsPerSec <= 0 {
		return 0
	}
	return time.Duration(s.LockdCPU / s.GrantsPerSec * float64(time.Second))
}
