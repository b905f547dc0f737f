package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// Durable fairness (a class with fairness: durable).
//
// A waiter is a key under the key's durable line, /q/<key>#<session>, on
// the waiter's session lease; its create revision is its place in line. The
// head is the waiter with the lowest create revision, and only the head is
// granted, always by a transaction that compares its waiter key's create
// revision and that no waiter key of the key was created before it, and
// deletes its waiter key with the hold's put: the release handing the key
// over (durableLine.handoff), or the head's own attempt when the key is free.
// Every other grant of the key, of any class, compares the line empty
// (tryGrant, the best-effort handoff). So a waiter that is not head is
// never granted, whichever arbiter serves it and across arbiter restarts.
//
// A newcomer that will wait joins the line in its refused attempt's own
// transaction. Each arbiter keeps one view of a key's line and hold for the
// waiters it serves (lineview.go); it wakes a waiter when the one ahead of
// it goes, the head when the hold goes, and any waiter whose own key goes;
// waiters also poll every PollInterval (with jitter). Nothing the view shows
// is acted on but "keep waiting": anything else is read again linearizably.
// A waiter whose session dies leaves the line with its lease. One whose
// caller gave up leaves it at once; one whose arbiter drained or died keeps
// its place, so a caller that asks again on the same session (the Go client
// does, within its wait) resumes it. A waiter abandoned by a caller that is
// still alive is removed by the waiter behind it once its recorded deadline
// is staleWaiterGrace behind the remover's clock: clocks decide only when a
// stale waiter goes, never a grant.
//
// The cost: one write per waiter more than a best-effort grant (joining;
// it leaves in its grant's transaction, or with one more write if it gives
// up), and the head compare reads the whole line in etcd's apply.

// staleWaiterGrace is how long past its recorded deadline a waiter must be
// before another waiter removes it.
const staleWaiterGrace = 30 * time.Second

// durableLine is the line whose order is kept in etcd: each waiter has a
// key in the line, and a grant compares that it is the head. It keeps, per
// key, a view of the line for the waiters it serves here (lineview.go).
type durableLine struct {
	a *Arbiter
	c *cell

	mu    sync.Mutex
	views map[string]*lineView // by lock key (mu)
}

func newDurableLine(a *Arbiter, c *cell) *durableLine {
	return &durableLine{a: a, c: c, views: map[string]*lineView{}}
}

// acquire is an Acquire of a key of a durable class: the first attempt
// (which, for a caller that will wait, joins the line in the same
// transaction when refused), then a place in line until granted.
func (dl *durableLine) acquire(ctx context.Context, req AcquireRequest, cls *class.Class) (Grant, error) {
	a := dl.a
	c := dl.c
	sess, err := a.sessionFor(ctx, c, req, cls)
	if err != nil {
		return Grant{}, err
	}
	ttl := sess.ttl
	d := &durable{a: a, c: dl.c, req: req, cls: cls, ttl: ttl, qk: keyspace.QueueKey(req.Key, req.Session)}
	deadline := time.Now().Add(req.Wait)
	first := linePos{}
	if req.Wait > 0 {
		if err := a.waiters.take(req.Caller.String()); err != nil {
			return Grant{}, err
		}
		defer a.waiters.give(req.Caller.String())
		first.join = d.record(nil, deadline)
	}
	att, err := d.attempt(ctx, first)
	if err != nil {
		return Grant{}, a.sessionGone(c, req.Session, err)
	}
	if att.granted {
		return c.releaseIfGone(ctx, req, att.grant)
	}
	if att.own != nil {
		d.pos = linePos{qk: d.qk, rev: att.own.CreateRevision}
	}
	if g, mine, err := a.classify(att, req.Caller.String(), req.Session); mine || err != nil {
		if att.own != nil {
			d.leave() // the hold is the session's (or a leak): it needs no place in line
		}
		return g, err
	}
	if req.Wait == 0 {
		if d.pos.qk != "" {
			// In line from an earlier request: its own try at that place.
			if att, err = d.attempt(ctx, d.pos); err != nil {
				return Grant{}, a.sessionGone(c, req.Session, err)
			}
			if att.granted {
				return c.releaseIfGone(ctx, req, att.grant)
			}
		}
		if g, held := d.leave(); held {
			return c.releaseIfGone(ctx, req, g) // handed over just now
		}
		if att.grace != nil {
			return Grant{}, att.grace
		}
		return Grant{}, ErrHeld
	}
	c.metrics.waits.WithLabelValues(cls.Namespace, cls.Name).Inc()
	if !att.joined {
		// Resuming a place this session already had: move its deadline.
		if err := d.join(ctx, att.own, deadline); err != nil {
			return Grant{}, a.sessionGone(c, req.Session, err)
		}
	}
	return d.wait(ctx, deadline)
}

