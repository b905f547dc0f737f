package arbiter

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/token"
)

// lineView is this arbiter's copy of one key's durable line and hold,
// shared by the durable waiters it serves for the key: one read, then one
// watch of the line and one of the hold from the revision after it (the
// shape of clientv3/mirror). It replaces a read and two watches per waiter
// per turn of the line with nothing.
//
// It is a hint, like every watch: it decides whom to wake and whom a
// release on this arbiter hands the key to first, never a grant. The
// grant transactions compare the store. It reflects the store at one
// revision (rev), so its head is the head at that revision; as waiter keys
// are created at increasing revisions, no waiter can later appear ahead of
// it.
type lineView struct {
	a   *Arbiter
	c   *cell
	dl  *durableLine
	key string

	mu      sync.Mutex
	ready   bool // the first read is in
	rev     int64
	line    map[string]*mvccpb.KeyValue // waiter key -> its key-value
	hold    *mvccpb.KeyValue            // nil when free
	waiters map[*durable]struct{}       // the local waiters of the key
	cancel  context.CancelFunc
}

// register registers d with its key's line view, starting one if needed.
func (dl *durableLine) register(d *durable) *lineView {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	v := dl.views[d.req.Key]
	if v == nil {
		ctx, cancel := context.WithCancel(dl.a.bg)
		v = &lineView{a: dl.a, c: dl.c, dl: dl, key: d.req.Key, line: map[string]*mvccpb.KeyValue{}, waiters: map[*durable]struct{}{}, cancel: cancel}
		dl.views[d.req.Key] = v
		go v.run(ctx)
	}
	v.mu.Lock()
	v.waiters[d] = struct{}{}
	v.mu.Unlock()
	return v
}

// view is key's line view (nil when no waiter of key is served here).
func (dl *durableLine) view(key string) *lineView {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.views[key]
}

// len is the number of key's durable waiters served here.
func (dl *durableLine) len(key string) int {
	v := dl.view(key)
	if v == nil {
		return 0
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.waiters)
}

// drop unregisters d; the last waiter stops the view.
func (v *lineView) drop(d *durable) {
	v.dl.mu.Lock()
	defer v.dl.mu.Unlock()
	v.mu.Lock()
	delete(v.waiters, d)
	empty := len(v.waiters) == 0
	v.mu.Unlock()
	if empty && v.dl.views[v.key] == v {
		delete(v.dl.views, v.key)
		v.cancel()
	}
}

// run keeps the view: a read, then watches from the revision after it; on
// a watch error or compaction, a read again. Every local waiter is woken
// after each read.
func (v *lineView) run(ctx context.Context) {
	qr, hk := keyspace.QueueRange(v.key), holdKey(v.key)
	for ctx.Err() == nil {
		rev, ok := v.load(ctx, qr, hk)
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-time.After(v.a.jitter()):
			}
			continue
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		lines := v.c.cli.Watch(wctx, qr, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		holds := v.c.cli.Watch(wctx, hk, clientv3.WithRev(rev+1))
		v.follow(ctx, lines, holds)
		cancel()
	}
}

// load reads the line and the hold, linearizably, into the view.
func (v *lineView) load(ctx context.Context, qr, hk string) (int64, bool) {
	cctx, cancel := v.c.callCtx(ctx)
	resp, err := v.c.cli.Txn(cctx).Then(clientv3.OpGet(qr, clientv3.WithPrefix()), clientv3.OpGet(hk)).Commit()
	cancel()
	if err != nil {
		return 0, false
	}
	v.mu.Lock()
	v.line = map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		v.line[string(kv.Key)] = kv
	}
	v.hold = nil
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		v.hold = kvs[0]
	}
	v.rev, v.ready = resp.Header.Revision, true
	wake := v.localLocked()
	v.mu.Unlock()
	for _, d := range wake {
		signal(d.wake)
	}
	return resp.Header.Revision, true
}

// follow applies watch events until a stream ends or fails.
func (v *lineView) follow(ctx context.Context, lines, holds clientv3.WatchChan) {
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return
		case wr, ok = <-lines:
		case wr, ok = <-holds:
		}
		if !ok || wr.Err() != nil || wr.CompactRevision != 0 {
			return
		}
		v.apply(wr.Events, wr.Header.Revision)
	}
}

