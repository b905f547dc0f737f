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

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/lockd-dev/lockd/pkg/locktrace"
)

// ErrConfig reports OTEL_* settings lockd cannot use.
var ErrConfig = errors.New("tracing: configuration")

// Attribute keys lockd sets on spans: pkg/locktrace's, shared with the
// clients.
const (
	AttrNamespace     = locktrace.AttrNamespace
	AttrClass         = locktrace.AttrClass
	AttrReason        = locktrace.AttrReason
	AttrWaitRequested = locktrace.AttrWaitRequested
	AttrWaited        = locktrace.AttrWaited
	AttrTokenState    = locktrace.AttrTokenState
)

// Propagator is the context propagation lockd and its client use
// (locktrace.Propagator).
var Propagator = locktrace.Propagator

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

// ServerOptions trace lockd's gRPC server: one span per call (the stats
// handler), continuing the caller's trace when it sent one, with the
// outcome of a failed call as an attribute: reason(err), the lock.v1 reason
// of the status the call answered with.
func ServerOptions(tp trace.TracerProvider, reason func(error) string) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StatsHandler(locktrace.Skipping(
			otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(locktrace.OrNoop(tp)), otelgrpc.WithPropagators(Propagator),
				otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider())),
			serverSkips)),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if span := trace.SpanFromContext(ctx); err != nil && span.IsRecording() {
				locktrace.MarkOutcome(span, err, reason(err))
			}
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			if span := trace.SpanFromContext(ss.Context()); err != nil && span.IsRecording() {
				locktrace.MarkOutcome(span, err, reason(err))
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

// ClientHandler is the stats handler for lockd's etcd client:
// locktrace.ClientHandler.
func ClientHandler(tp trace.TracerProvider) grpc.DialOption { return locktrace.ClientHandler(tp) }

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

// Namespace, Seconds and End are locktrace's.
var (
	Namespace = locktrace.Namespace
	Seconds   = locktrace.Seconds
	End       = locktrace.End
)
