package arbiter

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
	"github.com/lockd-dev/lockd/internal/store"
)

// shardedClusters is a coord cluster and entity shards e1, e2 (embedded
// etcds), fronted by arbiters that share them.
type shardedClusters struct {
	coord  *store.Backend
	shards map[string]*store.Backend
}

func startSharded(t *testing.T) *shardedClusters {
	t.Helper()
	dir := t.TempDir()
	sc := &shardedClusters{shards: map[string]*store.Backend{}}
	for _, name := range []string{"coord", "e1", "e2"} {
		b := startOnFreePorts(t, filepath.Join(dir, name))
		t.Cleanup(b.Close)
		if name == "coord" {
			sc.coord = b
		} else {
			sc.shards[name] = b
		}
	}
	return sc
}

// arbiter starts one more arbiter in front of the clusters.
func (sc *shardedClusters) arbiter(t *testing.T) *Arbiter { return sc.arbiterWith(t, false) }

// arbiterWith is arbiter; with coordShard the coord cluster is the entity
// tier's first shard (named "coord"), before e1 and e2.
func (sc *shardedClusters) arbiterWith(t *testing.T, coordShard bool) *Arbiter {
	t.Helper()
	classes, grants, problems := class.ParseFile("t/classes.yaml", []byte(twoTierClasses), "t", time.Now())
	if len(problems) > 0 {
		t.Fatalf("classes: %v", problems)
	}
	cfg := Config{
		Client: sc.coord.Client, Leases: sc.coord.Leases, KV: sc.coord.KV, Cluster: "coord", Bootstrap: Bootstrap{FreshStore: true},
		Operators:      []string{op1.ID, op2.ID},
		RequestTimeout: 2 * time.Second, EpochRefresh: 200 * time.Millisecond, MaxEpochAge: time.Second,
		PollInterval: 100 * time.Millisecond, CoordServesEntity: coordShard,
	}
	for _, name := range []string{"e1", "e2"} {
		cfg.Clusters = append(cfg.Clusters, Cluster{Name: name, Client: sc.shards[name].Client, KV: sc.shards[name].KV, Tiers: []class.Tier{class.TierEntity}, Bootstrap: Bootstrap{FreshStore: true}})
	}
	a, err := New(cfg, NewPolicy(class.NewSet(classes, grants)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// flip publishes m over the stored map.
func (sc *shardedClusters) flip(t *testing.T, m *shardmap.Map) {
	t.Helper()
	prev, err := shardmap.Get(t.Context(), sc.coord.Client)
	if err != nil {
		t.Fatal(err)
	}
	kvs := map[string]clientv3.KV{"coord": sc.coord.Client}
	for name, b := range sc.shards {
		kvs[name] = b.Client
	}
	if _, err := shardmap.Flip(t.Context(), sc.coord.Client, kvs, prev, m); err != nil {
		t.Fatal(err)
	}
}

// holdOn is which shard holds key ("" when none does).
func (sc *shardedClusters) holdOn(t *testing.T, key string) string {
	t.Helper()
	on := ""
	for name, b := range sc.shards {
		if kv := getKV(t, b.Client, keyspace.HoldKey(key)); kv != nil {
			if on != "" {
				t.Fatalf("%s is held on %s and on %s", key, on, name)
			}
			on = name
		}
	}
	return on
}

func routedVersion(a *Arbiter) int64 { return a.routes.Load().router.Version() }

// TestEntityKeysAreHomedByTheShardMap: before a map is written every
// entity key is on the first entity cluster; once one is published, every
// arbiter routes by it (its watch), each key is granted on the shard the
// map homes its range to, and keys of one range stay together.
func TestEntityKeysAreHomedByTheShardMap(t *testing.T) {
	sc := startSharded(t)
	a, ctx := sc.arbiter(t), t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/before/1"})
	if err != nil || g.Cluster != "e1" || sc.holdOn(t, "t/before/1") != "e1" {
		t.Fatalf("grant before any map = %+v, %v; want it on e1, the first entity cluster", g, err)
	}
	if _, err := a.Release(ctx, alice, s, "t/before/1", g.Token); err != nil {
		t.Fatal(err)
	}

	m := &shardmap.Map{Version: 1, Shards: []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}}
	sc.flip(t, m)
	waitUntil(t, "the arbiter routing by version 1", func() bool { return routedVersion(a) == 1 })
	r, err := shardmap.New(m)
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]int{}
	for i := range 24 {
		for _, leaf := range []string{"a", "b"} {
			key := fmt.Sprintf("t/r%d/%s", i, leaf)
			want, _ := r.Home(key)
			g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: key})
			if err != nil || g.Cluster != want || sc.holdOn(t, key) != want {
				t.Fatalf("%s: grant = %+v, %v, held on %q; want it on %s, its range's shard", key, g, err, sc.holdOn(t, key), want)
			}
			on[want]++
			if in, err := a.Inspect(ctx, alice, key); err != nil || in.Cluster != want || in.Range != fmt.Sprintf("t/r%d/", i) || in.ShardMapVersion != 1 {
				t.Fatalf("inspect %s = cluster %q, range %q, version %d, %v; want %s, t/r%d/, 1", key, in.Cluster, in.Range, in.ShardMapVersion, err, want, i)
			}
		}
	}
	if on["e1"] == 0 || on["e2"] == 0 {
		t.Fatalf("keys per shard = %v; want both shards used", on)
	}
	// The hold listing (lockctl top's source) says each hold's shard.
	list, err := a.ListHolds(ctx, alice, "t/", 1000)
	if err != nil || len(list.Holds) != 48 {
		t.Fatalf("ListHolds = %d holds, %v; want 48", len(list.Holds), err)
	}
	for _, h := range list.Holds {
		if want, _ := r.Home(h.Key); h.Cluster != want {
			t.Fatalf("listed hold %s on cluster %q; want %s", h.Key, h.Cluster, want)
		}
	}
}