// apply applies one response's events and wakes the local waiters they
// concern: the one whose own key went (a release may have handed it the
// key), the one whose predecessor went, and the head when the hold went.
func (v *lineView) apply(evs []*clientv3.Event, rev int64) {
	v.mu.Lock()
	var wake []*durable
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		switch {
		case k == holdKey(v.key) && ev.Type == clientv3.EventTypePut:
			v.hold = ev.Kv
		case k == holdKey(v.key):
			v.hold = nil
			if h := v.headLocked(); h != nil {
				wake = append(wake, v.localAt(string(h.Key))...)
			}
		case ev.Type == clientv3.EventTypePut:
			v.line[k] = ev.Kv
			wake = append(wake, v.localAt(k)...) // a waiter that joined before the view saw it
		default:
			wake = append(wake, v.localAt(k)...)
			if next := v.nextLocked(k); next != nil {
				wake = append(wake, v.localAt(string(next.Key))...)
			}
			delete(v.line, k)
		}
	}
	v.rev = max(v.rev, rev)
	v.mu.Unlock()
	for _, d := range wake {
		signal(d.wake)
	}
}

// localAt are the local waiters whose waiter key is qk. Caller holds v.mu.
func (v *lineView) localAt(qk string) []*durable {
	var out []*durable
	for d := range v.waiters {
		if d.qk == qk {
			out = append(out, d)
		}
	}
	return out
}

// localLocked is every local waiter. Caller holds v.mu.
func (v *lineView) localLocked() []*durable {
	out := make([]*durable, 0, len(v.waiters))
	for d := range v.waiters {
		out = append(out, d)
	}
	return out
}

// headLocked is the waiter with the lowest create revision (nil: none).
func (v *lineView) headLocked() *mvccpb.KeyValue {
	var h *mvccpb.KeyValue
	for _, kv := range v.line {
		if h == nil || kv.CreateRevision < h.CreateRevision {
			h = kv
		}
	}
	return h
}

// nextLocked is the waiter right behind qk (nil: none, or qk unknown).
func (v *lineView) nextLocked(qk string) *mvccpb.KeyValue {
	at, ok := v.line[qk]
	if !ok {
		return nil
	}
	var n *mvccpb.KeyValue
	for _, kv := range v.line {
		if kv.CreateRevision > at.CreateRevision && (n == nil || kv.CreateRevision < n.CreateRevision) {
			n = kv
		}
	}
	return n
}

// glance is what the view says about the waiter at pos: who is ahead of
// it, whether its key is there, who holds the key, at which revision. ok
// is false before the first read.
func (v *lineView) glance(pos linePos) (att attempt, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ready {
		return attempt{}, false
	}
	att.rev = v.rev
	att.own = v.line[pos.qk]
	if att.own == nil && v.rev < pos.rev {
		// The view has not caught up with the waiter's own join yet; it
		// wakes the waiter when it does.
		att.own = &mvccpb.KeyValue{Key: []byte(pos.qk), CreateRevision: pos.rev}
	}
	for _, kv := range v.line {
		if kv.CreateRevision < pos.rev && (att.ahead == nil || kv.CreateRevision > att.ahead.CreateRevision) {
			att.ahead = kv
		}
	}
	if v.hold != nil {
		if h, err := decodeHold(v.hold); err == nil {
			att.holder, att.holderLease, att.holderModRev = h, v.hold.Lease, v.hold.ModRevision
		}
	}
	return att, true
}

// head is the view's head of the line, for a release to hand the key to
// (nil: no view, not read yet, or nobody in line). last picks the last
// waiter instead: only the deliberately broken build does (brokenLineOrder).
func (dl *durableLine) head(key string, last bool) *mvccpb.KeyValue {
	v := dl.view(key)
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ready {
		return nil
	}
	if last {
		var t *mvccpb.KeyValue
		for _, kv := range v.line {
			if t == nil || kv.CreateRevision > t.CreateRevision {
				t = kv
			}
		}
		return t
	}
	return v.headLocked()
}

// handTo gives the grant a release on this arbiter just handed over to the
// durable waiter qk of key, when that waiter waits here; others learn of
// it from their line view's watch.
func (dl *durableLine) handTo(key, qk string, g Grant) {
	tok, err := token.Pack(g.Epoch, g.Revision)
	if err != nil {
		return // the waiter finds its hold by itself, and fails the same way
	}
	g.Token = tok
	v := dl.view(key)
	if v == nil {
		return
	}
	v.mu.Lock()
	to := v.localAt(qk)
	v.mu.Unlock()
	for _, d := range to {
		select {
		case d.handed <- g:
		default:
		}
	}
}
