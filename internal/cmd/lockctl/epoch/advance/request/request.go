// Package request is `lockctl epoch advance request`.
package request

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl epoch advance request`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	From, To uint32
	Reason   string
	// Cluster is the etcd cluster whose epoch moves; required when lockd
	// fronts several.
	Cluster string
}

// NewCmdRequest returns `lockctl epoch advance request`.
func NewCmdRequest(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "request [--cluster <name>] --from <epoch> [--to <epoch>] --reason <text>",
		Short: "Ask for a new epoch (operators; a second operator approves)",
		Long: cmdutil.Doc(`
			Record a request to advance the epoch from --from, the epoch shown by
			"lockctl epoch status", to --to (default: the next one). Nothing changes
			yet. A different operator must run "lockctl epoch advance approve <id>"
			within an hour. The approval then starts the new epoch and deletes every
			hold.

			A store rebuilt empty has no epoch record: give --from 0 and a --to above
			every epoch ever issued on it (docs/operating.md says where to find the
			last one: lockd's data dir, its logs and metrics, the tokens your fenced
			resources stored). lockd refuses a --to not above the highest epoch it
			has seen, or not above the highest allocated to any cluster.

			Each etcd cluster lockd fronts has its own epoch: name it with --cluster
			(lockctl clusters lists them; required when there are several). Epoch
			numbers are allocated from one counter, so the next epoch of a cluster
			may be above its --from + 1: --to defaults to the next one free.
		`),
		Example: cmdutil.Example(`
			$ lockctl epoch status
			$ lockctl epoch advance request --from 3 --reason "restored etcd from the 02:00 snapshot (INC-1234)"
			# A store rebuilt empty, whose last epoch was 7:
			$ lockctl epoch advance request --from 0 --to 8 --reason "etcd rebuilt after losing all disks (INC-1250)"
			# The entity tier's cluster, restored:
			$ lockctl epoch advance request --cluster eu-west-entity --from 5 --reason "restored (INC-1301)"
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("from") {
				return cli.Usagef("--from is required: the current epoch, from `lockctl epoch status`")
			}
			if opts.From == 0 && opts.To == 0 {
				return cli.Usagef("--to is required with --from 0: an epoch above every epoch issued before (see docs/operating.md)")
			}
			if opts.To != 0 && opts.To <= opts.From {
				return cli.Usagef("--to %d must be above --from %d", opts.To, opts.From)
			}
			opts.Reason = strings.TrimSpace(opts.Reason)
			if opts.Reason == "" {
				return cli.Usagef("--reason is required: say why, it is recorded in lockd's log")
			}
			if runF != nil {
				return runF(opts)
			}
			return cmdutil.Call(cmd.Context(), opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
				resp, err := c.AdminService().RequestEpochAdvance(ctx, &lockv1.RequestEpochAdvanceRequest{Cluster: opts.Cluster, FromEpoch: opts.From, ToEpoch: opts.To, Reason: opts.Reason})
				if err != nil {
					return err
				}
				return opts.Printer().Print(NewView(resp))
			})
		},
	}
	cmd.Flags().Uint32Var(&opts.From, "from", 0, "the epoch to advance from (required; 0 when the store has no epoch record)")
	cmd.Flags().Uint32Var(&opts.To, "to", 0, "the epoch to advance to (default: the next; required with --from 0)")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why the epoch advances, recorded in lockd's log (required)")
	cmd.Flags().StringVar(&opts.Cluster, "cluster", "", "the etcd cluster whose epoch moves (`lockctl clusters`; required when lockd fronts several)")
	return cmd
}

// View is a pending epoch advance.
type View struct {
	ID        string    `json:"id"`
	Cluster   string    `json:"cluster,omitempty"`
	From      uint32    `json:"from_epoch"`
	To        uint32    `json:"to_epoch"`
	Requester string    `json:"requester"`
	Reason    string    `json:"reason"`
	ExpiresAt time.Time `json:"expires_at"`
}

// NewView converts a RequestEpochAdvanceResponse.
func NewView(r *lockv1.RequestEpochAdvanceResponse) *View {
	return &View{ID: r.GetId(), Cluster: r.GetCluster(), From: r.GetFromEpoch(), To: r.GetToEpoch(), Requester: r.GetRequester(), Reason: r.GetReason(), ExpiresAt: cmdutil.Time(r.GetExpiresAt())}
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	t.Field("Request", printer.Cell{Text: v.ID})
	if v.Cluster != "" {
		t.Field("Cluster", printer.Cell{Text: v.Cluster})
	}
	t.Field("From epoch", printer.Cell{Text: strconvU(v.From)})
	t.Field("To epoch", printer.Cell{Text: strconvU(v.To)})
	t.Field("Requester", printer.Cell{Text: v.Requester})
	t.Field("Reason", printer.Cell{Text: v.Reason})
	t.Field("Expires", printer.Cell{Text: t.Time(v.ExpiresAt)})
}

// Notes implements printer.Noter.
func (v *View) Notes() []string {
	return []string{"a different operator must approve: lockctl epoch advance approve " + v.ID}
}

func strconvU(u uint32) string { return strconv.FormatUint(uint64(u), 10) }
