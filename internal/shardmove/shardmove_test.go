package shardmove_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/shardmap"
	"github.com/lockd-dev/lockd/internal/shardmove"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	"github.com/lockd-dev/lockd/pkg/token"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// startShards is a lockd in front of a coord cluster and entity shards e1
// (the implicit map's) and e2, and a client of alice's.
func startShards(t *testing.T) (*lockdtest.Env, *clientv3.Client, map[string]*clientv3.Client, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	shards := map[string]*clientv3.Client{}
	var cfgs []lockd.ClusterConfig
	for _, name := range []string{"e1", "e2"} {
		b := lockdtest.StartEmbedded(t, filepath.Join(dir, name))
		t.Cleanup(b.Close)
		shards[name] = b.Client
		cfgs = append(cfgs, lockd.ClusterConfig{Name: name, Tiers: []string{"entity"}, Backend: b})
	}
	env := lockdtest.Start(t, lockdtest.Options{RequestTimeout: 2 * time.Second, PollInterval: 200 * time.Millisecond, Clusters: cfgs})
	return env, env.Backend.Client, shards, env.Client(t, lockdtest.Alice)
}

// keyMovingTo is a key the map homes to shard.
func keyMovingTo(t *testing.T, m *shardmap.Map, shard string) string {
	t.Helper()
	r, err := shardmap.New(m)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		k := fmt.Sprintf("t/s%d/k", i)
		if home, _ := r.Home(k); home == shard {
			return k
		}
	}
}