// durable is one Acquire's place in a durable line.
type durable struct {
	a     *Arbiter
	c     *cell
	req   AcquireRequest
	cls   *class.Class // the key's class at the last attempt
	ttl   time.Duration
	qk    string
	pos   linePos // zero until it has a place
	grace error   // the last attempt was refused for a grace (ErrEpochGrace, ErrOpenGrace)
	// handed receives the key from a release on this arbiter that handed
	// it over (durableLine.handoff); wake is signalled by the key's line view.
	handed chan Grant
	wake   chan struct{}
	view   *lineView
}

// attempt is one grant transaction at pos (a newcomer when pos is zero).
func (d *durable) attempt(ctx context.Context, pos linePos) (attempt, error) {
	return d.c.tryGrant(ctx, d.req.Key, d.a.encodeHold(d.req.Caller.String(), d.req.Session, d.cls), d.req.Session, pos)
}

// record is the caller's waiter record, with its wait's deadline; own is
// its existing waiter key, whose joining time is kept.
func (d *durable) record(own *mvccpb.KeyValue, deadline time.Time) string {
	now := d.a.now()
	rec := keyspace.Waiter{Identity: d.req.Caller.String(), Session: d.req.Session, Class: d.cls.Ref(),
		QueuedAt: now.UnixNano(), Deadline: now.Add(time.Until(deadline)).UnixNano()}
	if own != nil {
		if old, err := keyspace.DecodeWaiter(own.Value); err == nil && old.QueuedAt != 0 {
			rec.QueuedAt = old.QueuedAt
		}
	}
	b, _ := json.Marshal(rec)
	return string(b)
}

// join takes a place at the end of the line, or keeps own, the place the
// session already has (with its deadline moved to this request's).
func (d *durable) join(ctx context.Context, own *mvccpb.KeyValue, deadline time.Time) error {
	cmp := clientv3.Compare(clientv3.CreateRevision(d.qk), "=", 0)
	if own != nil {
		cmp = clientv3.Compare(clientv3.CreateRevision(d.qk), "=", own.CreateRevision)
	}
	cctx, cancel := d.c.callCtx(ctx)
	defer cancel()
	resp, err := d.c.cli.Txn(cctx).If(cmp).
		Then(clientv3.OpPut(d.qk, d.record(own, deadline), clientv3.WithLease(clientv3.LeaseID(d.req.Session)))).
		Else(clientv3.OpGet(d.qk)).Commit()
	if err != nil {
		return storeErr(ctx, err)
	}
	if _, err := d.c.checkHeader(resp.Header); err != nil {
		return err
	}
	switch {
	case resp.Succeeded && own != nil:
		d.pos = linePos{qk: d.qk, rev: own.CreateRevision}
	case resp.Succeeded:
		d.pos = linePos{qk: d.qk, rev: resp.Header.Revision}
	case len(resp.Responses[0].GetResponseRange().Kvs) > 0:
		// Another request of the session joined first: share its place.
		d.pos = linePos{qk: d.qk, rev: resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision}
	default:
		return fmt.Errorf("%w: waiter key %s kept changing", ErrUnavailable, d.qk)
	}
	return nil
}

