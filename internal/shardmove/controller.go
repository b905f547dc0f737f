package shardmove

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
)

// ElectionPrefix is where move controllers campaign, on the coord cluster.
const ElectionPrefix = keyspace.SysPrefix + "shard-controller"

// Controller carries out approved plans. Run it on every lockd of a coord
// cluster; one at a time is elected.
type Controller struct {
	// Coord is the coord cluster; Shards every entity shard by name; First
	// is the implicit map's shard (the first one).
	Coord  *clientv3.Client
	Shards map[string]*clientv3.Client
	First  string
	// Name identifies this controller in the election.
	Name string
	// Poll is how often a step looks again (drains, blocked plans, new
	// plans); default 500ms. ElectionTTL defaults to 5s.
	Poll        time.Duration
	ElectionTTL time.Duration
	Log         *slog.Logger
	Now         func() time.Time
	// TTL, when set, is the TTL of key's class (for a move's expected
	// drain time, and its bound).
	TTL func(key string) time.Duration
	// EndHold, when set, releases key's hold on shard by force for plan p,
	// whose drain has lasted its bound (the longest class TTL of its
	// moving ranges): the holder is told, and the history records a
	// force-release by the plan's two operators. Without it a drain
	// waits for every holder to release.
	EndHold func(ctx context.Context, shard, key string, p *Plan) error
}

