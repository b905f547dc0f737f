// Package status is `lockctl epoch status`.
package status

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl epoch status`' inputs.
type Options struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration
}

// NewCmdStatus returns `lockctl epoch status`.
func NewCmdStatus(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{Client: f.Client, Printer: f.Printer, Timeout: 10 * time.Second}
	return &cobra.Command{
		Use:   "status",
		Short: "Show the epoch and whether lockd is sealed",
		Long: cmdutil.Doc(`
			Show the current epoch, the etcd cluster ID it was minted for (record),
			the cluster ID the store reports now, whether lockd is sealed, and the
			store's revision. Cluster IDs are hexadecimal, as etcdctl prints them.

			Sealed means lockd refuses every grant and renewal until two operators
			advance the epoch: the two cluster IDs differ (the store was restored),
			the store has no epoch record (it was rebuilt empty), or the store is
			behind what lockd has served. The reason says which, and what to run.
			Highest epoch is the highest lockd has seen: an advance must go above it.
		`),
		Example: cmdutil.Example(`
			$ lockctl epoch status
			$ lockctl epoch status -o json | jq .sealed
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return statusRun(cmd.Context(), opts)
		},
	}
}

func statusRun(ctx context.Context, opts *Options) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		resp, err := c.AdminService().EpochStatus(ctx, &lockv1.EpochStatusRequest{})
		if err != nil {
			return err
		}
		return opts.Printer().Print(NewView(resp))
	})
}

// View is `lockctl epoch status`. Cluster IDs are hex strings.
type View struct {
	Epoch           uint32 `json:"epoch"`
	RecordClusterID string `json:"record_cluster_id"`
	StoreClusterID  string `json:"store_cluster_id"`
	Sealed          bool   `json:"sealed"`
	SealedReason    string `json:"sealed_reason,omitempty"`
	RecordMissing   bool   `json:"record_missing"`
	HighestEpoch    uint32 `json:"highest_epoch"`
	Revision        int64  `json:"revision"`
}

// Hex formats a cluster ID as etcdctl does.
func Hex(id uint64) string { return strconv.FormatUint(id, 16) }

// NewView converts an EpochStatusResponse.
func NewView(r *lockv1.EpochStatusResponse) *View {
	return &View{Epoch: r.GetEpoch(), RecordClusterID: Hex(r.GetRecordClusterId()),
		StoreClusterID: Hex(r.GetStoreClusterId()), Sealed: r.GetSealed(), SealedReason: r.GetSealedReason(),
		RecordMissing: r.GetRecordMissing(), HighestEpoch: r.GetHighestEpoch(), Revision: r.GetRevision()}
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	epoch := strconv.FormatUint(uint64(v.Epoch), 10)
	if v.RecordMissing {
		epoch = "none (no epoch record)"
	}
	t.Field("Epoch", printer.Cell{Text: epoch})
	t.Field("Highest epoch", printer.Cell{Text: strconv.FormatUint(uint64(v.HighestEpoch), 10)})
	t.Field("Record cluster ID", printer.Cell{Text: v.RecordClusterID})
	t.Field("Store cluster ID", printer.Cell{Text: v.StoreClusterID})
	sealed := printer.Cell{Text: cmdutil.YesNo(v.Sealed), Style: printer.Green}
	if v.Sealed {
		sealed.Style = printer.Red
	}
	t.Field("Sealed", sealed)
	t.Field("Revision", printer.Cell{Text: strconv.FormatInt(v.Revision, 10)})
}

// Notes implements printer.Noter: when sealed, why and what to do.
func (v *View) Notes() []string {
	if !v.Sealed {
		return nil
	}
	return []string{fmt.Sprintf("lockd is SEALED and refuses every lock: %s", v.SealedReason)}
}
