// Package approve is `lockctl epoch advance approve`.
package approve

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/epoch/status"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl epoch advance approve`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	ID  string
	Yes bool
}

// NewCmdApprove returns `lockctl epoch advance approve`.
func NewCmdApprove(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "approve <id> [--yes]",
		Short: "Approve another operator's epoch advance: start a new epoch and delete every hold",
		Long: cmdutil.Doc(`
			Run the epoch advance another operator requested. One transaction sets the
			next epoch, bound to the store's current cluster ID, and deletes every hold.
			This unseals a lockd whose store was restored. Every current holder loses
			its lock at once, and grants resume after the longest class TTL. Approve
			only when the restore is deliberate and the guarded resources will reject
			older tokens.

			You cannot approve your own request. On a terminal lockctl asks for
			confirmation unless --yes is given. When stdin is not a terminal, --yes is
			required.
		`),
		Example: cmdutil.Example(`
			$ lockctl epoch status
			$ lockctl epoch advance approve 5d1e0c9a2b3f4a77

			# In automation (no prompt)
			$ lockctl epoch advance approve 5d1e0c9a2b3f4a77 --yes -o json
		`),
		Args: cmdutil.ExactArgs(1, "a request id from `lockctl epoch advance request`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if err := cmdutil.RequireYes(opts.IO.IsStdinTTY(), opts.Yes, "advance the epoch"); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return advanceRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func advanceRun(ctx context.Context, opts *Options) error {
	confirmF := func(ctx context.Context, c *client.Client) error { return confirm(ctx, opts, c) }
	return cmdutil.CallConfirmed(ctx, opts.Client, opts.Timeout, opts.Yes, confirmF, func(ctx context.Context, c *client.Client) error {
		resp, err := c.AdminService().ApproveEpochAdvance(ctx, &lockv1.ApproveEpochAdvanceRequest{Id: opts.ID})
		if err != nil {
			return err
		}
		return opts.Printer().Print(NewView(resp))
	})
}

// confirm shows the current state and asks the operator to type "yes".
func confirm(ctx context.Context, opts *Options, c *client.Client) error {
	w := opts.IO.ErrOut
	if st, err := c.AdminService().EpochStatus(ctx, &lockv1.EpochStatusRequest{}); err == nil {
		v := status.NewView(st)
		clusters := v.Clusters
		if len(clusters) == 0 {
			clusters = []*status.View{v}
		}
		for _, c := range clusters {
			fmt.Fprintf(w, "Cluster %s: epoch %d (record cluster %s, store cluster %s, sealed: %s).\n",
				cmp.Or(c.Cluster, "-"), c.Epoch, c.RecordClusterID, c.StoreClusterID, cmdutil.YesNo(c.Sealed))
		}
		fmt.Fprintln(w, "Advancing deletes EVERY hold of the request's cluster: all its holders lose their locks now.")
	}
	return cmdutil.ConfirmYes(opts.IO.In, w, "approve request "+opts.ID, "the epoch was not advanced")
}

// View is the result of an advance. The cluster ID is a hex string.
type View struct {
	Cluster      string `json:"cluster,omitempty"`
	Epoch        uint32 `json:"epoch"`
	ClusterID    string `json:"cluster_id"`
	HoldsDeleted int64  `json:"holds_deleted"`
	Requester    string `json:"requester"`
	Approver     string `json:"approver"`
	// GrantsResumeIn is the epoch grace: no grant is made until it ends.
	GrantsResumeIn string `json:"grants_resume_in"`
}

// NewView converts an ApproveEpochAdvanceResponse.
func NewView(r *lockv1.ApproveEpochAdvanceResponse) *View {
	return &View{Cluster: r.GetCluster(), Epoch: r.GetEpoch(), ClusterID: status.Hex(r.GetClusterId()), HoldsDeleted: r.GetHoldsDeleted(),
		Requester: r.GetRequester(), Approver: r.GetApprover(), GrantsResumeIn: r.GetGrantsResumeIn().AsDuration().String()}
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	if v.Cluster != "" {
		t.Field("Cluster", printer.Cell{Text: v.Cluster})
	}
	t.Field("Epoch", printer.Cell{Text: strconv.FormatUint(uint64(v.Epoch), 10)})
	t.Field("Cluster ID", printer.Cell{Text: v.ClusterID})
	t.Field("Holds deleted", printer.Cell{Text: strconv.FormatInt(v.HoldsDeleted, 10)})
	t.Field("Requested by", printer.Cell{Text: v.Requester})
	t.Field("Approved by", printer.Cell{Text: v.Approver})
	t.Field("Grants resume in", printer.Cell{Text: v.GrantsResumeIn})
}