// TestAStaleMapNeverGrantsAMovedKey: an arbiter still routing by the map
// before a flip (its watch stalled: here its routes are put back to the old
// map after the watch delivered the new one) is refused by the old shard
// itself with ErrMoving, and grants nothing there; it reads the map again
// and its next attempt is granted on the new shard. Control: the build
// without the shard fence (-tags gate_broken_shard) grants the moved key on
// its old shard, and this test fails.
func TestAStaleMapNeverGrantsAMovedKey(t *testing.T) {
	sc := startSharded(t)
	a, stale, ctx := sc.arbiter(t), sc.arbiter(t), t.Context()
	two := []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}
	v1 := &shardmap.Map{Version: 1, Shards: two, Overrides: []shardmap.Override{{Prefix: "t/moved/", Shard: "e1"}}}
	sc.flip(t, v1)
	waitUntil(t, "both arbiters routing by version 1", func() bool { return routedVersion(a) == 1 && routedVersion(stale) == 1 })
	old := stale.routes.Load()

	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/moved/x"})
	if err != nil || g.Cluster != "e1" {
		t.Fatalf("grant by version 1 = %+v, %v; want it on e1", g, err)
	}
	if _, err := a.Release(ctx, alice, s, "t/moved/x", g.Token); err != nil {
		t.Fatal(err)
	}

	// The range moves to e2 (it has no holds: the drain is the move
	// controller's).
	sc.flip(t, &shardmap.Map{Version: 2, Shards: two, Overrides: []shardmap.Override{{Prefix: "t/moved/", Shard: "e2"}}})
	waitUntil(t, "both arbiters routing by version 2", func() bool { return routedVersion(a) == 2 && routedVersion(stale) == 2 })
	stale.routes.Store(old) // its watch stalled before the flip

	sb, err := stale.OpenSession(ctx, bob, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = stale.Acquire(ctx, AcquireRequest{Caller: bob, Session: sb, Key: "t/moved/x"})
	if on := sc.holdOn(t, "t/moved/x"); on != "" || !errors.Is(err, ErrMoving) {
		t.Fatalf("an arbiter routing by version 1 after the flip to 2: %v, held on %q; want ErrMoving and no hold anywhere", err, on)
	}
	var me *MovingError
	if !errors.As(err, &me) || me.RetryAfter <= 0 {
		t.Fatalf("refusal %v; want a MovingError with a wait", err)
	}
	waitUntil(t, "the refused arbiter reading the map again", func() bool { return routedVersion(stale) == 2 })
	g2, err := stale.Acquire(ctx, AcquireRequest{Caller: bob, Session: sb, Key: "t/moved/x"})
	if err != nil || g2.Cluster != "e2" || sc.holdOn(t, "t/moved/x") != "e2" {
		t.Fatalf("the next attempt = %+v, %v; want it granted on e2", g2, err)
	}
}

