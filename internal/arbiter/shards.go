package arbiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
	"github.com/lockd-dev/lockd/pkg/token"
)

// The entity tier may be served by several clusters, its shards: a key of
// an entity-tier class is homed to one of them by the shard map on the
// coord cluster (internal/shardmap), which every arbiter watches. Until a
// map is written, the implicit map (version 0) homes every entity key to
// the topology's first entity cluster.
//
// Routing by a map that is behind is never unsafe: every grant on a shard
// is fenced by the map version the arbiter routed by (shardmap.Fence), and
// a map is published on every shard before the coord cluster's copy
// changes (shardmap.Flip). A refused grant is ErrMoving, and the arbiter
// reads the map again.

// shardRoutes is one map and the cells it homes keys to.
type shardRoutes struct {
	router *shardmap.Router
	cells  map[string]*cell
}

// Shards names the entity tier's shards, the implicit map's first; none
// when the tier is not split (one cluster serves it, beside nothing).
func (a *Arbiter) Shards() []string {
	out := make([]string, len(a.shards))
	for i, c := range a.shards {
		out[i] = c.name
	}
	return out
}

// routesFor builds the routes of m over the arbiter's shards. A map naming
// a shard the topology does not have is refused (the field named), and the
// arbiter keeps routing by the map it has.
func (a *Arbiter) routesFor(m *shardmap.Map) (*shardRoutes, error) {
	r, err := shardmap.New(m)
	if err != nil {
		return nil, err
	}
	byName := map[string]*cell{}
	for _, c := range a.shards {
		byName[c.name] = c
	}
	rt := &shardRoutes{router: r, cells: map[string]*cell{}}
	for i, s := range m.Shards {
		c, ok := byName[s.Name]
		if !ok {
			return nil, fmt.Errorf("%w: shards[%d].name: %q is not an entity cluster of this lockd's topology", shardmap.ErrInvalid, i, s.Name)
		}
		rt.cells[s.Name] = c
	}
	return rt, nil
}

// shardOf is the shard cell key is homed to, with the fence its grants
// there carry.
func (a *Arbiter) shardOf(key string) (*cell, shardmap.Fence) {
	rt := a.routes.Load()
	name, rng := rt.router.Home(key)
	return rt.cells[name], shardmap.Fence{Version: rt.router.Version(), Range: rng}
}

// cellOfToken is the cell a hold of key with token tok is on: the key's
// cell (cellOfKey), unless the token's epoch is another shard's. Epochs
// are never shared by two clusters, so the epoch names the shard that
// granted it: a hold granted before its range moved is released (and
// checked) where it is, not refused as stale by its new shard.
func (a *Arbiter) cellOfToken(key string, tok uint64) *cell {
	c := a.cellOfKey(key)
	ep, _ := token.Unpack(tok)
	if !slices.Contains(a.shards, c) || c.epoch.Load().epoch == ep {
		return c
	}
	for _, s := range a.shards {
		if st := s.epoch.Load(); !st.sealed && st.epoch == ep {
			return s
		}
	}
	return c
}

// fence is the shard fence of a grant of key, of class cls, in c: none
// (ok false) for a cell that is not an entity shard or a key that is not
// the entity tier's; ErrMoving when the map the arbiter holds now homes
// key to another shard (it moved while the caller waited).
func (c *cell) fence(key string, cls *class.Class) (f shardmap.Fence, ok bool, err error) {
	if c.shardOf == nil || cls.Tier != class.TierEntity {
		return shardmap.Fence{}, false, nil
	}
	home, f := c.shardOf(key)
	if home != c {
		return f, true, &MovingError{err: fmt.Errorf("%s is now homed to shard %s (map version %d); acquire again", key, home.name, f.Version)}
	}
	if brokenShardFence {
		return f, false, nil
	}
	return f, true, nil
}

// fenceRefused explains a refused transaction carrying f: nil when the
// fence held, else ErrMoving. A shard serving a newer map than the
// arbiter's makes the arbiter read the map again now.
func (c *cell) fenceRefused(f shardmap.Fence, on bool, resp *clientv3.TxnResponse) error {
	if !on {
		return nil
	}
	err := f.Refused(resp.Responses)
	var mv *shardmap.Moving
	if !errors.As(err, &mv) {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInternal, err)
		}
		return nil
	}
	c.metrics.moving.WithLabelValues(c.name).Inc()
	retry := retryMapChanged
	if mv.Draining {
		retry = retryDraining
	}
	if mv.Served > mv.Routed && c.mapBehind != nil {
		c.mapBehind()
	}
	return &MovingError{RetryAfter: retry, err: fmt.Errorf("shard %s: %w; acquire again", c.name, mv)}
}

