// Package list is `lockctl force-release list`.
package list

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

// Options are `lockctl force-release list`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration
}

// NewCmdList returns `lockctl force-release list`.
func NewCmdList(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List pending force-release requests (operators)",
		Long: cmdutil.Doc(`
			List the force-release requests waiting for a second operator, oldest
			first, with the class's enforcement of each. A request expires unapproved
			an hour after it was made.
		`),
		Example: cmdutil.Example(`
			$ lockctl force-release list
			$ lockctl force-release list -o json | jq -r '.requests[].id'
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return cmdutil.Call(cmd.Context(), opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
				resp, err := c.AdminService().ListForceReleases(ctx, &lockv1.ListForceReleasesRequest{})
				if err != nil {
					return err
				}
				v := &view.List{Requests: []*view.Request{}}
				for _, f := range resp.GetForceReleases() {
					v.Requests = append(v.Requests, view.New(f))
				}
				return opts.Printer().Print(v)
			})
		},
	}
	return cmd
}