// wait keeps the place until the key is granted (by its own transaction
// as head, or handed over by a release), the deadline passes, ctx ends or
// the arbiter drains. Each round reads first and writes only when the
// waiter is head and the key is free.
func (d *durable) wait(ctx context.Context, deadline time.Time) (Grant, error) {
	a := d.a
	c := d.c
	d.handed, d.wake = make(chan Grant, 1), make(chan struct{}, 1)
	d.view = c.durables.register(d)
	defer d.view.drop(d)
	dl := time.NewTimer(time.Until(deadline))
	defer dl.Stop()
	for {
		cls, err := a.authorizeAcquire(d.req.Caller.String(), d.req.Key, "", d.ttl)
		if err != nil {
			return d.quit(ctx, err)
		}
		d.cls = cls // a grant records the key's class when it is made
		// The view only ever says "wait": it may be behind the store, so
		// nothing it shows is acted on. Anything else is read again,
		// linearizably (look), and a grant is a transaction or that read.
		if glance, ok := d.view.glance(d.pos); ok && glance.stillWaiting(d) {
			if glance.ahead != nil && d.removeStale(ctx, glance.ahead) {
				continue
			}
			if g, err, done := d.pause(ctx, dl); done {
				return g, err
			}
			continue
		}
		att, err := c.look(ctx, d.req.Key, d.req.Session, d.pos, openGraced(d.cls))
		if err == nil && att.ahead == nil && att.holderLease == 0 && att.grace == nil && ownAt(att.own, d.pos.rev) {
			att, err = d.attempt(ctx, d.pos) // head, and free
		}
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(err, ErrUnavailable):
			// The store did not answer; keep the place and try again.
		case err != nil:
			return d.quit(ctx, a.sessionGone(c, d.req.Session, err))
		case att.granted:
			return c.releaseIfGone(ctx, d.req, att.grant)
		default:
			if g, mine, err := a.classify(att, d.req.Caller.String(), d.req.Session); mine || err != nil {
				// Mine: a release handed the key over (or an earlier
				// attempt's answer was lost); the waiter key went with it.
				if err != nil {
					return d.quit(ctx, err)
				}
				return c.releaseIfGone(ctx, d.req, g)
			}
			d.grace = att.grace
			if !ownAt(att.own, d.pos.rev) {
				// The place is gone: the session expired, or an epoch
				// advance emptied every line. Join again at the end (a
				// session that is gone cannot).
				c.log.Info("durable waiter lost its place; joining the line again", "key", d.req.Key, "session", d.req.Session)
				d.pos = linePos{}
				if err := d.join(ctx, nil, deadline); err != nil {
					return Grant{}, a.sessionGone(c, d.req.Session, err)
				}
				continue
			}
			if att.ahead != nil && d.removeStale(ctx, att.ahead) {
				continue
			}
			// The line view wakes it when the waiter ahead goes (or, for
			// the head, the hold), or its own key: a release handing the
			// key over deletes it.
		}
		if g, err, done := d.pause(ctx, dl); done {
			return g, err
		}
	}
}

// stillWaiting reports whether att, the line view's glance, shows d's
// place intact, the key not held by d's session or identity, and another
// waiter ahead or another holder: nothing to do but wait to be woken.
func (att attempt) stillWaiting(d *durable) bool {
	if !ownAt(att.own, d.pos.rev) || att.holderLease == d.req.Session || att.holder.Identity == d.req.Caller.String() {
		return false
	}
	return att.ahead != nil || att.holderLease != 0
}

