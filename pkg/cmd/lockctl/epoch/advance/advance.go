// Package advance is `lockctl epoch advance`.
package advance

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/epoch/status"
	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/iostreams"
	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/printer"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl epoch advance`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	From   uint32
	Reason string
	Yes    bool
}

// NewCmdAdvance returns `lockctl epoch advance`.
func NewCmdAdvance(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "advance --from <epoch> --reason <text> [--yes]",
		Short: "Start a new epoch and delete every hold (operators)",
		Long: cmdutil.Doc(`
			Set epoch <from>+1, bound to the store's current cluster ID, and delete
			every hold, in one transaction. This unseals a lockd whose store was
			restored. Every current holder loses its lock at once: run it only when
			the restore is deliberate and the guarded resources will reject older
			tokens.

			--from is the epoch you expect to advance from (see "lockctl epoch
			status"); the call fails if another operator advanced it first. --reason
			is recorded in lockd's log.

			On a terminal lockctl asks for confirmation unless --yes is given. When
			stdin is not a terminal, --yes is required.
		`),
		Example: cmdutil.Example(`
			$ lockctl epoch status
			$ lockctl epoch advance --from 3 --reason "restored etcd from the 02:00 snapshot (INC-1234)"

			# In automation (no prompt)
			$ lockctl epoch advance --from 3 --reason "DR drill" --yes -o json
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("from") {
				return cmdutil.FlagErrorf("--from is required: the current epoch, from `lockctl epoch status`")
			}
			opts.Reason = strings.TrimSpace(opts.Reason)
			if opts.Reason == "" {
				return cmdutil.FlagErrorf("--reason is required: say why, it is recorded in lockd's log")
			}
			if !opts.Yes && !opts.IO.IsStdinTTY() {
				return cmdutil.FlagErrorf("refusing to advance the epoch without --yes: stdin is not a terminal, so lockctl cannot ask")
			}
			if runF != nil {
				return runF(opts)
			}
			return advanceRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().Uint32Var(&opts.From, "from", 0, "the epoch to advance from (required)")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why the epoch advances, recorded in lockd's log (required)")
	cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

func advanceRun(ctx context.Context, opts *Options) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		if !opts.Yes {
			if err := confirm(ctx, opts, c); err != nil {
				return err
			}
		}
		// The operator may take longer to answer than the call timeout.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.Timeout)
		defer cancel()
		resp, err := c.AdminService().AdvanceEpoch(ctx, &lockv1.AdvanceEpochRequest{FromEpoch: opts.From, Reason: opts.Reason})
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
		fmt.Fprintf(w, "Current epoch %d (record cluster %s, store cluster %s, sealed: %s).\n",
			v.Epoch, v.RecordClusterID, v.StoreClusterID, cmdutil.YesNo(v.Sealed))
		if v.Epoch != opts.From {
			fmt.Fprintf(w, "Note: the current epoch is %d, not --from %d: lockd will refuse this advance.\n", v.Epoch, opts.From)
		}
	}
	fmt.Fprintf(w, "Advancing from epoch %d to %d deletes EVERY hold: all holders lose their locks now.\n", opts.From, opts.From+1)
	fmt.Fprintf(w, "Type \"yes\" to advance: ")
	line, _ := bufio.NewReader(opts.IO.In).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("%w: the epoch was not advanced", cmdutil.ErrCancel)}
	}
	return nil
}

// View is the result of an advance. The cluster ID is a hex string.
type View struct {
	Epoch        uint32 `json:"epoch"`
	ClusterID    string `json:"cluster_id"`
	HoldsDeleted int64  `json:"holds_deleted"`
}

// NewView converts an AdvanceEpochResponse.
func NewView(r *lockv1.AdvanceEpochResponse) *View {
	return &View{Epoch: r.GetEpoch(), ClusterID: status.Hex(r.GetClusterId()), HoldsDeleted: r.GetHoldsDeleted()}
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	t.Field("Epoch", printer.Cell{Text: strconv.FormatUint(uint64(v.Epoch), 10)})
	t.Field("Cluster ID", printer.Cell{Text: v.ClusterID})
	t.Field("Holds deleted", printer.Cell{Text: strconv.FormatInt(v.HoldsDeleted, 10)})
}
