package lockdcmd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/lockd"
)

func writeTopology(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "topology.yaml")
	require.NoError(t, os.WriteFile(path, []byte("apiVersion: lockd.dev/v1alpha1\nkind: Topology\n"+doc), 0o600))
	return path
}

// TestTopologyFileSetsTheClusterAndTheRegion: one cluster serving both
// tiers becomes the external cluster's name, endpoints and TLS, and the
// region; the same from LOCKD_TOPOLOGY.
func TestTopologyFileSetsTheClusterAndTheRegion(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ca.crt", "etcd.crt", "etcd.key"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("pem"), 0o600))
	}
	path := writeTopology(t, `region: eu-west
clusters:
- name: main
  tiers: [coord, entity]
  endpoints: [https://etcd-0:2379, https://etcd-1:2379]
  tls: {ca: `+dir+`/ca.crt, cert: `+dir+`/etcd.crt, key: `+dir+`/etcd.key}
`)
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--topology", path}, nil},
		{nil, map[string]string{"LOCKD_TOPOLOGY": path}},
		{[]string{"--topology", path, "--region", "eu-west"}, nil},
	} {
		code, o, stderr := parse(t, tc.args, tc.env)
		require.Equal(t, ExitOK, code, stderr)
		require.Equal(t, []string{"https://etcd-0:2379", "https://etcd-1:2379"}, o.EtcdEndpoints)
		require.Equal(t, dir+"/ca.crt", o.EtcdCA)
		require.Equal(t, dir+"/etcd.crt", o.EtcdCert)
		require.Equal(t, dir+"/etcd.key", o.EtcdKey)
		require.Equal(t, "eu-west", o.Region)
		require.Equal(t, "main", o.Cluster, "the cluster's name, said by lockctl inspect")
	}
}

// TestTopologyWithTheTiersSplitFrontsEachCluster: a coord cluster and an
// entity cluster become the coord cluster's flags and one more cluster,
// with its tiers, endpoints and TLS.
func TestTopologyWithTheTiersSplitFrontsEachCluster(t *testing.T) {
	split := writeTopology(t, "region: eu-west\nclusters:\n- name: coord\n  tiers: [coord]\n  endpoints: [http://a:2379]\n"+
		"- name: entity-1\n  tiers: [entity]\n  endpoints: [http://b:2379, http://c:2379]\n")
	code, o, stderr := parse(t, []string{"--topology", split}, nil)
	require.Equal(t, ExitOK, code, stderr)
	require.Equal(t, "coord", o.Cluster)
	require.Equal(t, []string{"http://a:2379"}, o.EtcdEndpoints)
	require.Equal(t, []lockd.ClusterConfig{{Name: "entity-1", Tiers: []string{"entity"}, Endpoints: []string{"http://b:2379", "http://c:2379"}}}, o.Clusters)
	require.False(t, o.CoordServesEntity)

	// The coord cluster as the entity tier's first shard, beside another.
	sharded := writeTopology(t, "clusters:\n- name: main\n  tiers: [coord, entity]\n  endpoints: [http://a:2379]\n"+
		"- name: shard-2\n  tiers: [entity]\n  endpoints: [http://b:2379]\n")
	code, o, stderr = parse(t, []string{"--topology", sharded}, nil)
	require.Equal(t, ExitOK, code, stderr)
	require.True(t, o.CoordServesEntity)
	require.Equal(t, "shard-2", o.Clusters[0].Name)
}

// TestTopologyItCannotUseIsRefusedNamingTheField: a bad file, flags the file
// replaces, and a region that disagrees exit 2 with what to do, and
// nothing is started.
func TestTopologyItCannotUseIsRefusedNamingTheField(t *testing.T) {
	one := writeTopology(t, "region: eu-west\nclusters:\n- name: main\n  tiers: [coord, entity]\n  endpoints: [http://127.0.0.1:2379]\n")
	twice := writeTopology(t, "clusters:\n- name: coord\n  tiers: [coord, entity]\n  endpoints: [http://a:2379]\n- name: coord-2\n  tiers: [coord]\n  endpoints: [http://b:2379]\n")
	bad := writeTopology(t, "clusters:\n- name: main\n  tiers: [coord]\n  endpoints: [http://a:2379]\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--topology", bad}, "--topology: " + bad + ": topology: clusters: no cluster serves tier entity"},
		{[]string{"--topology", filepath.Join(t.TempDir(), "none.yaml")}, "--topology: topology: open"},
		{[]string{"--topology", one, "--etcd-endpoints", "http://x:2379"}, "--etcd-endpoints: cannot be combined with --topology"},
		{[]string{"--topology", one, "--region", "us-east"}, `--region "us-east": the topology ` + one + ` says region "eu-west"`},
		{[]string{"--topology", twice}, "--topology: " + twice + ": topology: clusters[1].tiers[0]: tier coord is already served by clusters[0]"},
	} {
		code, o, stderr := parse(t, tc.args, nil)
		require.Equal(t, ExitUsage, code, stderr)
		require.Nil(t, o, "run was called")
		require.Contains(t, stderr, tc.want)
	}
}

// TestAuditTailsEveryClusterOfATopology: `lockd audit --topology` tails the
// coord cluster and every other cluster the file names, as lockd does.
func TestAuditTailsEveryClusterOfATopology(t *testing.T) {
	split := writeTopology(t, "clusters:\n- name: coord\n  tiers: [coord]\n  endpoints: [http://a:2379]\n"+
		"- name: entity-1\n  tiers: [entity]\n  endpoints: [http://b:2379]\n")
	audit := func(args ...string) (*Options, error) {
		var got *Options
		root := DefaultOptions()
		cmd := newAuditCmd(&root, func(_ context.Context, o *Options) error { c := *o; got = &c; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		_, err := cli.Execute(t.Context(), cmd)
		return got, err
	}
	o, err := audit("--topology", split)
	require.NoError(t, err)
	require.Equal(t, []string{"http://a:2379"}, o.EtcdEndpoints)
	require.Equal(t, []lockd.ClusterConfig{{Name: "entity-1", Tiers: []string{"entity"}, Endpoints: []string{"http://b:2379"}}}, o.Clusters)

	_, err = audit("--topology", split, "--etcd-endpoints", "http://x:2379")
	var usage *cli.UsageError
	require.ErrorAs(t, err, &usage)
	require.ErrorContains(t, err, "--etcd-endpoints: cannot be combined with --topology")
}
