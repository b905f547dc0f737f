// Package approve is `lockctl force-release approve`.
package approve

import (
	"context"
	"fmt"
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

// Options are `lockctl force-release approve`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	ID  string
	Yes bool
}

// NewCmdApprove returns `lockctl force-release approve`.
func NewCmdApprove(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "approve <id> [--yes]",
		Short: "Approve another operator's force-release request (operators)",
		Long: cmdutil.Doc(`
			Show the request: key, holder, how long it has held, class, enforcement,
			requester and reason. Then ask for confirmation, and release the hold in
			one transaction that also writes a force record, kept for 24 hours.

			You cannot approve your own request. If the hold changed after the
			request was made, nothing is released: request again.

			On a terminal lockctl asks you to type "yes" unless --yes is given. When
			stdin is not a terminal, --yes is required.
		`),
		Example: cmdutil.Example(`
			$ lockctl force-release list
			$ lockctl force-release approve 3f9c2a1b7d4e5f60

			# In automation (no prompt)
			$ lockctl force-release approve 3f9c2a1b7d4e5f60 --yes -o json
		`),
		Args: cmdutil.ExactArgs(1, "a request id from `lockctl force-release list`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if err := cmdutil.RequireYes(opts.IO.IsStdinTTY(), opts.Yes, "release a hold"); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return run(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func run(ctx context.Context, opts *Options) error {
	confirmF := func(ctx context.Context, c *client.Client) error { return confirm(ctx, opts, c) }
	return cmdutil.CallConfirmed(ctx, opts.Client, opts.Timeout, opts.Yes, confirmF, func(ctx context.Context, c *client.Client) error {
		resp, err := c.AdminService().ApproveForceRelease(ctx, &lockv1.ApproveForceReleaseRequest{Id: opts.ID})
		if err != nil {
			return err
		}
		v := view.New(resp.GetForceRelease())
		v.Approver, v.RecordKey = resp.GetApprover(), resp.GetRecordKey()
		return opts.Printer().Print(v)
	})
}

// confirm shows the pending request and asks the operator to type "yes".
func confirm(ctx context.Context, opts *Options, c *client.Client) error {
	w := opts.IO.ErrOut
	list, err := c.AdminService().ListForceReleases(ctx, &lockv1.ListForceReleasesRequest{})
	if err != nil {
		return err
	}
	var req *view.Request
	for _, f := range list.GetForceReleases() {
		if f.GetId() == opts.ID {
			req = view.New(f)
		}
	}
	if req == nil {
		return &cli.ExitError{Code: cli.ExitFailure, Err: fmt.Errorf("no pending force-release request %q (approved, denied or expired): see `lockctl force-release list`", opts.ID)}
	}
	fmt.Fprintf(w, "Key:          %s\nHolder:       %s (session %d)\nHeld for:     %s\nClass:        %s\nEnforcement:  %s\nRequester:    %s\nReason:       %s\n",
		req.Key, req.Holder, req.SessionID, time.Since(req.HoldAcquiredAt).Round(time.Second), req.Class, req.Enforcement,
		req.Requester, req.Reason)
	if req.RevokeSession {
		fmt.Fprintf(w, "The holder's whole session %d is revoked: every lock it holds is released.\n", req.SessionID)
	}
	if warn := view.Warning(req.Enforcement); warn != "" {
		fmt.Fprintln(w, warn)
	}
	return cmdutil.ConfirmYes(opts.IO.In, w, "release "+req.Key, "nothing was released")
}