// TestAStragglerKeepsItsRangeClosedOnItsNewShardUntilReleased: a range
// with no holds when the drain began, granted on its old shard before the
// flip (a straggler), is closed on its new shard after the flip (MOVING)
// until that hold is released on the old shard (found by its token); the
// plan then completes and the key is granted on the new shard with a
// higher token.
func TestAStragglerKeepsItsRangeClosedOnItsNewShardUntilReleased(t *testing.T) {
	env, coord, shards, c := startShards(t)
	ctx, now := t.Context(), time.Now()
	onFence := func(*client.Lock) {}
	to := &shardmap.Map{Version: 1, Shards: []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}}
	p, err := shardmove.Propose(ctx, coord, to, lockdtest.Operator, "add e2", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shardmove.Approve(ctx, coord, p.ID, lockdtest.Operator2, now); err != nil {
		t.Fatal(err)
	}
	ctl := &shardmove.Controller{Coord: coord, Shards: shards, First: "e1", Name: "test"}
	state := func() *shardmove.Plan {
		t.Helper()
		if _, err := ctl.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		got, err := shardmove.Get(ctx, coord, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := state(); got.State != shardmove.StateDraining || len(got.Live) != 0 {
		t.Fatalf("plan = %+v; want draining with nothing live", got)
	}
	k := keyMovingTo(t, to, "e2")
	straggler, err := c.Acquire(ctx, k, "", onFence) // on e1: the map is not flipped yet
	if err != nil {
		t.Fatal(err)
	}
	state() // drained: flipping
	got := state()
	if got.State != shardmove.StateSettling || len(got.Stragglers) != 1 || got.Stragglers[0].To != "e2" {
		t.Fatalf("plan after the flip = %+v; want settling with one straggler to e2", got)
	}
	lockdtest.WaitFor(t, 10*time.Second, "lockd routing by version 1", func() bool {
		return inspectVersion(t, env, k) == 1
	})
	other := strings.TrimSuffix(k, "k") + "other"
	if _, err := c.Acquire(ctx, other, "", onFence); !errors.Is(err, client.ErrMoving) {
		t.Fatalf("a key of the straggler's range on its new shard: %v; want client.ErrMoving", err)
	}
	if got := state(); got.State != shardmove.StateSettling || got.Remaining != 1 {
		t.Fatalf("plan = %+v; want settling with 1 remaining", got)
	}
	if err := straggler.Release(ctx); err != nil {
		t.Fatalf("release of the straggler on its old shard: %v", err)
	}
	if got := state(); got.State != shardmove.StateDone {
		t.Fatalf("plan = %+v; want done", got)
	}
	after, err := c.Acquire(ctx, k, "", onFence)
	if err != nil {
		t.Fatal(err)
	}
	if after.Token() <= straggler.Token() {
		t.Fatalf("token after the move %d is not above the straggler's %d", after.Token(), straggler.Token())
	}
}

func inspectVersion(t *testing.T, env *lockdtest.Env, key string) int64 {
	t.Helper()
	in, err := env.Arbiter.Inspect(t.Context(), identity.Workload(lockdtest.Alice), key)
	if err != nil {
		return -1
	}
	return in.ShardMapVersion
}

// TestAMoveDrainsFlipsAndNeverLetsATokenGoBackwards, on a real lockd in
// front of a coord cluster and two entity shards (e1, the implicit map's,
// and e2): a plan giving e2 half the ranges is proposed by one operator and
// approved by another (not the same one); the controller marks out the one
// moving range that is held, refuses new grants in it (MOVING) while its
// holder keeps it, flips the map once it is released, and the key is then
// granted on e2 with a higher token. A plan moving a range back to e1,
// whose epoch is below e2's, is blocked, saying to advance e1's epoch.
func TestAMoveDrainsFlipsAndNeverLetsATokenGoBackwards(t *testing.T) {
	_, coord, shards, c := startShards(t)
	ctx := t.Context()
	onFence := func(*client.Lock) {}

	to := &shardmap.Map{Version: 1, Shards: []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}}
	r, err := shardmap.New(to)
	if err != nil {
		t.Fatal(err)
	}
	var moving, staying string // keys whose range moves to e2, and one that stays on e1
	for i := 0; moving == "" || staying == ""; i++ {
		k := fmt.Sprintf("t/r%d/k", i)
		if home, _ := r.Home(k); home == "e2" && moving == "" {
			moving = k
		} else if home == "e1" && staying == "" {
			staying = k
		}
	}
	held, err := c.Acquire(ctx, moving, "", onFence)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, staying, "", onFence); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	p, err := shardmove.Propose(ctx, coord, to, lockdtest.Operator, "add e2", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shardmove.Approve(ctx, coord, p.ID, lockdtest.Operator, now); !errors.Is(err, shardmove.ErrSamePerson) {
		t.Fatalf("approval by the requester: %v; want ErrSamePerson", err)
	}
	if _, err := shardmove.Approve(ctx, coord, p.ID, lockdtest.Operator2, now); err != nil {
		t.Fatal(err)
	}

	ctl := &shardmove.Controller{Coord: coord, Shards: shards, First: "e1", Name: "test"}
	step := func(want string) *shardmove.Plan {
		t.Helper()
		if _, err := ctl.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		got, err := shardmove.Get(ctx, coord, p.ID)
		if err != nil || got.State != want {
			t.Fatalf("plan after a step = %+v, %v; want state %s", got, err, want)
		}
		return got
	}
	got := step(shardmove.StateDraining)
	rng := r.Range(moving)
	if len(got.Live) != 1 || got.Live[0].Range != rng || got.Live[0].From != "e1" || got.Live[0].To != "e2" || got.Live[0].Live != 1 {
		t.Fatalf("live moves = %+v; want only %s from e1 to e2 (the held range that moves)", got.Live, rng)
	}
	got = step(shardmove.StateDraining)
	if got.Remaining != 1 {
		t.Fatalf("remaining = %d; want 1 (the hold)", got.Remaining)
	}
	if _, err := c.Acquire(ctx, strings.TrimSuffix(moving, "k")+"other", "", onFence); !errors.Is(err, client.ErrMoving) {
		t.Fatalf("another key of the draining range: %v; want client.ErrMoving", err)
	}
	if _, err := c.Acquire(ctx, strings.TrimSuffix(staying, "k")+"x", "", onFence); err != nil {
		t.Fatalf("a key of a range that is not moving: %v; want granted", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The controller, elected, finishes the plan.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&shardmove.Controller{Coord: coord, Shards: shards, First: "e1", Name: "elected", Poll: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(t.Output(), nil))}).Run(rctx)
	}()
	lockdtest.WaitFor(t, 20*time.Second, "the plan done", func() bool {
		got, err := shardmove.Get(ctx, coord, p.ID)
		return err == nil && got.State == shardmove.StateDone
	})
	cancel()
	<-done
	if cur, err := shardmap.Get(ctx, coord); err != nil || cur.Version() != 1 {
		t.Fatalf("map = %+v, %v; want version 1", cur.Map, err)
	}
	for name, cli := range shards {
		if resp, err := cli.Get(ctx, keyspace.RangeOutPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
			t.Fatalf("%s: range-out marks left: %v, %v", name, resp.Count, err)
		}
	}
	var after *client.Lock
	lockdtest.WaitFor(t, 10*time.Second, "the moved key granted", func() bool {
		after, err = c.Acquire(ctx, moving, "", onFence, client.Wait(2*time.Second))
		return err == nil
	})
	if after.Token() <= held.Token() {
		t.Fatalf("token after the move %d (epoch %d) is not above the one before %d (epoch %d)", after.Token(), epochOf(after.Token()), held.Token(), epochOf(held.Token()))
	}
	if resp, err := shards["e2"].Get(ctx, keyspace.HoldKey(moving)); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the moved key's hold on e2 = %v, %v; want it there", resp.Kvs, err)
	}

	// Moving it back to e1 would hand e1 (epoch below e2's) a range e2
	// granted: blocked until e1's epoch is advanced.
	back := &shardmap.Map{Version: 2, Shards: to.Shards, Overrides: []shardmap.Override{{Prefix: rng, Shard: "e1"}}}
	p2, err := shardmove.Propose(ctx, coord, back, lockdtest.Operator, "back", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shardmove.Approve(ctx, coord, p2.ID, lockdtest.Operator2, now); err != nil {
		t.Fatal(err)
	}
	if err := after.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p = p2
	step(shardmove.StateDraining)
	step(shardmove.StateFlipping)
	got = step(shardmove.StateFlipping)
	if !strings.Contains(got.Blocked, "advance e1's epoch") {
		t.Fatalf("blocked = %q; want it to say to advance e1's epoch", got.Blocked)
	}
	if cur, _ := shardmap.Get(ctx, coord); cur.Version() != 1 {
		t.Fatalf("map version %d after a blocked plan; want 1", cur.Version())
	}
}