// pause waits for the key handed over by a release on this arbiter, a
// wake from the line view (a hint), a poll tick, the deadline, ctx or the
// arbiter's drain; done reports that the wait is over with g and err.
func (d *durable) pause(ctx context.Context, dl *time.Timer) (g Grant, err error, done bool) {
	a := d.a
	poll := time.NewTimer(a.jitter())
	defer poll.Stop()
	select {
	case g := <-d.handed:
		g, err := d.c.releaseIfGone(ctx, d.req, g)
		return g, err, true
	case <-d.wake:
		select {
		case g := <-d.handed: // both came: the grant first
			g, err := d.c.releaseIfGone(ctx, d.req, g)
			return g, err, true
		default:
		}
	case <-poll.C:
	case <-dl.C:
		err := ErrWaitTimeout
		if d.grace != nil {
			err = fmt.Errorf("%w; the wait deadline passed first", d.grace)
		}
		g, err := d.quit(ctx, err)
		return g, err, true
	case <-ctx.Done():
		g, err := d.quit(ctx, ctx.Err())
		return g, err, true
	case <-a.draining:
		// Keep the place: a caller that asks again on this session, on
		// this lockd restarted or another, resumes it.
		return Grant{}, fmt.Errorf("%w: lockd is shutting down; acquire again (the place in line is kept)", ErrUnavailable), true
	}
	return Grant{}, nil, false
}

// quit leaves the line with err. If a release handed the key over
// meanwhile, the waiter holds it: with its wait merely over (the deadline
// raced the handoff) it gets the grant; otherwise the hold is released.
func (d *durable) quit(ctx context.Context, err error) (Grant, error) {
	g, held := d.leave()
	if !held {
		return Grant{}, err
	}
	if errors.Is(err, ErrWaitTimeout) || errors.Is(err, ErrEpochGrace) {
		return d.c.releaseIfGone(ctx, d.req, g)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.c.timeout)
	defer cancel()
	if _, rerr := d.c.release(rctx, d.req.Session, d.req.Key, g.Token); rerr != nil {
		d.c.log.Warn("could not release a hold handed to a waiter that left; it ends with its session", "session", d.req.Session, "err", rerr)
	}
	return Grant{}, err
}

// leave gives up the caller's place in line: its waiter key at d.pos is
// deleted if it is still the same one. When it is not, a release may have
// handed the key over with it: held reports that, with the grant. Best
// effort and bounded: a key left behind goes with the session, or as a
// stale waiter.
func (d *durable) leave() (g Grant, held bool) {
	if d.pos.rev == 0 {
		return Grant{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.c.timeout)
	defer cancel()
	st := d.c.epoch.Load()
	start := time.Now()
	resp, err := d.c.kv.Txn(ctx, etcdop.Request([]*pb.Compare{etcdop.Created(d.qk, pb.Compare_EQUAL, d.pos.rev)},
		[]*pb.RequestOp{etcdop.Delete(d.qk)}, holdReads(holdKey(d.req.Key), openGraced(d.cls), false)))
	d.pos = linePos{}
	if err != nil {
		d.c.log.Warn("could not leave a durable line; the waiter goes with its session", "session", d.req.Session, "err", err)
		return Grant{}, false
	}
	// The answer is checked like every other: a hold read from a restored
	// store may be one this session released before the restore.
	if _, err := d.c.checkHeader(resp.Header); err != nil || resp.Succeeded || st.sealed {
		return Grant{}, false
	}
	att, res, err := d.c.readOutcome(resp, st, start, false)
	if err != nil || res != found {
		return Grant{}, false
	}
	g, mine, _ := d.a.classify(att, d.req.Caller.String(), d.req.Session)
	return g, mine
}

// removeStale removes the waiter ahead when its caller abandoned it long
// ago (see staleWaiterGrace) and reports whether it did.
func (d *durable) removeStale(ctx context.Context, ahead *mvccpb.KeyValue) bool {
	w, err := keyspace.DecodeWaiter(ahead.Value)
	if err != nil || w.Deadline == 0 || d.a.now().Before(time.Unix(0, w.Deadline).Add(staleWaiterGrace)) {
		return false
	}
	cctx, cancel := d.c.callCtx(ctx)
	defer cancel()
	resp, err := d.c.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(string(ahead.Key)), "=", ahead.CreateRevision)).
		Then(clientv3.OpDelete(string(ahead.Key))).Commit()
	if err != nil || !resp.Succeeded {
		return false
	}
	d.c.log.Warn("removed a durable waiter abandoned by its caller", "key", d.req.Key, "session", w.Session, "identity", w.Identity,
		"deadline", time.Unix(0, w.Deadline))
	return true
}

