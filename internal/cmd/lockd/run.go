package lockdcmd

import (
	"context"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/lockd"
)

// run builds lockd from opts (the one assembly, internal/lockd) and serves
// until ctx is cancelled (a clean stop, nil error), a listener fails or the
// embedded etcd reports an error. Invalid options return a *usageError
// before anything is started.
func run(ctx context.Context, opts *Options) error {
	if err := validate(opts); err != nil {
		return err
	}
	d, err := lockd.New(ctx, *opts)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Run(ctx)
}

// validate checks opts (lockd.Config.Validate); a violation is a usage
// error.
func validate(opts *Options) error {
	if err := opts.Validate(); err != nil {
		return &cli.UsageError{Err: err}
	}
	return nil
}
