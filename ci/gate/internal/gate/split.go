package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/ci/internal/cluster"
	"github.com/lockd-dev/lockd/ci/internal/proc"
	"github.com/lockd-dev/lockd/internal/keyspace"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// The clusters of a split run, by the names the topology gives them.
const (
	CoordCluster  = "coord"
	EntityCluster = "entity"
)

// BlastFloor is the blast-radius floor: while the entity cluster is
// restored, rebuilt or without quorum, the coord cluster's keys must go on
// being granted at least this often, in grants per second over those
// windows (docs/release-gate.md).
const BlastFloor = 0.25

// etcdCluster is one of the run's etcd clusters.
type etcdCluster struct {
	*cluster.Cluster
	// name is the cluster's name in lockd's topology; "" in a run on one
	// cluster (lockd's only one).
	name string
}

// label names member m of c in a fault's target.
func (c *etcdCluster) label(m string) string {
	if c.name == "" {
		return m
	}
	return c.name + "/" + m
}

// split reports whether the tiers are split over two clusters.
func (r *run) split() bool { return len(r.clusters) > 1 }

// coord is the cluster of the coord tier (the only one when not split);
// entity the entity tier's.
func (r *run) coord() *etcdCluster  { return r.clusters[0] }
func (r *run) entity() *etcdCluster { return r.clusters[min(1, len(r.clusters)-1)] }

// clusterOf names the cluster that granted token for key (check.ClusterOf):
// the durable and the open classes are of the coord tier when the tiers
// are split, the fenced class of the entity's; with entity shards, the
// cluster whose epoch the token carries (the range moves between them;
// token 0: the shard the range is homed to now).
func (r *run) clusterOf(key string, token uint64) string {
	if slices.Contains(durableKeys(gateKeys(r.o.Keys)), key) || slices.Contains(r.openKeys, key) {
		return r.coord().name
	}
	if !r.sharded() {
		return r.entity().name
	}
	if token != 0 {
		if c, ok := r.epochOwners()[uint32(token>>48)]; ok {
			return c
		}
		return fmt.Sprintf("the cluster of epoch %d (none the gate gave it)", token>>48)
	}
	return cmp.Or(r.home, r.entity().name)
}

// lineCluster is the cluster of the durable keys, whose line the durable
// line check reads.
func (r *run) lineCluster() *etcdCluster { return r.coord() }

// etcdArgs are lockd's flags naming its clusters: the endpoints of the
// only one, or a topology file naming both.
func (r *run) etcdArgs() []string {
	if !r.split() {
		return []string{"--etcd-endpoints", strings.Join(r.coord().Endpoints(), ",")}
	}
	return []string{"--topology", filepath.Join(r.dir, "topology.yaml")}
}

// writeTopology writes the topology file of a split run.
func (r *run) writeTopology() error {
	var b strings.Builder
	b.WriteString("apiVersion: lockd.dev/v1alpha1\nkind: Topology\nclusters:\n")
	for _, c := range r.clusters {
		tier := "entity" // the entity cluster, and the shards beside it
		if c == r.coord() {
			tier = "coord"
		}
		fmt.Fprintf(&b, "- name: %s\n  tiers: [%s]\n  endpoints: [%s]\n", c.name, tier, strings.Join(c.Endpoints(), ", "))
	}
	return os.WriteFile(filepath.Join(r.dir, "topology.yaml"), []byte(b.String()), 0o644)
}

// bootstrapApart runs a lockd on the entity cluster alone first, which
// gives it epoch 1 of its own, as a cluster bootstrapped before it was put
// behind the split lockds would have; the coord cluster then bootstraps
// epoch 1 too, and the arbiters must seal the entity cluster for sharing it
// (advanceApart unseals it). Two clusters granting in one epoch could
// repeat a token once keys move between them.
func (r *run) bootstrapApart(ctx context.Context, lockdBin string) error {
	if err := r.writeTopology(); err != nil {
		return err
	}
	id, err := r.entity().ID(ctx)
	if err != nil {
		return err
	}
	ports, err := proc.FreePorts(2)
	if err != nil {
		return err
	}
	a := &proc.Lockd{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), Metrics: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	a.Name, a.Bin = "lockd-entity-alone", lockdBin
	a.Log = filepath.Join(r.dir, "lockd", a.Name+".log")
	a.Args = []string{"--etcd-endpoints", strings.Join(r.entity().Endpoints(), ","), "--insecure-loopback",
		"--listen", a.Addr, "--metrics-listen", a.Metrics, "--classes", filepath.Join(r.dir, "classes"),
		"--data-dir", filepath.Join(r.dir, "lockd", a.Name), "--bootstrap-epoch-cluster-id", id}
	if err := a.Start(); err != nil {
		return err
	}
	defer a.Stop(5 * time.Second)
	if err := a.WaitReady(ctx, 30*time.Second); err != nil {
		return fmt.Errorf("gate: the lockd bootstrapping the entity cluster alone: %w", err)
	}
	r.logf("gate: the entity cluster bootstrapped on its own (epoch 1), before the split")
	return nil
}

