package tracing_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

var _ = tracetest.NewNoopExporter

// BenchmarkAcquireRelease is one Acquire and Release through the Go client
// and lockd (embedded etcd), with tracing off and on (every span recorded
// and batched, then dropped: the SDK's and otelgrpc's cost, without
// encoding or sending). The release gate of the 5 % target is ci/bench's
// tracing comparison; this is for profiles.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("tracing=%v", on), func(b *testing.B) {
			o := lockdtest.Options{}
			var opts []client.Option
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				o.TracerProvider = tp
				opts = append(opts, client.WithTracerProvider(tp))
			} else {
				opts = append(opts, client.WithTracerProvider(trace.NewNoopTracerProvider()))
			}
			env := lockdtest.Start(b, o)
			c := env.Client(b, lockdtest.Alice, opts...)
			b.SetParallelism(32) // 64 workers on 2 CPUs, as ci/bench's uncontended W=64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					l, err := c.Acquire(context.Background(), fmt.Sprintf("t/bench/%p/%d", pb, i%64), "std", func(*client.Lock) {})
					if err != nil {
						b.Error(err)
						return
					}
					_ = l.Release(context.Background())
				}
			})
		})
	}
}
