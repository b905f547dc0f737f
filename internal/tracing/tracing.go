// Package tracing is lockd's OpenTelemetry wiring: a tracer provider built
// from the standard OTEL_* environment variables (off unless they ask for an
// exporter), the gRPC stats handlers for lockd's server, its etcd client and
// the Go client, and the span attributes lockd sets.
//
// Span attributes are bounded and carry no secret: namespace, class, outcome
// reason and wait times. A key is never a metric label, and a token is never
// written anywhere: not in a span name, attribute, event or status. The
// canary test in this package drives every call that handles a token with
// tracing and debug logging on and fails on any form of one in the output.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/lockkey"
)

// ErrConfig reports OTEL_* settings lockd cannot use.
var ErrConfig = errors.New("tracing: configuration")

// Attribute keys lockd sets on spans.
const (
	AttrNamespace     = attribute.Key("lock.namespace")
	AttrClass         = attribute.Key("lock.class")
	AttrReason        = attribute.Key("lock.outcome.reason")
	AttrWaitRequested = attribute.Key("lock.wait.requested_s")
	AttrWaited        = attribute.Key("lock.wait.elapsed_s")
	AttrTokenState    = attribute.Key("lock.token.state")
)

// Propagator is the context propagation lockd and its client use: W3C trace
// context in gRPC metadata (lockd reads no baggage).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Enabled reports whether the environment asks for traces: an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or
// OTEL_TRACES_EXPORTER=otlp, and neither OTEL_SDK_DISABLED=true nor
// OTEL_TRACES_EXPORTER=none.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Provider is a tracer provider that exports over OTLP.
type Provider struct {
	*sdktrace.TracerProvider
}

// FromEnv builds the provider the OTEL_* environment variables describe, or
// returns nil (tracing off) when they do not ask for one. The exporter, its
// endpoint, headers, TLS and timeouts, the sampler and the resource all come
// from the standard variables; service.name defaults to service.
// OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) chooses grpc (the
// default) or http/protobuf.
func FromEnv(ctx context.Context, service string) (*Provider, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	if e := strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER")); e != "" && e != "otlp" {
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%s: lockd exports traces with otlp (or none)", ErrConfig, e)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case "", "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%s: use grpc or http/protobuf", ErrConfig, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP exporter: %w", ErrConfig, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER(_ARG); parentbased_always_on
	// when unset.
	return &Provider{sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// Shutdown flushes spans not yet exported and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.TracerProvider.Shutdown(ctx)
}

// orNoop is tp, or a provider that records nothing when tp is nil.
func orNoop(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}

// ServerOptions trace lockd's gRPC server: one span per call (the stats
// handler), continuing the caller's trace when it sent one, with the
// outcome of a failed call as an attribute: reason(err), the lock.v1 reason
// of the status the call answered with.
func ServerOptions(tp trace.TracerProvider, reason func(error) string) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StatsHandler(recordedOnly{
			Handler: otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(orNoop(tp)), otelgrpc.WithPropagators(Propagator),
				otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider())),
			skip: serverSkips,
		}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if span := trace.SpanFromContext(ctx); err != nil && span.IsRecording() {
				markOutcome(span, err, reason(err))
			}
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			if span := trace.SpanFromContext(ss.Context()); err != nil && span.IsRecording() {
				markOutcome(span, err, reason(err))
			}
			return err
		}),
	}
}

// serverSkips decides which server calls record nothing: health checks and
// reflection (a probe every few seconds would be a trace every few seconds
// that says nothing), and calls whose caller sent a trace context it did
// not sample, which lockd follows as a parent-based sampler would; their
// context is carried on to lockd's own calls. Calls without a trace
// context go to the provider's sampler.
func serverSkips(ctx context.Context, info *stats.RPCTagInfo) (context.Context, bool) {
	if strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.") || strings.HasPrefix(info.FullMethodName, "/grpc.reflection.") {
		return ctx, true
	}
	sc := trace.SpanContextFromContext(Propagator.Extract(ctx, incoming{ctx}))
	if sc.IsValid() && !sc.IsSampled() {
		return trace.ContextWithRemoteSpanContext(ctx, sc), true
	}
	return ctx, false
}

// ClientHandler is the stats handler for a gRPC client (lockd's etcd
// client, the Go client): a span per call made inside a sampled operation.
// Calls made outside one (background keepalives, watches, the epoch
// refresh) start no trace of their own: they would be one long or frequent
// root span each and say nothing about any request. A call inside an
// operation that was not sampled carries that operation's trace context
// on, and records nothing.
func ClientHandler(tp trace.TracerProvider) grpc.DialOption {
	return grpc.WithStatsHandler(recordedOnly{
		Handler: otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(orNoop(tp)), otelgrpc.WithPropagators(Propagator),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider())),
		skip: clientSkips,
	})
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

// markOutcome sets the outcome of a failed call on span and returns it:
// reason, or err's gRPC code when reason is empty.
func markOutcome(span trace.Span, err error, reason string) string {
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

// recordedOnly puts otelgrpc's handler only on the calls that may record a
// span: a call skip says will record nothing bypasses it. Measured at
// lockd's grant rate, otelgrpc's work for a call that records nothing
// (method parsing, metadata copies, attributes for its metrics) is a few
// percent of lockd's CPU and of its Go client's. otelgrpc's metrics are
// not used (lockd's RPC metrics are its own Prometheus ones), so nothing
// is lost by skipping a call.
type recordedOnly struct {
	stats.Handler
	skip func(context.Context, *stats.RPCTagInfo) (context.Context, bool)
}

type skippedKey struct{}

func (h recordedOnly) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if ctx, skip := h.skip(ctx, info); skip {
		return context.WithValue(ctx, skippedKey{}, struct{}{})
	}
	return h.Handler.TagRPC(ctx, info)
}

func (h recordedOnly) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if ctx.Value(skippedKey{}) == nil {
		h.Handler.HandleRPC(ctx, s)
	}
}

// incoming reads a trace context from a server call's metadata.
type incoming struct{ ctx context.Context }

func (c incoming) Get(key string) string {
	if vs := metadata.ValueFromIncomingContext(c.ctx, key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}
func (incoming) Set(string, string) {}
func (incoming) Keys() []string     { return nil }

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

// End ends span with err's outcome: reason (the lock.v1 reason err
// carries; its gRPC code when it has none) as an attribute and as the
// status description. The error's message is not copied into the span:
// messages are for people, and the span needs only the reason.
func End(span trace.Span, err error, reason string) {
	if r := markOutcome(span, err, reason); r != "" {
		span.SetStatus(codes.Error, r)
	}
	span.End()
}