// advanceApart waits until every arbiter has sealed the entity cluster for
// sharing the coord cluster's epoch, and has the two operators advance it
// to an epoch of its own from the counter.
func (r *run) advanceApart(ctx context.Context) error {
	admin, closeAdmin, err := r.admin()
	if err != nil {
		return err
	}
	defer closeAdmin()
	st, err := admin.waitSealed(ctx, EntityCluster, func(st *lockv1.EpochStatusResponse) bool {
		return strings.Contains(st.GetSealedReason(), "no two clusters may share an epoch")
	})
	if err != nil {
		return fmt.Errorf("gate: the arbiters did not seal the entity cluster bootstrapped apart, with the coord cluster's epoch: %w", err)
	}
	epoch, _, _, err := admin.advance(ctx, EntityCluster, st.GetEpoch(), 0, "release gate: the entity cluster was bootstrapped apart")
	if err != nil {
		return err
	}
	// Epoch 1 stays the coord cluster's: nothing was granted on the
	// entity cluster in it while sealed (the grants' tokens say so).
	r.records[EntityCluster] = append(r.records[EntityCluster], epoch)
	r.logf("gate: the entity cluster, sealed for sharing epoch %d, advanced to %d", st.GetEpoch(), epoch)
	return nil
}

// readRecords reads each cluster's epoch record, at the end of the run.
func (r *run) readRecords(ctx context.Context) {
	for _, c := range r.clusters {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.Client().Get(cctx, keyspace.EpochKey)
		cancel()
		if err != nil || len(resp.Kvs) == 0 {
			r.logf("gate: the epoch record of cluster %s could not be read: %v", c.name, err)
			continue
		}
		var rec keyspace.Epoch
		if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
			r.logf("gate: the epoch record of cluster %s: %v", c.name, err)
			continue
		}
		r.records[c.name] = append(r.records[c.name], rec.Epoch)
	}
}

// target picks the cluster a cluster-targeted fault hits: the clusters in
// turn, kind by kind. A restore and a quorum loss start with the entity
// cluster (the blast radius is checked over its outages), a rebuild hits
// the cluster the restore before it did (the schedule puts it right
// after), and a quorum loss with open keys stays on the coord cluster,
// whose tier the open class is (lockd's open posture is the coord
// cluster's: an entity cluster without quorum refuses). The others start
// from a seeded cluster.
func (r *run) target(kind string) *etcdCluster {
	if !r.split() {
		return r.coord()
	}
	if kind == KindQuorumLoss && len(r.openKeys) > 0 {
		return r.coord()
	}
	n := r.hits[kind]
	r.hits[kind]++
	// Restores and quorum losses: the entity cluster, then the coord
	// cluster, then the other shards.
	outages := append([]int{1, 0}, seq(2, len(r.clusters))...)
	switch kind {
	case KindRestore, KindQuorumLoss:
		return r.clusters[outages[n%len(outages)]]
	case KindStoreRebuild:
		if k := r.hits[KindRestore]; k > 0 {
			return r.clusters[outages[(k-1)%len(outages)]]
		}
	}
	return r.clusters[(r.first+n)%len(r.clusters)]
}

// settle waits, with the tiers split, until no cluster but c (nil: none)
// is in a window in which grants are closed by design, so that the entity
// cluster's outages, over which the blast radius is checked, overlap no
// other fault (a restore and the rebuild right after it hit one cluster).
func (r *run) settle(ctx context.Context, c *etcdCluster) {
	if !r.split() {
		return
	}
	r.mu.Lock()
	var until int64
	for _, f := range r.faults {
		if f.Err == "" && f.Cluster != "" && (c == nil || f.Cluster != c.name) {
			until = max(until, f.GrantsClosedUntil)
		}
	}
	r.mu.Unlock()
	if d := time.Duration(until - history.Now()); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// clusterOutages counts the fault kinds scheduled that take the entity
// cluster out: restores, rebuilds and quorum losses (but a quorum loss with
// open keys hits the coord cluster).
func (r *run) clusterOutages() int {
	n := 0
	for _, k := range r.o.Faults {
		if k == KindRestore || k == KindStoreRebuild || (k == KindQuorumLoss && len(r.openKeys) == 0) {
			n++
		}
	}
	return n
}

// waitHealthy waits, up to d, until every cluster is healthy.
func (r *run) waitHealthy(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for _, c := range r.clusters {
		if err := c.WaitHealthy(ctx); err != nil {
			return fmt.Errorf("cluster %s: %w", cmp.Or(c.name, "main"), err)
		}
	}
	return nil
}

// seq is from, from+1, ..., to-1.
func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}
