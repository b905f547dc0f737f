package lockdcmd

import (
	"github.com/spf13/pflag"
	"slices"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/topology"
)

// applyTopology reads --topology into the coord cluster's flags, the other
// clusters and the region. It refuses flags the file replaces and a region
// that disagrees with the file's; the file itself is checked by package
// topology (every tier served once, names and endpoints well formed).
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
	switch {
	case fs.Changed("region") && t.Region != "" && opts.Region != t.Region:
		return cli.Usagef("--region %q: the topology %s says region %q; give one or make them agree", opts.Region, opts.Topology, t.Region)
	case t.Region != "":
		opts.Region = t.Region
	}
	coord := t.Serving(topology.TierCoord)
	opts.EtcdEndpoints, opts.Cluster = coord.Endpoints, coord.Name
	if coord.TLS != nil {
		opts.EtcdCA, opts.EtcdCert, opts.EtcdKey = coord.TLS.CA, coord.TLS.Cert, coord.TLS.Key
	}
	opts.Clusters = nil
	opts.CoordServesEntity = slices.Contains(coord.Tiers, topology.TierEntity)
	for _, c := range t.Clusters {
		if c.Name == coord.Name {
			continue
		}
		cc := lockd.ClusterConfig{Name: c.Name, Tiers: c.Tiers, Endpoints: c.Endpoints}
		if c.TLS != nil {
			cc.CA, cc.Cert, cc.Key = c.TLS.CA, c.TLS.Cert, c.TLS.Key
		}
		opts.Clusters = append(opts.Clusters, cc)
	}
	return nil
}