// How long a MOVING refusal asks the caller to wait: a map change is read
// at once; a range being drained waits for its holders to leave.
const (
	retryMapChanged = 100 * time.Millisecond
	retryDraining   = time.Second
)

// MovingError is ErrMoving with how long to wait before acquiring again.
type MovingError struct {
	RetryAfter time.Duration
	err        error
}

func (e *MovingError) Error() string {
	if e.err == nil {
		return ErrMoving.Error()
	}
	return ErrMoving.Error() + ": " + e.err.Error()
}

// Unwrap is ErrMoving and the shard's reason.
func (e *MovingError) Unwrap() []error { return []error{ErrMoving, e.err} }

// ReasonMetadata is the wait, for the client ("retry_after_ms").
func (e *MovingError) ReasonMetadata() map[string]string {
	return map[string]string{"retry_after_ms": strconv.FormatInt(e.RetryAfter.Milliseconds(), 10)}
}

// loadShardMap reads the map from the coord cluster and routes by it.
func (a *Arbiter) loadShardMap(ctx context.Context) (int64, error) {
	cctx, cancel := a.home.callCtx(ctx)
	defer cancel()
	resp, err := a.home.cli.Get(cctx, keyspace.ShardMapKey)
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	if len(resp.Kvs) > 0 {
		a.applyShardMap(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	}
	return resp.Header.Revision, nil
}

// applyShardMap routes by the map document b if it is newer than the one
// routed by; a map that cannot be served is logged and ignored (every
// grant it would route is fenced anyway: the shards serve its version, so
// the old map's grants are refused, and safely so).
func (a *Arbiter) applyShardMap(b []byte, rev int64) {
	m, err := shardmap.Decode(b)
	if err == nil {
		var rt *shardRoutes
		if rt, err = a.routesFor(m); err == nil {
			for {
				cur := a.routes.Load()
				if cur.router.Version() >= m.Version {
					return
				}
				if a.routes.CompareAndSwap(cur, rt) {
					a.metrics.shardMapVersion.Set(float64(m.Version))
					a.log.Info("shard map: routing by a new version", "version", m.Version, "shards", len(m.Shards))
					return
				}
			}
		}
	}
	a.log.Error("shard map: cannot route by the map on the coord cluster; keeping the one routed by (grants of entity keys are refused until it is fixed)",
		"key", keyspace.ShardMapKey, "revision", rev, "err", err)
}

// watchShardMap follows the map on the coord cluster until ctx ends; a
// broken watch is read again and resumed every poll.
func (a *Arbiter) watchShardMap(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		if rev == 0 {
			var err error
			if rev, err = a.loadShardMap(ctx); err != nil {
				a.sleepPoll(ctx)
				continue
			}
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range a.home.cli.Watch(wctx, keyspace.ShardMapKey, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			stallMapWatch(ctx)
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					a.applyShardMap(ev.Kv.Value, ev.Kv.ModRevision)
				}
			}
		}
		cancel()
		rev = 0 // read again: compaction or a lost leader
		a.sleepPoll(ctx)
	}
}

// mapBehind asks refreshShardMaps to read the map now (a shard said the
// arbiter's map is behind); it never blocks.
func (a *Arbiter) mapBehind() {
	select {
	case a.mapStale <- struct{}{}:
	default:
	}
}

// refreshShardMaps reads the map each time mapBehind asks, until ctx ends:
// a stalled watch costs a refused grant, not a stale route.
func (a *Arbiter) refreshShardMaps(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.mapStale:
		}
		if _, err := a.loadShardMap(ctx); err != nil {
			a.log.Warn("shard map: reading it again failed", "err", err)
		}
	}
}

func (a *Arbiter) sleepPoll(ctx context.Context) {
	t := time.NewTimer(a.poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// rateWindow counts events per second over the last minute.
type rateWindow struct {
	mu    sync.Mutex
	count [60]int64
	at    [60]int64 // the Unix second each slot counts
}

func (w *rateWindow) add(now time.Time) {
	s := now.Unix()
	i := s % 60
	w.mu.Lock()
	if w.at[i] != s {
		w.at[i], w.count[i] = s, 0
	}
	w.count[i]++
	w.mu.Unlock()
}

// perSecond is the mean rate over the minute before now's second.
func (w *rateWindow) perSecond(now time.Time) float64 {
	s := now.Unix()
	var n int64
	w.mu.Lock()
	for i := range w.at {
		if d := s - w.at[i]; d >= 1 && d <= 60 {
			n += w.count[i]
		}
	}
	w.mu.Unlock()
	return float64(n) / 60
}
