package tracing_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkAcquireRelease is one Acquire and Release through the Go client
// and lockd (embedded etcd, one process), with tracing off, one trace in
// ten sampled, and every trace sampled (spans recorded and batched, then
// dropped: the SDK's and otelgrpc's cost without encoding or sending). The
// figure for the cost target is ci/bench's tracing comparison, with lockd
// in its own process and OTLP export; this one is for profiles.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, side := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"off", nil},
		{"sampled-10pct", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))},
		{"all", sdktrace.ParentBased(sdktrace.AlwaysSample())},
	} {
		sampler := side.sampler
		b.Run(side.name, func(b *testing.B) {
			o := lockdtest.Options{}
			var opts []client.Option
			if sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sampler))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				o.TracerProvider = tp
				opts = append(opts, client.WithTracerProvider(tp))
			} else {
				opts = append(opts, client.WithTracerProvider(noop.NewTracerProvider()))
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