// handoff, when key has durable waiters, releases the hold matching
// cmp and grants the key to the head of the line in the same transaction:
// the head's hold is put on its session's lease and its waiter key is
// deleted, comparing that it is still the head. The head is taken from
// this arbiter's view of the line, kept for the waiters it serves (nothing
// is read on a release of a key none of whose waiters is served here); the
// transaction's compares decide. done is false when there was nobody in
// line to hand to (or the line kept changing); the caller then releases as
// usual.
func (dl *durableLine) handoff(ctx context.Context, key, hk string, cmp []*pb.Compare, st *epochState, session, rev int64) (done bool, err error) {
	qr := keyspace.QueueRange(key)
	first := pb.RangeRequest_ASCEND // the head: the waiter created first
	if brokenLineOrder {
		first = pb.RangeRequest_DESCEND
	}
	a := dl.a
	c := dl.c
	head := dl.head(key, brokenLineOrder)
	if head == nil {
		// No waiter of the key's line is served here (with key-affine
		// routing, none is anywhere): release as usual. A head waiting
		// on another arbiter sees the hold go and tries its own grant.
		return false, nil
	}
	for range 3 {
		w, err := keyspace.DecodeWaiter(head.Value)
		if err != nil {
			return false, nil
		}
		cls, err := a.authorizeAcquire(w.Identity, key, "", 0)
		if err != nil {
			return false, nil // its own arbiter tells it, and it leaves the line
		}
		if openGraced(cls) {
			return false, nil // granted only by its own transaction (recovery.go)
		}
		fence, fenced, err := c.fence(key, cls)
		if err != nil {
			return false, nil // homed to another shard now: release as usual; the head hears MOVING
		}
		h := a.encodeHold(w.Identity, head.Lease, cls)
		hq := string(head.Key)
		cctx, cancel := c.txnCtx(ctx)
		headCmps := []*pb.Compare{etcdop.Created(hq, pb.Compare_EQUAL, head.CreateRevision),
			etcdop.WithPrefix(etcdop.Created(qr, pb.Compare_GREATER, head.CreateRevision-1))}
		if brokenLineOrder {
			headCmps = headCmps[:1]
		}
		var fenceReads []*pb.RequestOp
		if fenced {
			headCmps, fenceReads = append(headCmps, fence.Cmps()...), fence.Reads()
		}
		tr, err := c.kv.Txn(cctx, etcdop.Request(append(slices.Clip(cmp), headCmps...),
			[]*pb.RequestOp{etcdop.Put(hk, h.val, head.Lease), etcdop.Delete(hq)},
			append([]*pb.RequestOp{etcdop.Get(hk), etcdop.Get(epochKey), etcdop.FirstCreated(qr, first, 0)}, fenceReads...)))
		cancel()
		if err != nil {
			return true, storeErr(ctx, err)
		}
		if _, err := c.checkHeader(tr.Header); err != nil {
			return true, err
		}
		if tr.Succeeded {
			dl.handTo(key, hq, h.grant(0, st.epoch, tr.Header.Revision))
			return true, nil
		}
		if c.fenceRefused(fence, fenced, tr) != nil {
			return false, nil // the range is moving: release as usual
		}
		holds, eps := tr.Responses[0].GetResponseRange().Kvs, tr.Responses[1].GetResponseRange().Kvs
		line := tr.Responses[2].GetResponseRange().Kvs
		if len(holds) == 0 || holds[0].ModRevision != rev || holds[0].Lease != session ||
			len(eps) == 0 || eps[0].ModRevision != st.modRev || len(line) == 0 {
			return false, nil // the release's own compares, or an empty line: release as usual
		}
		head = line[0] // the line moved: hand to its head now
	}
	return false, nil
}