func epochOf(tok uint64) uint32 { e, _ := token.Unpack(tok); return e }

// TestOperatorsMoveRangesThroughLockd: through lock.v1's AdminService, one
// operator proposes adding e2 (the preview names the held range that moves),
// the same operator cannot approve it (SAME_PERSON), another does, and
// lockd's own elected controller carries it out; a workload may do none of
// it.
func TestOperatorsMoveRangesThroughLockd(t *testing.T) {
	env, _, _, c := startShards(t)
	ctx := t.Context()
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	_, worker := env.Raw(t, lockdtest.Alice)

	to := &shardmap.Map{Version: 1, Shards: []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}}
	k := keyMovingTo(t, to, "e2")
	l, err := c.Acquire(ctx, k, "", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.ProposeShardPlan(ctx, &lockv1.ProposeShardPlanRequest{Add: []*lockv1.ShardWeight{{Name: "e2"}}, Reason: "r"}); !errors.Is(client.Decode(err), client.ErrNotOperator) {
		t.Fatalf("a workload proposing: %v; want NOT_OPERATOR", err)
	}
	if _, err := op1.ProposeShardPlan(ctx, &lockv1.ProposeShardPlanRequest{Add: []*lockv1.ShardWeight{{Name: "e9"}}, Reason: "r"}); !errors.Is(client.Decode(err), client.ErrInvalid) || !strings.Contains(err.Error(), `add[0]: "e9" is not an entity shard`) {
		t.Fatalf("adding an unknown shard: %v; want INVALID naming add[0]", err)
	}
	resp, err := op1.ProposeShardPlan(ctx, &lockv1.ProposeShardPlanRequest{Add: []*lockv1.ShardWeight{{Name: "e2"}}, Reason: "add e2"})
	if err != nil {
		t.Fatal(err)
	}
	p := resp.GetPlan()
	if p.GetState() != shardmove.StateProposed || len(p.GetMoves()) != 1 || p.GetMoves()[0].GetLive() != 1 || p.GetExpectedDrain().AsDuration() != 15*time.Second {
		t.Fatalf("proposed = %v; want one live range (1 hold) with a 15s drain (class t/std)", p)
	}
	if _, err := op1.ApproveShardPlan(ctx, &lockv1.ApproveShardPlanRequest{Id: p.GetId()}); !errors.Is(client.Decode(err), client.ErrSamePerson) {
		t.Fatalf("the requester approving: %v; want SAME_PERSON", err)
	}
	if _, err := op2.ApproveShardPlan(ctx, &lockv1.ApproveShardPlanRequest{Id: p.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveShardPlan(ctx, &lockv1.ApproveShardPlanRequest{Id: p.GetId()}); !errors.Is(client.Decode(err), client.ErrPlanState) {
		t.Fatalf("approving twice: %v; want PLAN_STATE", err)
	}
	state := func() (*lockv1.ShardStatusResponse, *lockv1.ShardPlan) {
		st, err := op1.ShardStatus(ctx, &lockv1.ShardStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st, st.GetPlans()[len(st.GetPlans())-1]
	}
	lockdtest.WaitFor(t, 10*time.Second, "the plan draining its held range", func() bool {
		_, q := state()
		return q.GetState() == shardmove.StateDraining && q.GetRemaining() == 1
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lockdtest.WaitFor(t, 20*time.Second, "the plan done", func() bool {
		_, q := state()
		return q.GetState() == shardmove.StateDone
	})
	st, _ := state()
	if st.GetVersion() != 1 || len(st.GetShards()) != 2 || st.GetShards()[1].GetName() != "e2" || st.GetShards()[1].GetWeight() != 1 {
		t.Fatalf("status = %v; want map version 1 with e2 in it", st)
	}
}

// TestShardsBehindTheMapAreBroughtForward: a shard that serves an older
// map version than the coord cluster's refuses every fenced grant, so the
// controller must bring it forward. Two ways a shard falls behind, on a
// real lockd (its own elected controller) in front of a coord cluster and
// shards e1 and e2: (1) a shard added to a map already written (it was
// never published to: the plan once failed with "serves version 0"), and
// (2) a shard whose store was rebuilt or restored from a backup, whose
// version key is gone or older and which may carry range-out marks from
// another time (the named stand-in: the version key deleted and a stale
// mark put, which is what a rebuilt-then-marked or restored store holds).
func TestShardsBehindTheMapAreBroughtForward(t *testing.T) {
	_, coord, shards, c := startShards(t)
	ctx, now := t.Context(), time.Now()
	onFence := func(*client.Lock) {}
	v1 := &shardmap.Map{Version: 1, Shards: []shardmap.Shard{{Name: "e1"}}}
	if _, err := shardmap.Flip(ctx, coord, kvs(shards), shardmap.Stored{}, v1); err != nil {
		t.Fatal(err)
	}
	v2 := &shardmap.Map{Version: 2, Shards: []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}}
	p, err := shardmove.Propose(ctx, coord, v2, lockdtest.Operator, "add e2 to a written map", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shardmove.Approve(ctx, coord, p.ID, lockdtest.Operator2, now); err != nil {
		t.Fatal(err)
	}
	lockdtest.WaitFor(t, 20*time.Second, "the plan adding e2 done", func() bool {
		got, err := shardmove.Get(ctx, coord, p.ID)
		if err == nil && got.State == shardmove.StateFailed {
			t.Fatalf("the plan adding e2 to a written map failed: %s", got.Err)
		}
		return err == nil && got.State == shardmove.StateDone
	})
	k := keyMovingTo(t, v2, "e2")
	var l *client.Lock
	lockdtest.WaitFor(t, 10*time.Second, "a key homed to e2 granted", func() bool {
		l, err = c.Acquire(ctx, k, "", onFence, client.Wait(time.Second))
		return err == nil
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	r, _ := shardmap.New(v2)
	if _, err := shards["e2"].Delete(ctx, keyspace.ShardVersionKey); err != nil {
		t.Fatal(err)
	}
	if _, err := shards["e2"].Put(ctx, keyspace.RangeOutKey(r.Range(k)), "draining an old plan"); err != nil {
		t.Fatal(err)
	}
	lockdtest.WaitFor(t, 10*time.Second, "e2 brought forward to version 2, its stale mark gone", func() bool {
		st, err := shardmap.ReadShard(ctx, shards["e2"])
		return err == nil && st.Version == 2 && len(st.Marks) == 0
	})
	if l, err = c.Acquire(ctx, k, "", onFence, client.Wait(5*time.Second)); err != nil {
		t.Fatalf("a key homed to e2 after e2 was brought forward: %v", err)
	}
	if resp, err := shards["e2"].Get(ctx, keyspace.HoldKey(k)); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the hold on e2 = %v, %v; want it there", resp.Kvs, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// (3) The coord cluster rebuilt empty (the stand-in: its map and plans
	// deleted), with a drain mark of the lost plan left on e1: the map is
	// put back from the shards' copy and the orphaned mark deleted.
	if _, err := coord.Delete(ctx, keyspace.ShardMapKey); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Delete(ctx, shardmove.PlanPrefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := shards["e1"].Put(ctx, keyspace.RangeOutKey("t/lost/"), "draining a lost plan"); err != nil {
		t.Fatal(err)
	}
	lockdtest.WaitFor(t, 10*time.Second, "the coord map restored from the shards' copy, the orphaned mark gone", func() bool {
		cur, err := shardmap.Get(ctx, coord)
		st, rerr := shardmap.ReadShard(ctx, shards["e1"])
		return err == nil && rerr == nil && cur.Version() == 2 && len(cur.Map.Shards) == 2 && len(st.Marks) == 0
	})
	if _, err := c.Acquire(ctx, "t/lost/k", "", onFence, client.Wait(5*time.Second)); err != nil {
		t.Fatalf("a key of the orphaned mark's range: %v", err)
	}
}

// TestADrainEndsTheHoldsLeftAtItsBound: a range being moved waits for its
// holders at most its longest class TTL (t/fast: 5s); a holder that keeps
// its session alive and never releases then loses the hold by force,
// recorded under the plan's two operators and told to the holder
// (client.ForcedError naming them), and the move completes: the key is
// granted on its new shard with a higher token.
func TestADrainEndsTheHoldsLeftAtItsBound(t *testing.T) {
	_, coord, shards, c := startShards(t)
	ctx, now := t.Context(), time.Now()
	const key = "t/fast/k"
	held, err := c.Acquire(ctx, key, "", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	to := &shardmap.Map{Version: 1, Shards: []shardmap.Shard{{Name: "e1"}, {Name: "e2"}}, Overrides: []shardmap.Override{{Prefix: "t/fast/", Shard: "e2"}}}
	p, err := shardmove.Propose(ctx, coord, to, lockdtest.Operator, "pin t/fast/ to e2", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shardmove.Approve(ctx, coord, p.ID, lockdtest.Operator2, now); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the holder was not told its hold ended within 20s of a drain bounded at 5s")
	}
	var forced *client.ForcedError
	if !errors.As(held.Err(), &forced) || forced.Requester != lockdtest.Operator || forced.Approver != lockdtest.Operator2 || !strings.Contains(forced.Reason, p.ID) {
		t.Fatalf("the holder's lock ended with %v; want a force-release by the plan's operators naming plan %s", held.Err(), p.ID)
	}
	lockdtest.WaitFor(t, 20*time.Second, "the plan done", func() bool {
		got, err := shardmove.Get(ctx, coord, p.ID)
		return err == nil && got.State == shardmove.StateDone
	})
	got, _ := shardmove.Get(ctx, coord, p.ID)
	if took := got.Flipped.Sub(got.DrainStarted); took < 5*time.Second || took > 10*time.Second {
		t.Fatalf("the drain lasted %s; want its bound (5s) plus at most a few polls", took)
	}
	after, err := c.Acquire(ctx, key, "", func(*client.Lock) {}, client.Wait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if after.Token() <= held.Token() {
		t.Fatalf("token after the move %d is not above the one before %d", after.Token(), held.Token())
	}
	if resp, err := shards["e2"].Get(ctx, keyspace.HoldKey(key)); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the moved key's hold on e2 = %v, %v; want it there", resp.Kvs, err)
	}
}

func kvs(m map[string]*clientv3.Client) map[string]clientv3.KV {
	out := map[string]clientv3.KV{}
	for k, v := range m {
		out[k] = v
	}
	return out
}
