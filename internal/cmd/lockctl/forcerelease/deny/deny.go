// Package deny is `lockctl force-release deny`.
package deny

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease/view"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl force-release deny`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	ID     string
	Reason string
}

// NewCmdDeny returns `lockctl force-release deny`.
func NewCmdDeny(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "deny <id> [--reason <text>]",
		Short: "Refuse or withdraw a force-release request (operators)",
		Long: cmdutil.Doc(`
			Remove a pending force-release request without releasing anything. The
			requester may withdraw their own request; another operator may refuse it.
		`),
		Example: cmdutil.Example(`
			$ lockctl force-release deny 3f9c2a1b7d4e5f60 --reason "holder recovered at 02:31"
		`),
		Args: cmdutil.ExactArgs(1, "a request id from `lockctl force-release list`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(opts)
			}
			return cmdutil.Call(cmd.Context(), opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
				resp, err := c.AdminService().DenyForceRelease(ctx, &lockv1.DenyForceReleaseRequest{Id: opts.ID, Reason: opts.Reason})
				if err != nil {
					return err
				}
				return opts.Printer().Print(view.New(resp.GetForceRelease()))
			})
		},
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, recorded in lockd's log")
	return cmd
}
