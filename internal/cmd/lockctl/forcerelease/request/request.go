// Package request is `lockctl force-release request`.
package request

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease/view"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl force-release request`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	Key           string
	Reason        string
	RevokeSession bool
}

// NewCmdRequest returns `lockctl force-release request`.
func NewCmdRequest(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "request <key> --reason <text> [--revoke-session]",
		Short: "Ask for a held key to be released by force (operators)",
		Long: cmdutil.Doc(`
			Record a request to release the current hold of <key>. Nothing is released
			yet: a second, different operator must approve the request with
			"lockctl force-release approve <id>" within an hour.

			The output starts with the class's enforcement. For a fenced class the
			resource rejects the old holder's token after the release. For an
			advisory class it does not: if the holder is still running, releasing
			may let two writers in at once.

			The request remembers this hold. If the hold is released or granted again
			before the approval, the approval releases nothing.

			--revoke-session ends the holder's whole session, and with it every
			lock that session holds, instead of this one hold.
		`),
		Example: cmdutil.Example(`
			$ lockctl force-release request payments/ledger/42 --reason "INC-1234: holder wedged since 02:10"
			$ lockctl force-release request payments/ledger/42 --reason "INC-1234" --revoke-session -o json
		`),
		Args: cmdutil.ExactArgs(1, "a key, e.g. payments/ledger/42"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Key = args[0]
			opts.Reason = strings.TrimSpace(opts.Reason)
			if opts.Reason == "" {
				return cli.Usagef("--reason is required: say why, it is recorded with the request and the force record")
			}
			if runF != nil {
				return runF(opts)
			}
			return run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why the hold must go, recorded with the request (required)")
	cmd.Flags().BoolVar(&opts.RevokeSession, "revoke-session", false, "revoke the holder's whole session instead of this one hold")
	return cmd
}

func run(ctx context.Context, opts *Options) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		resp, err := c.AdminService().RequestForceRelease(ctx, &lockv1.RequestForceReleaseRequest{
			Key: opts.Key, Reason: opts.Reason, RevokeSession: opts.RevokeSession})
		if err != nil {
			return err
		}
		return opts.Printer().Print(view.New(resp.GetForceRelease()))
	})
}
