package lockdcmd

import (
	"github.com/spf13/pflag"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/topology"
)

// applyTopology reads --topology into the external cluster's flags and the
// region. It refuses flags the file replaces, a region that disagrees
// with the file's, and tiers on two clusters, which this lockd cannot
// serve yet: it fronts one cluster until the arbiter routes tiers to
// cells of their own.
func applyTopology(fs *pflag.FlagSet, opts *Options) error {
	if opts.Topology == "" {
		return nil
	}
	for _, name := range []string{"etcd-endpoints", "etcd-ca", "etcd-cert", "etcd-key", "etcd-client-url", "etcd-peer-url"} {
		if fs.Changed(name) {
			return cli.Usagef("--%s: cannot be combined with --topology: the topology file names the clusters", name)
		}
	}
	t, err := topology.Load(opts.Topology)
	if err != nil {
		return cli.Usagef("--topology: %v", err)
	}
	coord, entity := t.Serving(topology.TierCoord), t.Serving(topology.TierEntity)
	if coord != entity {
		return cli.Usagef("--topology: %s: clusters %q (coord) and %q (entity): this lockd serves both tiers from one cluster; "+
			"list both tiers in one cluster's tiers (splitting them is not supported yet)", opts.Topology, coord.Name, entity.Name)
	}
	switch {
	case fs.Changed("region") && t.Region != "" && opts.Region != t.Region:
		return cli.Usagef("--region %q: the topology %s says region %q; give one or make them agree", opts.Region, opts.Topology, t.Region)
	case t.Region != "":
		opts.Region = t.Region
	}
	opts.EtcdEndpoints, opts.Cluster = coord.Endpoints, coord.Name
	if coord.TLS != nil {
		opts.EtcdCA, opts.EtcdCert, opts.EtcdKey = coord.TLS.CA, coord.TLS.Cert, coord.TLS.Key
	}
	return nil
}
