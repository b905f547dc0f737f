// Package clusters is `lockctl clusters`: the etcd clusters lockd fronts.
package clusters

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/epoch/status"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl clusters`' inputs.
type Options struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration
}

// NewCmdClusters returns `lockctl clusters`.
func NewCmdClusters(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{Client: f.Client, Printer: f.Printer, Timeout: 10 * time.Second}
	return &cobra.Command{
		Use:   "clusters",
		Short: "Show the etcd clusters lockd fronts, and their health",
		Long: cmdutil.Doc(`
			Show each etcd cluster the answering lockd fronts: the tiers whose keys
			live on it, whether lockd can read it now, its leader, revision, epoch
			and seal, its sessions, and lockd's posture for it.

			A cluster that is not reachable has lost quorum or is cut off from
			this lockd: grants of its tiers wait or are refused (classes open on
			quorum loss are granted from memory once POSTURE says open), while the
			other clusters' keep being granted. SEALED means grants there are
			refused until two operators advance its epoch (lockctl epoch status).
		`),
		Example: cmdutil.Example(`
			$ lockctl clusters

			# Clusters lockd cannot read, for a script
			$ lockctl clusters -o json | jq '.clusters[] | select(.reachable | not)'
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return clustersRun(cmd.Context(), opts)
		},
	}
}

func clustersRun(ctx context.Context, opts *Options) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		resp, err := c.AdminService().ListClusters(ctx, &lockv1.ListClustersRequest{})
		if err != nil {
			return err
		}
		return opts.Printer().Print(NewView(resp))
	})
}

// ClusterView is one cluster. The cluster ID is hex, as etcdctl prints it.
type ClusterView struct {
	Name         string   `json:"name"`
	Tiers        []string `json:"tiers"`
	Reachable    bool     `json:"reachable"`
	Error        string   `json:"error,omitempty"`
	Leader       string   `json:"leader,omitempty"`
	Revision     int64    `json:"revision"`
	Epoch        uint32   `json:"epoch"`
	Sealed       bool     `json:"sealed"`
	SealedReason string   `json:"sealed_reason,omitempty"`
	Sessions     int64    `json:"sessions"`
	ClusterID    string   `json:"cluster_id"`
	Posture      string   `json:"posture"`
}

// View is `lockctl clusters`.
type View struct {
	Clusters []ClusterView `json:"clusters"`
}

// NewView converts a ListClustersResponse.
func NewView(r *lockv1.ListClustersResponse) *View {
	v := &View{Clusters: []ClusterView{}}
	for _, c := range r.GetClusters() {
		v.Clusters = append(v.Clusters, ClusterView{
			Name: c.GetName(), Tiers: append([]string{}, c.GetTiers()...), Reachable: c.GetReachable(), Error: c.GetError(),
			Leader: c.GetLeader(), Revision: c.GetRevision(), Epoch: c.GetEpoch(), Sealed: c.GetSealed(),
			SealedReason: c.GetSealedReason(), Sessions: c.GetSessions(), ClusterID: status.Hex(c.GetClusterId()),
			Posture: c.GetPosture(),
		})
	}
	return v
}

// WriteTable implements printer.Tabular: one row per cluster; the last
// column says why a cluster is unreachable or sealed.
func (v *View) WriteTable(t *printer.Table) {
	t.Header("CLUSTER", "TIERS", "REACHABLE", "LEADER", "REVISION", "EPOCH", "SEALED", "SESSIONS", "POSTURE", "WHY")
	for _, c := range v.Clusters {
		reachable := printer.Cell{Text: cmdutil.YesNo(c.Reachable), Style: printer.Green}
		if !c.Reachable {
			reachable.Style = printer.Red
		}
		sealed := printer.Cell{Text: cmdutil.YesNo(c.Sealed)}
		if c.Sealed {
			sealed.Style = printer.Red
		}
		posture := printer.Cell{Text: c.Posture}
		if c.Posture != "quorum" {
			posture.Style = printer.Yellow
		}
		leader, rev := c.Leader, strconv.FormatInt(c.Revision, 10)
		if leader == "" {
			leader = "-"
		}
		why := "-"
		switch {
		case !c.Reachable:
			rev, why = "-", c.Error
		case c.Sealed:
			why = c.SealedReason
		}
		t.RowCells(
			printer.Cell{Text: c.Name},
			printer.Cell{Text: strings.Join(c.Tiers, ",")},
			reachable,
			printer.Cell{Text: leader},
			printer.Cell{Text: rev},
			printer.Cell{Text: strconv.FormatUint(uint64(c.Epoch), 10)},
			sealed,
			printer.Cell{Text: strconv.FormatInt(c.Sessions, 10)},
			posture,
			printer.Cell{Text: why},
		)
	}
	t.Empty("no clusters")
}
