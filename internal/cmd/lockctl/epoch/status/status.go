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
	// Cluster, when set, is the one cluster to show.
	Cluster string
}

// NewCmdStatus returns `lockctl epoch status`.
func NewCmdStatus(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{Client: f.Client, Printer: f.Printer, Timeout: 10 * time.Second}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each etcd cluster's epoch and whether lockd is sealed for it",
		Long: cmdutil.Doc(`
			Show, for each etcd cluster lockd fronts (one table row per cluster when
			there are several; --cluster for one), the current epoch, the etcd
			cluster ID it was minted for (record),
			the cluster ID the store reports now, whether lockd is sealed, and the
			store's revision. Cluster IDs are hexadecimal, as etcdctl prints them.

			Sealed means lockd refuses every grant and renewal until two operators
			advance the epoch: the two cluster IDs differ (the store was restored),
			the store has no epoch record (it was rebuilt empty), or the store is
			behind what lockd has served. The reason says which, and what to run.
			Highest epoch is the highest lockd has seen: an advance must go above it.
			Allocated epoch is the highest given to any cluster (a counter on the coord
			tier's cluster): no two clusters ever use one epoch, so every advance, of
			any cluster, goes above it too.
		`),
		Example: cmdutil.Example(`
			$ lockctl epoch status
			$ lockctl epoch status --cluster eu-west-entity
			$ lockctl epoch status -o json | jq '.clusters[] | select(.sealed) | .cluster'
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return statusRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Cluster, "cluster", "", "Show only this etcd cluster (`lockctl clusters` lists them)")
	return cmd
}

func statusRun(ctx context.Context, opts *Options) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		resp, err := c.AdminService().EpochStatus(ctx, &lockv1.EpochStatusRequest{Cluster: opts.Cluster})
		if err != nil {
			return err
		}
		return opts.Printer().Print(NewView(resp))
	})
}

// View is `lockctl epoch status`: the coord tier's cluster at the top
// level, and every cluster in Clusters. Cluster IDs are hex strings.
type View struct {
	Cluster         string  `json:"cluster,omitempty"`
	Epoch           uint32  `json:"epoch"`
	RecordClusterID string  `json:"record_cluster_id"`
	StoreClusterID  string  `json:"store_cluster_id"`
	Sealed          bool    `json:"sealed"`
	SealedReason    string  `json:"sealed_reason,omitempty"`
	RecordMissing   bool    `json:"record_missing"`
	HighestEpoch    uint32  `json:"highest_epoch"`
	AllocatedEpoch  uint32  `json:"allocated_epoch"`
	Revision        int64   `json:"revision"`
	Error           string  `json:"error,omitempty"`
	Clusters        []*View `json:"clusters,omitempty"`
}

// Hex formats a cluster ID as etcdctl does.
func Hex(id uint64) string { return strconv.FormatUint(id, 16) }

// NewView converts an EpochStatusResponse.
func NewView(r *lockv1.EpochStatusResponse) *View {
	v := &View{Cluster: r.GetCluster(), Epoch: r.GetEpoch(), RecordClusterID: Hex(r.GetRecordClusterId()),
		StoreClusterID: Hex(r.GetStoreClusterId()), Sealed: r.GetSealed(), SealedReason: r.GetSealedReason(),
		RecordMissing: r.GetRecordMissing(), HighestEpoch: r.GetHighestEpoch(), AllocatedEpoch: r.GetAllocatedEpoch(),
		Revision: r.GetRevision(), Error: r.GetError()}
	for _, c := range r.GetClusters() {
		v.Clusters = append(v.Clusters, NewView(c))
	}
	return v
}

// WriteTable implements printer.Tabular: the fields of one cluster, or a
// row per cluster when lockd fronts several.
func (v *View) WriteTable(t *printer.Table) {
	if len(v.Clusters) > 1 {
		t.Header("CLUSTER", "EPOCH", "HIGHEST", "ALLOCATED", "SEALED", "RECORD ID", "STORE ID", "REVISION")
		for _, c := range v.Clusters {
			t.RowCells(printer.Cell{Text: c.Cluster}, printer.Cell{Text: c.epochText()},
				printer.Cell{Text: strconv.FormatUint(uint64(c.HighestEpoch), 10)},
				printer.Cell{Text: strconv.FormatUint(uint64(c.AllocatedEpoch), 10)}, c.sealedCell(),
				printer.Cell{Text: c.RecordClusterID}, printer.Cell{Text: c.StoreClusterID},
				printer.Cell{Text: strconv.FormatInt(c.Revision, 10)})
		}
		return
	}
	if v.Cluster != "" {
		t.Field("Cluster", printer.Cell{Text: v.Cluster})
	}
	t.Field("Epoch", printer.Cell{Text: v.epochText()})
	t.Field("Highest epoch", printer.Cell{Text: strconv.FormatUint(uint64(v.HighestEpoch), 10)})
	t.Field("Allocated epoch", printer.Cell{Text: strconv.FormatUint(uint64(v.AllocatedEpoch), 10)})
	t.Field("Record cluster ID", printer.Cell{Text: v.RecordClusterID})
	t.Field("Store cluster ID", printer.Cell{Text: v.StoreClusterID})
	t.Field("Sealed", v.sealedCell())
	t.Field("Revision", printer.Cell{Text: strconv.FormatInt(v.Revision, 10)})
}

func (v *View) epochText() string {
	if v.RecordMissing {
		return "none (no epoch record)"
	}
	return strconv.FormatUint(uint64(v.Epoch), 10)
}

func (v *View) sealedCell() printer.Cell {
	if v.Sealed {
		return printer.Cell{Text: cmdutil.YesNo(true), Style: printer.Red}
	}
	return printer.Cell{Text: cmdutil.YesNo(false), Style: printer.Green}
}

// Notes implements printer.Noter: for each sealed or unreadable cluster,
// why and what to do.
func (v *View) Notes() []string {
	if len(v.Clusters) <= 1 {
		if !v.Sealed {
			return nil
		}
		return []string{fmt.Sprintf("lockd is SEALED and refuses every lock: %s", v.SealedReason)}
	}
	var notes []string
	for _, c := range v.Clusters {
		switch {
		case c.Error != "":
			notes = append(notes, fmt.Sprintf("cluster %s could not be read now (the row is what lockd last knew): %s", c.Cluster, c.Error))
		case c.Sealed:
			notes = append(notes, fmt.Sprintf("cluster %s is SEALED: lockd refuses every lock of its keys: %s", c.Cluster, c.SealedReason))
		}
	}
	return notes
}