func (c *Controller) defaults() {
	if c.Poll <= 0 {
		c.Poll = 500 * time.Millisecond
	}
	if c.ElectionTTL <= 0 {
		c.ElectionTTL = 5 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Run campaigns and, while elected, carries out approved plans one at a
// time, until ctx ends. A lost election is campaigned for again.
func (c *Controller) Run(ctx context.Context) {
	c.defaults()
	for ctx.Err() == nil {
		if err := c.lead(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("shard move controller: not leading", "err", err)
			sleep(ctx, c.Poll)
		}
	}
}

// lead campaigns, then works while the election's session lives.
func (c *Controller) lead(ctx context.Context) error {
	sess, err := concurrency.NewSession(c.Coord, concurrency.WithTTL(int((c.ElectionTTL+time.Second-1)/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer func() { _ = sess.Close() }()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
		case <-lctx.Done():
		}
		cancel()
	}()
	el := concurrency.NewElection(sess, ElectionPrefix)
	if err := el.Campaign(lctx, c.Name); err != nil {
		return err
	}
	guard := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())}
	c.Log.Info("shard move controller: elected", "name", c.Name)
	for lctx.Err() == nil {
		worked, err := c.Step(lctx, guard)
		if err != nil && lctx.Err() == nil {
			c.Log.Warn("shard move controller: step failed; trying again", "err", err)
		}
		if !worked || err != nil {
			sleep(lctx, c.Poll)
		}
	}
	return lctx.Err()
}

// Step advances the oldest active plan by one step, writing its progress
// under guard. worked says a step completed (another may follow at once).
func (c *Controller) Step(ctx context.Context, guard []clientv3.Cmp) (worked bool, err error) {
	c.defaults()
	plans, err := List(ctx, c.Coord)
	if err != nil {
		return false, err
	}
	var p *Plan
	if i := slices.IndexFunc(plans, func(p *Plan) bool { return p.Active() }); i >= 0 {
		p = plans[i]
	}
	prev, err := shardmap.Get(ctx, c.Coord)
	if err != nil {
		return false, err
	}
	if prev, err = c.repair(ctx, prev, p); err != nil {
		return false, err
	}
	if p == nil {
		return false, nil
	}
	before := *p
	switch p.State {
	case StateApproved:
		err = c.startDrain(ctx, p, prev)
	case StateDraining:
		err = c.drain(ctx, p)
	case StateFlipping:
		err = c.flip(ctx, p, prev)
	case StateSettling:
		err = c.settle(ctx, p)
	}
	var fail *failure
	if errors.As(err, &fail) {
		p.State, p.Err = StateFailed, fail.Error()
		c.Log.Error("shard move: plan failed", "plan", p.ID, "err", fail)
		err = nil
	}
	if err != nil {
		return false, err
	}
	if p.State == before.State && p.Blocked == before.Blocked && p.Remaining == before.Remaining {
		return false, nil // nothing changed: look again after a poll
	}
	p.Updated = c.Now()
	if err := save(ctx, c.Coord, p, guard); err != nil {
		return false, err
	}
	if p.State != before.State {
		c.Log.Info("shard move: plan advanced", "plan", p.ID, "state", p.State, "live", len(p.Live), "stragglers", len(p.Stragglers))
	}
	return p.State != before.State, nil
}

// failure ends a plan.
type failure struct{ msg string }

func (f *failure) Error() string { return f.msg }

func failf(format string, args ...any) error { return &failure{fmt.Sprintf(format, args...)} }

// maps are the map replaced (the implicit one when none is stored) and
// its router, and the new map's router.
func (c *Controller) routers(p *Plan, prev shardmap.Stored) (*shardmap.Map, *shardmap.Router, *shardmap.Router, error) {
	old := prev.Map
	if old == nil {
		old = shardmap.Implicit(c.First)
	}
	ro, err := shardmap.New(old)
	if err != nil {
		return nil, nil, nil, err
	}
	rn, err := shardmap.New(p.To)
	if err != nil {
		return nil, nil, nil, failf("the plan's map: %v", err)
	}
	for _, name := range shardmap.ShardsOf(old, p.To) {
		if c.Shards[name] == nil {
			return nil, nil, nil, failf("shard %q is not an entity cluster of this lockd's topology", name)
		}
	}
	return old, ro, rn, nil
}

// startDrain finds the moving ranges that have holds or waiters and marks
// them out on their old shards.
func (c *Controller) startDrain(ctx context.Context, p *Plan, prev shardmap.Stored) error {
	if prev.Version() != p.From {
		return failf("the map is at version %d, the plan replaces %d: %v", prev.Version(), p.From, ErrStale)
	}
	old, _, rn, err := c.routers(p, prev)
	if err != nil {
		return err
	}
	live, err := c.liveMoves(ctx, old, rn, nil)
	if err != nil {
		return err
	}
	for _, m := range live {
		if _, err := c.Shards[m.From].Put(ctx, keyspace.RangeOutKey(m.Range), "draining "+p.ID); err != nil {
			return fmt.Errorf("marking %s out on %s: %w", m.Range, m.From, err)
		}
	}
	p.Live, p.State, p.DrainStarted = live, StateDraining, c.Now()
	return nil
}

// liveMoves are the ranges with a hold or a waiter on a shard of old that
// rn homes elsewhere, except those in skip.
func (c *Controller) liveMoves(ctx context.Context, old *shardmap.Map, rn *shardmap.Router, skip []Move) ([]Move, error) {
	var out []Move
	for _, s := range old.Shards {
		keys, err := liveKeys(ctx, c.Shards[s.Name], "")
		if err != nil {
			return nil, fmt.Errorf("reading shard %s: %w", s.Name, err)
		}
		for _, k := range keys {
			home, rng := rn.Home(k)
			m := Move{Range: rng, From: s.Name, To: home}
			if home == s.Name || slices.ContainsFunc(skip, m.same) {
				continue
			}
			i := slices.IndexFunc(out, m.same)
			if i < 0 {
				out, i = append(out, m), len(out)
			}
			out[i].Live++
			if c.TTL != nil {
				out[i].TTL = max(out[i].TTL, c.TTL(k))
			}
		}
	}
	return out, nil
}

// Preview is what replacing the stored map with to would move now: the
// moving ranges that have holds or waiters, and why the move would be
// blocked ("" when it would not).
func (c *Controller) Preview(ctx context.Context, to *shardmap.Map) ([]Move, string, error) {
	c.defaults()
	prev, err := shardmap.Get(ctx, c.Coord)
	if err != nil {
		return nil, "", err
	}
	old, _, rn, err := c.routers(&Plan{To: to}, prev)
	if err != nil {
		return nil, "", err
	}
	live, err := c.liveMoves(ctx, old, rn, nil)
	if err != nil {
		return nil, "", err
	}
	blocked, _, err := c.epochCheck(ctx, old, to)
	return live, blocked, err
}

// liveKeys are the lock keys with a hold or a waiter on the shard, under
// prefix.
func liveKeys(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	var out []string
	for _, p := range []string{keyspace.HoldPrefix, keyspace.QueuePrefix} {
		resp, err := cli.Get(ctx, p+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			k := strings.TrimPrefix(string(kv.Key), p)
			if i := strings.Index(k, keyspace.QueueSep); p == keyspace.QueuePrefix && i >= 0 {
				k = k[:i]
			}
			out = append(out, k)
		}
	}
	return out, nil
}

// remaining counts the holds and waiters left in moves' ranges on their
// old shards.
func (c *Controller) remaining(ctx context.Context, moves []Move) (int, error) {
	n := 0
	for _, m := range moves {
		keys, err := liveKeys(ctx, c.Shards[m.From], m.Range)
		if err != nil {
			return 0, err
		}
		n += len(keys)
	}
	return n, nil
}

// drain waits for the live ranges to empty, ending what holds are left
// by force once the drain has lasted its bound.
func (c *Controller) drain(ctx context.Context, p *Plan) error {
	n, err := c.remaining(ctx, p.Live)
	if err != nil {
		return err
	}
	if n > 0 && c.overdue(p.Live, p.DrainStarted) {
		if n, err = c.endHolds(ctx, p, p.Live); err != nil {
			return err
		}
	}
	p.Remaining = n
	if n == 0 {
		p.State = StateFlipping
	}
	return nil
}

// Bound is how long the drain of moves may last before the holds left in
// them are ended by force: the longest class TTL among them (0: none
// known, no bound).
func Bound(moves []Move) time.Duration {
	var b time.Duration
	for _, m := range moves {
		b = max(b, m.TTL)
	}
	return b
}

// overdue reports whether moves, drained since since, are past their
// bound and this controller may end their holds.
func (c *Controller) overdue(moves []Move, since time.Time) bool {
	b := Bound(moves)
	return c.EndHold != nil && b > 0 && !since.IsZero() && c.Now().Sub(since) >= b
}

// endHolds ends by force every hold left in moves' ranges on their old
// shards, and counts what is left (waiters, and holds that changed
// meanwhile, ended at the next look).
func (c *Controller) endHolds(ctx context.Context, p *Plan, moves []Move) (int, error) {
	for _, m := range moves {
		resp, err := c.Shards[m.From].Get(ctx, keyspace.HoldPrefix+m.Range, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return 0, err
		}
		for _, kv := range resp.Kvs {
			key := strings.TrimPrefix(string(kv.Key), keyspace.HoldPrefix)
			if err := c.EndHold(ctx, m.From, key, p); err != nil {
				c.Log.Warn("shard move: ending a hold past the drain's bound failed; trying again", "plan", p.ID, "shard", m.From, "err", err)
			} else {
				c.Log.Warn("shard move: a hold was ended by force: the drain reached its bound", "plan", p.ID, "shard", m.From, "range", m.Range, "bound", Bound(moves))
			}
		}
	}
	return c.remaining(ctx, moves)
}

// flip checks the epochs, publishes the new version on every shard,
// marks stragglers out on their new shards and flips the map.
func (c *Controller) flip(ctx context.Context, p *Plan, prev shardmap.Stored) error {
	if prev.Version() == p.To.Version {
		p.State, p.Blocked = StateSettling, "" // flipped before a crash
		return nil
	}
	if prev.Version() != p.From {
		return failf("the map is at version %d, the plan replaces %d: %v", prev.Version(), p.From, ErrStale)
	}
	old, _, rn, err := c.routers(p, prev)
	if err != nil {
		return err
	}
	names := shardmap.ShardsOf(old, p.To)
	blocked, revs, err := c.epochCheck(ctx, old, p.To)
	if err != nil || blocked != "" {
		p.Blocked = blocked
		return err
	}
	if err := shardmap.Publish(ctx, kvs(c.Shards), names, p.From, p.To, revs); err != nil {
		if errors.Is(err, shardmap.ErrEpochChanged) || errors.Is(err, shardmap.ErrShardChanged) {
			return nil // an epoch or a shard moved since the check: check again
		}
		if errors.Is(err, shardmap.ErrShardVersion) {
			return failf("%v", err)
		}
		return err
	}
	// No shard grants by the old map from here on: a moving range still
	// live on its old shard was granted there after the drain began (a
	// drained range too, should its mark have been lost with a restore).
	stragglers, err := c.liveMoves(ctx, old, rn, nil)
	if err != nil {
		return err
	}
	for _, m := range stragglers {
		if _, err := c.Shards[m.To].Put(ctx, keyspace.RangeOutKey(m.Range), "arriving "+p.ID); err != nil {
			return fmt.Errorf("marking %s out on %s: %w", m.Range, m.To, err)
		}
	}
	p.Stragglers = stragglers
	if _, err := shardmap.Put(ctx, c.Coord, prev, p.To); err != nil {
		return err
	}
	p.State, p.Blocked, p.Flipped = StateSettling, "", c.Now()
	return nil
}

// settle clears the drain marks and waits the stragglers out.
func (c *Controller) settle(ctx context.Context, p *Plan) error {
	for _, m := range p.Live {
		if _, err := c.Shards[m.From].Delete(ctx, keyspace.RangeOutKey(m.Range)); err != nil {
			return err
		}
	}
	n, err := c.remaining(ctx, p.Stragglers)
	if err != nil {
		return err
	}
	if n > 0 && c.overdue(p.Stragglers, p.Flipped) {
		if n, err = c.endHolds(ctx, p, p.Stragglers); err != nil {
			return err
		}
	}
	p.Remaining = n
	if n > 0 {
		return nil
	}
	for _, m := range p.Stragglers {
		if _, err := c.Shards[m.To].Delete(ctx, keyspace.RangeOutKey(m.Range)); err != nil {
			return err
		}
	}
	p.State = StateDone
	return nil
}

func kvs(m map[string]*clientv3.Client) map[string]clientv3.KV {
	out := make(map[string]clientv3.KV, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// epochCheck reads every shard's epoch and says why to would be blocked:
// a shard that may receive ranges (shardmap.Receivers) must have an epoch
// above every other shard of old, or a moved key's token could go
// backwards. revs are the epoch records' mod revisions, for Publish.
func (c *Controller) epochCheck(ctx context.Context, old, to *shardmap.Map) (blocked string, revs map[string]int64, err error) {
	epochs, revs := map[string]uint32{}, map[string]int64{}
	for _, name := range shardmap.ShardsOf(old, to) {
		resp, err := c.Shards[name].Get(ctx, keyspace.EpochKey)
		if err != nil {
			return "", nil, fmt.Errorf("reading shard %s's epoch: %w", name, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Sprintf("shard %s has no epoch yet: initialise it (lockctl epoch status)", name), nil, nil
		}
		e, _, err := keyspace.DecodeEpoch(resp.Kvs[0].Value)
		if err != nil {
			return "", nil, fmt.Errorf("shard %s: %w", name, err)
		}
		epochs[name], revs[name] = e, resp.Kvs[0].ModRevision
	}
	for _, d := range shardmap.Receivers(old, to) {
		for _, s := range old.Shards {
			if s.Name != d && epochs[d] <= epochs[s.Name] {
				return fmt.Sprintf("shard %s may receive ranges, but its epoch %d is not above shard %s's %d, so a moved key's token could go backwards: advance %s's epoch (lockctl epoch advance request --cluster %s --from %d); the move goes on by itself then",
					d, epochs[d], s.Name, epochs[s.Name], d, d, epochs[d]), nil, nil
			}
		}
	}
	return "", revs, nil
}

// repair puts the stored map and the shards back in step after a cluster
// was restored from a backup or rebuilt empty (a restore rewinds the map,
// its version and the marks with everything else), and returns the
// stored map:
//
//   - a coord cluster whose map is behind the copy a shard keeps of the
//     map it serves gets that copy back (only while no plan is active:
//     a plan's own flip puts the map);
//   - a shard of the map that serves an older version is brought forward
//     to the map's, with the range-out marks the active plan p (nil:
//     none) has on it now. Until then it refuses every fenced grant; its
//     restored holds are deleted by the epoch advance that unseals it, so
//     bringing it forward grants nothing twice;
//   - with no plan active, a range-out mark left on any shard is from a
//     plan the coord cluster lost, and is deleted.
func (c *Controller) repair(ctx context.Context, prev shardmap.Stored, p *Plan) (shardmap.Stored, error) {
	states := map[string]shardmap.ShardState{}
	var newest *shardmap.Map
	for name, kv := range c.Shards {
		st, err := shardmap.ReadShard(ctx, kv)
		if err != nil {
			return prev, fmt.Errorf("reading shard %s: %w", name, err)
		}
		states[name] = st
		if st.Copy != nil && (newest == nil || st.Copy.Version > newest.Version) {
			newest = st.Copy
		}
	}
	if p == nil && newest != nil && newest.Version > prev.Version() {
		restored, err := shardmap.Restore(ctx, c.Coord, prev, newest)
		if err != nil {
			return prev, fmt.Errorf("restoring the coord cluster's shard map: %w", err)
		}
		c.Log.Warn("shard move: the coord cluster's shard map was behind its shards' (restored or rebuilt); put back from their copy", "was", prev.Version(), "version", newest.Version)
		prev = restored
	}
	if prev.Version() == 0 {
		return prev, nil
	}
	for name, st := range states {
		in := slices.ContainsFunc(prev.Map.Shards, func(s shardmap.Shard) bool { return s.Name == name })
		switch {
		case in && st.Version < prev.Version():
			want := marksOn(p, name)
			ok, err := st.Set(ctx, c.Shards[name], prev.Map, st.Marks, want)
			if err != nil {
				return prev, fmt.Errorf("repairing shard %s: %w", name, err)
			}
			if ok {
				c.Log.Warn("shard move: a shard served an older map version (restored or rebuilt); brought forward", "shard", name, "served", st.Version, "version", prev.Version(), "marks", len(want))
			}
		case p == nil && len(st.Marks) > 0:
			for _, rng := range st.Marks {
				if _, err := c.Shards[name].Delete(ctx, keyspace.RangeOutKey(rng)); err != nil {
					return prev, fmt.Errorf("clearing marks on shard %s: %w", name, err)
				}
			}
			c.Log.Warn("shard move: range-out marks of no active plan deleted (the coord cluster lost the plan)", "shard", name, "marks", len(st.Marks))
		}
	}
	return prev, nil
}

// marksOn are the range-out marks active plan p keeps on shard now.
func marksOn(p *Plan, shard string) map[string]string {
	out := map[string]string{}
	if p == nil {
		return out
	}
	switch p.State {
	case StateDraining, StateFlipping:
		for _, m := range p.Live {
			if m.From == shard {
				out[m.Range] = "draining " + p.ID
			}
		}
	case StateSettling:
		for _, m := range p.Stragglers {
			if m.To == shard {
				out[m.Range] = "arriving " + p.ID
			}
		}
	}
	return out
}
