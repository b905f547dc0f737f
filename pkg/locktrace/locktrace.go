// Package locktrace is how lock.v1 calls are traced with OpenTelemetry, on
// the OpenTelemetry API only (the SDK, exporters and sampling are the
// program's to choose): the span attributes lockd and its clients set, the
// W3C trace-context propagation they use, and the gRPC client stats handler
// that traces calls made inside a sampled span.
//
// Attributes are bounded and carry no secret: a key's namespace, the class,
// the outcome's reason and wait times. A key is never an attribute, and a
// fencing token is never written into a span.
package locktrace

import (
	"context"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// Attribute keys set on spans.
const (
	AttrNamespace     = attribute.Key("lock.namespace")
	AttrClass         = attribute.Key("lock.class")
	AttrReason        = attribute.Key("lock.outcome.reason")
	AttrWaitRequested = attribute.Key("lock.wait.requested_s")
	AttrWaited        = attribute.Key("lock.wait.elapsed_s")
	AttrTokenState    = attribute.Key("lock.token.state")
)

// Propagator is the context propagation of lock.v1 calls: W3C trace context
// in gRPC metadata (no baggage).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// OrNoop is tp, or a provider that records nothing when tp is nil.
func OrNoop(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}

// ClientHandler is the stats handler for a gRPC client of lockd (or of
// etcd, for lockd itself): a span per call made inside a sampled operation.
// Calls made outside one (background keepalives, watches) start no trace of
// their own: they would be one long or frequent root span each and say
// nothing about any request. A call inside an operation that was not
// sampled carries that operation's trace context on, and records nothing.
func ClientHandler(tp trace.TracerProvider) grpc.DialOption {
	return grpc.WithStatsHandler(Skipping(
		otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(OrNoop(tp)), otelgrpc.WithPropagators(Propagator),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider())),
		clientSkips))
}

// clientSkips decides which client calls record nothing: those outside a
// sampled span. A call under a span that was not sampled sends its trace
// context, so the server follows the decision.
func clientSkips(ctx context.Context, _ *stats.RPCTagInfo) (context.Context, bool) {
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsSampled() {
		return ctx, false
	}
	if sc.IsValid() {
		var kv outgoing
		Propagator.Inject(ctx, &kv)
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	return ctx, true
}

// Skipping puts h only on the calls that may record a span: a call skip
// says will record nothing (returning the context to go on with) bypasses
// it. otelgrpc's work for a call that records nothing (method parsing,
// metadata copies, attributes for its metrics) is a few percent of a
// busy process's CPU, and its metrics are not used.
func Skipping(h stats.Handler, skip func(context.Context, *stats.RPCTagInfo) (context.Context, bool)) stats.Handler {
	return skipping{Handler: h, skip: skip}
}

type skipping struct {
	stats.Handler
	skip func(context.Context, *stats.RPCTagInfo) (context.Context, bool)
}

type skippedKey struct{}

func (h skipping) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if ctx, skip := h.skip(ctx, info); skip {
		return context.WithValue(ctx, skippedKey{}, struct{}{})
	}
	return h.Handler.TagRPC(ctx, info)
}

func (h skipping) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if ctx.Value(skippedKey{}) == nil {
		h.Handler.HandleRPC(ctx, s)
	}
}

// outgoing collects a trace context for a client call's metadata.
type outgoing []string

func (outgoing) Get(string) string        { return "" }
func (c *outgoing) Set(key, value string) { *c = append(*c, key, value) }
func (outgoing) Keys() []string           { return nil }

// Namespace is the namespace attribute of key (its first segment), "-" when
// it has none. The key itself never goes into a span.
func Namespace(key string) attribute.KeyValue {
	ns := lockkey.Namespace(key)
	if ns == key || !lockkey.IsDNSLabel(ns) {
		ns = "-"
	}
	return AttrNamespace.String(ns)
}

// Seconds is d as a float attribute in seconds.
func Seconds(k attribute.Key, d time.Duration) attribute.KeyValue { return k.Float64(d.Seconds()) }

// MarkOutcome sets the outcome of a failed call on span and returns it:
// reason (the lock.v1 reason err carries), or err's gRPC code when reason
// is empty. It does nothing for a nil err or a span that records nothing.
func MarkOutcome(span trace.Span, err error, reason string) string {
	if err == nil || !span.IsRecording() {
		return ""
	}
	if reason == "" {
		reason = status.FromContextError(err).Code().String()
		if st, ok := status.FromError(err); ok {
			reason = st.Code().String()
		}
	}
	span.SetAttributes(AttrReason.String(reason))
	return reason
}

// End ends span with err's outcome: reason as an attribute and as the
// status description (MarkOutcome). The error's message is not copied into
// the span: messages are for people, and the span needs only the reason.
func End(span trace.Span, err error, reason string) {
	if r := MarkOutcome(span, err, reason); r != "" {
		span.SetStatus(codes.Error, r)
	}
	span.End()
}