// TestARangeBeingMovedGrantsNothingAndTakesNoNewWaiter: while a range is
// marked out on its shard (a move drains it), a grant of a key in it is
// refused with ErrMoving and the drain's wait, a durable newcomer does not
// join the key's line, and its holder can still release; once the mark is
// gone the key is granted again.
func TestARangeBeingMovedGrantsNothingAndTakesNoNewWaiter(t *testing.T) {
	sc := startSharded(t)
	a, ctx := sc.arbiter(t), t.Context()
	e1 := sc.shards["e1"].Client
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/fifo/a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e1.Put(ctx, keyspace.RangeOutKey("t/fifo/"), "draining"); err != nil {
		t.Fatal(err)
	}
	sb, err := a.OpenSession(ctx, bob, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"t/fifo/a", "t/fifo/b"} {
		_, err := a.Acquire(ctx, AcquireRequest{Caller: bob, Session: sb, Key: key, Wait: 5 * time.Second})
		var me *MovingError
		if !errors.As(err, &me) || me.RetryAfter != retryDraining {
			t.Fatalf("%s in a range being moved: %v; want ErrMoving asking to wait %s", key, err, retryDraining)
		}
	}
	if resp, err := e1.Get(ctx, keyspace.QueuePrefix+"t/fifo/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("waiters in the range being moved = %v, %v; want none", resp.Count, err)
	}
	if ok, err := a.Release(ctx, alice, s, "t/fifo/a", held.Token); !ok || err != nil {
		t.Fatalf("release in a range being moved = %v, %v; want released", ok, err)
	}
	if _, err := a.Acquire(ctx, AcquireRequest{Caller: bob, Session: sb, Key: "t/fifo/a"}); !errors.Is(err, ErrMoving) {
		t.Fatalf("a free key in a range being moved: %v; want ErrMoving", err)
	}
	if _, err := e1.Delete(ctx, keyspace.RangeOutKey("t/fifo/")); err != nil {
		t.Fatal(err)
	}
	if g, err := a.Acquire(ctx, AcquireRequest{Caller: bob, Session: sb, Key: "t/fifo/a"}); err != nil || g.Token <= held.Token {
		t.Fatalf("after the mark is gone = %+v, %v; want granted above %d", g, err, held.Token)
	}
}

// TestTheCoordClusterCanBeTheFirstShard: with the coord cluster serving the
// entity tier beside other clusters, it is the implicit map's shard (so
// adding shards to a one-cluster setup changes nothing until a map is
// written); after a map moves keys off it, coord-tier keys stay there,
// unfenced by the shard map, and entity keys go where the map says.
func TestTheCoordClusterCanBeTheFirstShard(t *testing.T) {
	sc := startSharded(t)
	a, ctx := sc.arbiterWith(t, true), t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/before/1"}); err != nil || g.Cluster != "coord" {
		t.Fatalf("entity grant before any map = %+v, %v; want it on coord, the first shard", g, err)
	}
	m := &shardmap.Map{Version: 1, Shards: []shardmap.Shard{{Name: "coord"}, {Name: "e2"}}, Overrides: []shardmap.Override{{Prefix: "t/", Shard: "e2"}}}
	sc.flip(t, m)
	waitUntil(t, "the arbiter routing by version 1", func() bool { return routedVersion(a) == 1 })
	if g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/after/1"}); err != nil || g.Cluster != "e2" || sc.holdOn(t, "t/after/1") != "e2" {
		t.Fatalf("entity grant by a map pinning t/ to e2 = %+v, %v; want it on e2", g, err)
	}
	if g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/leader/x"}); err != nil || g.Cluster != "coord" {
		t.Fatalf("coord-tier grant = %+v, %v; want it on coord, whatever the shard map says", g, err)
	}
}

// TestAHoldGrantedBeforeItsRangeMovedIsReleasedWhereItIs: a hold left on
// its old shard by a move (granted before the flip: a straggler the move
// controller waits out) is still checked and released on that shard, found
// by its token's epoch (no two clusters share one), not refused as stale
// by the shard its range moved to.
func TestAHoldGrantedBeforeItsRangeMovedIsReleasedWhereItIs(t *testing.T) {
	sc := startSharded(t)
	a, ctx := sc.arbiter(t), t.Context()
	two := []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}
	sc.flip(t, &shardmap.Map{Version: 1, Shards: two, Overrides: []shardmap.Override{{Prefix: "t/moved/", Shard: "e1"}}})
	waitUntil(t, "routing by version 1", func() bool { return routedVersion(a) == 1 })
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/moved/y"})
	if err != nil || g.Cluster != "e1" {
		t.Fatalf("grant = %+v, %v; want it on e1", g, err)
	}
	sc.flip(t, &shardmap.Map{Version: 2, Shards: two, Overrides: []shardmap.Override{{Prefix: "t/moved/", Shard: "e2"}}})
	waitUntil(t, "routing by version 2", func() bool { return routedVersion(a) == 2 })

	if c, err := a.ValidateToken(ctx, alice, "t/moved/y", g.Token); err != nil || c.State != TokenCurrent {
		t.Fatalf("ValidateToken of the hold left on e1 = %+v, %v; want current", c, err)
	}
	if ok, err := a.Release(ctx, alice, s, "t/moved/y", g.Token); !ok || err != nil {
		t.Fatalf("release of the hold left on e1 = %v, %v; want released", ok, err)
	}
	if on := sc.holdOn(t, "t/moved/y"); on != "" {
		t.Fatalf("hold still on %s after its release", on)
	}
}
