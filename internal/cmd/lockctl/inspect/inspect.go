// Package inspect is `lockctl inspect`: who holds a key, or every hold
// under a prefix.
package inspect

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl inspect`'s inputs.
type Options struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	// Target is a key, or a prefix when it ends in "/".
	Target string
	Limit  int32
}

// IsPrefix reports whether the target is a prefix.
func (o *Options) IsPrefix() bool { return strings.HasSuffix(o.Target, "/") }

// NewCmdInspect returns `lockctl inspect`.
func NewCmdInspect(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{Client: f.Client, Printer: f.Printer, Timeout: 10 * time.Second}
	cmd := &cobra.Command{
		Use:   "inspect <key | prefix/>",
		Short: "Show who holds a key, or every hold under a prefix",
		Long: cmdutil.Doc(`
			Show one key's hold: holder identity, session, how long the session has
			left by the store's clock (how long a crashed holder can keep the key),
			class, when it was acquired, its age and the waiters in line, in the
			order they will be granted (position 1 is next), with how long each has
			waited: first the key's durable line (classes with fairness durable; kept
			in etcd, the same from every lockd), then the waiters queued on the
			answering lockd. The fencing token is shown only when lockd returns it
			(operator identities).

			An argument ending in "/" is a prefix: every hold under it is listed, in
			key order.
		`),
		Example: cmdutil.Example(`
			# Who holds this key?
			$ lockctl inspect payments/ledger/migrate

			# Every hold in the demo namespace, as JSON
			$ lockctl inspect demo/ -o json

			# Keys held under a prefix, for a script (tab-separated when piped)
			$ lockctl inspect payments/ledger/ | cut -f1
		`),
		Args: cmdutil.ExactArgs(1, "<key | prefix/>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Target = args[0]
			if opts.Limit < 0 {
				return cli.Usagef("--limit must not be negative")
			}
			if opts.Limit != 0 && !opts.IsPrefix() {
				return cli.Usagef("--limit applies to a prefix (an argument ending in \"/\"), not to key %q", opts.Target)
			}
			if runF != nil {
				return runF(opts)
			}
			return inspectRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().Int32Var(&opts.Limit, "limit", 0, "with a prefix: list at most this many holds (default: lockd's, 1000)")
	return cmd
}

func inspectRun(ctx context.Context, opts *Options) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		if opts.IsPrefix() {
			resp, err := c.LockService().ListHolds(ctx, &lockv1.ListHoldsRequest{Prefix: opts.Target, Limit: opts.Limit})
			if err != nil {
				return err
			}
			return opts.Printer().Print(NewHoldsView(opts.Target, resp))
		}
		resp, err := c.LockService().Inspect(ctx, &lockv1.InspectRequest{Key: opts.Target})
		if err != nil {
			return err
		}
		return opts.Printer().Print(NewKeyView(opts.Target, resp))
	})
}
