package lockdcmd

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/tracing"
)

// run builds lockd from opts (the one assembly, internal/lockd) and serves
// until ctx is cancelled (a clean stop, nil error), a listener fails or the
// embedded etcd reports an error. Invalid options return a *usageError
// before anything is started.
func run(ctx context.Context, opts *Options) error {
	if err := validate(opts); err != nil {
		return err
	}
	tuneGC(os.LookupEnv)
	tp, err := tracing.FromEnv(ctx, "lockd")
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	if tp != nil {
		opts.TracerProvider = tp
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
			defer cancel()
			_ = tp.Shutdown(sctx) // spans not exported by then are lost, not waited for
		}()
	}
	d, err := lockd.New(ctx, *opts)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Run(ctx)
}

// traceFlushTimeout bounds how long a stopping lockd waits to export the
// spans it still buffers.
const traceFlushTimeout = 5 * time.Second

// validate checks opts (lockd.Config.Validate); a violation is a usage
// error.
func validate(opts *Options) error {
	if err := opts.Validate(); err != nil {
		return &cli.UsageError{Err: err}
	}
	return nil
}

// defaultGCPercent is lockd's GOGC unless the environment sets GOGC. lockd
// keeps a small live heap and allocates for every call, so at Go's default
// (100) it collects dozens of times a second under load: at 4,000 grants a
// second against an external etcd a fifth of its CPU went to the collector
// and to regrowing stacks the collector had shrunk. 400 lets the heap grow
// to five times what is live before a collection (docs/operating.md has
// the measured CPU and memory).
const defaultGCPercent = 400

// tuneGC sets defaultGCPercent unless GOGC is set (the operator's choice,
// "off" included, wins).
func tuneGC(lookupEnv func(string) (string, bool)) {
	if _, ok := lookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
}
