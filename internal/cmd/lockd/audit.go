package lockdcmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/lockd"
)

// newAuditCmd is `lockd audit`: the audit tailer alone, for a cluster whose
// arbiters run without it (or to add a candidate). runF replaces
// lockd.RunAudit in tests.
func newAuditCmd(root *Options, runF runFunc) *cobra.Command {
	// Its own flags, bound to its own Options; the persistent ones (data
	// dir, logging) are the root's.
	opts := DefaultOptions()
	cmd := &cobra.Command{
		Use:   "audit (--etcd-endpoints URLS | --topology FILE) [--audit-clickhouse URL | --audit-sqlite PATH]",
		Short: "Run only the audit history's tailer (and archive) for an external etcd cluster",
		Long: `lockd audit runs the audit tailer without an arbiter: it campaigns in the
cluster's election, and while elected it copies every grant, release, expiry,
session close, force-release and epoch advance into the sink, from its last
checkpoint (docs/audit.md). Run two for availability; one tails at a time.
With --topology it tails every cluster the file names, each elected on its
own cluster, all into the one sink.

Exit status: 0 stopped cleanly (SIGINT, SIGTERM), 1 failed, 2 usage error, 69
etcd or the sink could not be reached.`,
		Example: `  # Tail a cluster into ClickHouse, metrics on :7431
  lockd audit --etcd-endpoints https://etcd-0:2379,https://etcd-1:2379,https://etcd-2:2379 \
    --audit-clickhouse clickhouse://clickhouse:9000/lockd_audit --metrics-listen 0.0.0.0:7431

  # Tail the coord and the entity clusters of a split topology
  lockd audit --topology /etc/lockd/topology.yaml --audit-clickhouse clickhouse://clickhouse:9000/lockd_audit`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DataDir, opts.LogLevel, opts.LogFormat, opts.LogOutput = root.DataDir, root.LogLevel, root.LogFormat, root.LogOutput
			if err := applyTopology(cmd.Flags(), &opts); err != nil {
				return err
			}
			if len(opts.EtcdEndpoints) == 0 {
				return cli.Usagef("--etcd-endpoints: required (or --topology): lockd audit tails an external cluster (the embedded lockd tails its own)")
			}
			if runF != nil {
				return runF(cmd.Context(), &opts)
			}
			return runAudit(cmd.Context(), &opts)
		},
	}
	f := cmd.Flags()
	addEtcdFlags(f, &opts)
	addAuditFlags(f, &opts)
	f.StringVar(&opts.Topology, "topology", "", "a topology file naming the etcd clusters to tail (docs/operating.md); replaces --etcd-endpoints, --etcd-ca, --etcd-cert and --etcd-key")
	f.StringVar(&opts.MetricsListen, "metrics-listen", "", "HTTP listen address for /metrics (empty: none)")
	annotateEnv(f)
	return cmd
}

func runAudit(ctx context.Context, opts *Options) error {
	return lockd.RunAudit(ctx, *opts)
}
