package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// Durable fairness (a class with fairness: durable).
//
// A waiter is a key under the key's durable line, /q/<key>#<session>, on
// the waiter's session lease; its create revision is its place in line. The
// head is the waiter with the lowest create revision, and only the head is
// granted: its grant transaction compares that its own waiter key is the one
// it created and that no waiter key of the key was created before it, and
// deletes its waiter key with the hold's put. Every other grant of the key,
// of any class, compares the line empty (tryGrant, handoff). So a waiter
// that is not head is never granted, whichever arbiter serves it and across
// arbiter restarts.
//
// A waiter that is not head watches only its predecessor's key; the head
// watches the hold. Both also poll every PollInterval (with jitter): a
// watch is a hint. A waiter whose session dies leaves the line with its
// lease. One whose caller gave up leaves it at once; one whose arbiter shut
// down or died keeps its place, so a caller that asks again on the same
// session (the Go client does, within its wait) resumes it. A waiter
// abandoned by a caller that is still alive is removed by the waiter behind
// it once its recorded deadline is staleWaiterGrace behind the remover's
// clock: clocks decide only when a stale waiter goes, never a grant.
//
// The cost: a waiter's put and the delete in its grant are two writes more
// than a best-effort grant, and a grant of a key with durable waiters is
// never handed over in the release's own transaction.

// staleWaiterGrace is how long past its recorded deadline a waiter must be
// before another waiter removes it.
const staleWaiterGrace = 30 * time.Second

// acquireDurable is Acquire's wait for a durable class, after the caller's
// checks: the first attempt, then a place in line until granted.
func (a *Arbiter) acquireDurable(ctx context.Context, req AcquireRequest, cls *class.Class, ttl time.Duration) (Grant, error) {
	d := &durable{a: a, req: req, class: cls.Namespace + "/" + cls.Name, ttl: ttl, qk: keyspace.QueueKey(req.Key, req.Session)}
	att, err := d.attempt(ctx, linePos{})
	if err != nil {
		return Grant{}, a.sessionGone(req.Session, err)
	}
	if att.granted {
		return a.releaseIfGone(ctx, req, att.grant)
	}
	if g, mine, err := a.classify(att, req.Caller.String(), req.Session); mine || err != nil {
		d.leave(att.own)
		return g, err
	}
	if att.own != nil {
		// Already in line (a wait cut short by an arbiter restart, or an
		// earlier request): this request resumes that place.
		d.pos = linePos{qk: d.qk, rev: att.own.CreateRevision}
		if req.Wait == 0 {
			att, err = d.attempt(ctx, d.pos)
			if err != nil {
				return Grant{}, a.sessionGone(req.Session, err)
			}
			if att.granted {
				return a.releaseIfGone(ctx, req, att.grant)
			}
		}
	}
	if req.Wait == 0 {
		d.leave(att.own)
		if att.grace {
			return Grant{}, ErrEpochGrace
		}
		return Grant{}, ErrHeld
	}
	if err := a.countWaiter(req.Caller.String(), req.Key); err != nil {
		return Grant{}, err
	}
	defer a.uncountWaiter(req.Caller.String(), req.Key)
	a.metrics.waits.WithLabelValues(cls.Namespace, cls.Name).Inc()
	deadline := time.Now().Add(req.Wait)
	if err := d.join(ctx, att.own, deadline); err != nil {
		return Grant{}, a.sessionGone(req.Session, err)
	}
	return d.wait(ctx, deadline)
}

// durable is one Acquire's place in a durable line.
type durable struct {
	a     *Arbiter
	req   AcquireRequest
	class string
	ttl   time.Duration
	qk    string
	pos   linePos // zero until it has a place
	grace bool    // the last attempt was refused for an epoch grace
}

// attempt is one grant transaction at pos (a newcomer when pos is zero).
func (d *durable) attempt(ctx context.Context, pos linePos) (attempt, error) {
	val, at := d.a.encodeHold(d.req.Caller.String(), d.req.Session, d.class)
	return d.a.tryGrant(ctx, d.req.Key, val, d.req.Session, at, pos)
}

// join takes a place at the end of the line, or keeps own, the place the
// session already has (with its deadline moved to this request's).
func (d *durable) join(ctx context.Context, own *mvccpb.KeyValue, deadline time.Time) error {
	now := d.a.now()
	rec := keyspace.Waiter{Identity: d.req.Caller.String(), Session: d.req.Session, Class: d.class,
		QueuedAt: now.UnixNano(), Deadline: now.Add(time.Until(deadline)).UnixNano()}
	cmp := clientv3.Compare(clientv3.CreateRevision(d.qk), "=", 0)
	if own != nil {
		if old, err := keyspace.DecodeWaiter(own.Value); err == nil && old.QueuedAt != 0 {
			rec.QueuedAt = old.QueuedAt
		}
		cmp = clientv3.Compare(clientv3.CreateRevision(d.qk), "=", own.CreateRevision)
	}
	b, _ := json.Marshal(rec)
	cctx, cancel := d.a.callCtx(ctx)
	defer cancel()
	resp, err := d.a.cli.Txn(cctx).If(cmp).
		Then(clientv3.OpPut(d.qk, string(b), clientv3.WithLease(clientv3.LeaseID(d.req.Session)))).
		Else(clientv3.OpGet(d.qk)).Commit()
	if err != nil {
		return storeErr(ctx, err)
	}
	if _, err := d.a.checkHeader(resp.Header); err != nil {
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

// wait keeps the place until the head's transaction grants the key, the
// deadline passes, ctx ends or the arbiter closes.
func (d *durable) wait(ctx context.Context, deadline time.Time) (Grant, error) {
	a := d.a
	dl := time.NewTimer(time.Until(deadline))
	defer dl.Stop()
	for {
		if _, err := a.authorizeAcquire(d.req.Caller.String(), d.req.Key, d.class, d.ttl); err != nil {
			d.leave(nil)
			return Grant{}, err
		}
		att, err := d.attempt(ctx, d.pos)
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, ErrUnavailable) {
				// The store did not answer; keep the place and try again.
				if g, err, done := d.pause(ctx, dl, nil); done {
					return g, err
				}
				continue
			}
			d.leave(nil)
			return Grant{}, a.sessionGone(d.req.Session, err)
		}
		if att.granted {
			return a.releaseIfGone(ctx, d.req, att.grant)
		}
		if g, mine, err := a.classify(att, d.req.Caller.String(), d.req.Session); mine || err != nil {
			d.leave(att.own)
			return g, err
		}
		d.grace = att.grace
		if !ownAt(att.own, d.pos.rev) {
			// The place is gone: the session expired, or an epoch advance
			// emptied every line. Join again at the end (a session that is
			// gone cannot).
			a.log.Info("durable waiter lost its place; joining the line again", "key", d.req.Key, "session", d.req.Session)
			d.pos = linePos{}
			if err := d.join(ctx, nil, deadline); err != nil {
				return Grant{}, a.sessionGone(d.req.Session, err)
			}
			continue
		}
		watch, rev := holdKey(d.req.Key), att.rev
		if att.ahead != nil {
			if d.removeStale(ctx, att.ahead) {
				continue
			}
			watch = string(att.ahead.Key)
		}
		if g, err, done := d.pause(ctx, dl, &watchFrom{key: watch, rev: rev + 1}); done {
			return g, err
		}
	}
}

// watchFrom is a key whose delete wakes a waiter, from a revision on.
type watchFrom struct {
	key string
	rev int64
}

// pause waits for a delete of w's key (a hint), a poll tick, the deadline,
// ctx or the arbiter's close; done reports that the wait is over with g and
// err.
func (d *durable) pause(ctx context.Context, dl *time.Timer, w *watchFrom) (g Grant, err error, done bool) {
	a := d.a
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var events clientv3.WatchChan
	if w != nil && w.rev > 1 {
		events = a.cli.Watch(clientv3.WithRequireLeader(wctx), w.key, clientv3.WithRev(w.rev), clientv3.WithFilterPut())
	}
	poll := time.NewTimer(a.jitter())
	defer poll.Stop()
	select {
	case <-events:
	case <-poll.C:
	case <-dl.C:
		d.leave(nil)
		if d.grace {
			return Grant{}, fmt.Errorf("%w; the wait deadline passed first", ErrEpochGrace), true
		}
		return Grant{}, ErrWaitTimeout, true
	case <-ctx.Done():
		d.leave(nil)
		return Grant{}, ctx.Err(), true
	case <-a.draining:
		// Keep the place: a caller that asks again on this session, on
		// this lockd restarted or another, resumes it.
		return Grant{}, fmt.Errorf("%w: lockd is shutting down; acquire again (the place in line is kept)", ErrUnavailable), true
	}
	return Grant{}, nil, false
}

// leave gives up the caller's place in line: its waiter key (own, or the
// one at d.pos) is deleted if it is still the same one. Best effort and
// bounded: a key left behind goes with the session, or as a stale waiter.
func (d *durable) leave(own *mvccpb.KeyValue) {
	rev := d.pos.rev
	if own != nil {
		rev = own.CreateRevision
	}
	if rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.a.timeout)
	defer cancel()
	if _, err := d.a.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(d.qk), "=", rev)).
		Then(clientv3.OpDelete(d.qk)).Commit(); err != nil {
		d.a.log.Warn("could not leave a durable line; the waiter goes with its session", "session", d.req.Session, "err", err)
	}
	d.pos = linePos{}
}

// removeStale removes the waiter ahead when its caller abandoned it long
// ago (see staleWaiterGrace) and reports whether it did.
func (d *durable) removeStale(ctx context.Context, ahead *mvccpb.KeyValue) bool {
	w, err := keyspace.DecodeWaiter(ahead.Value)
	if err != nil || w.Deadline == 0 || d.a.now().Before(time.Unix(0, w.Deadline).Add(staleWaiterGrace)) {
		return false
	}
	cctx, cancel := d.a.callCtx(ctx)
	defer cancel()
	resp, err := d.a.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(string(ahead.Key)), "=", ahead.CreateRevision)).
		Then(clientv3.OpDelete(string(ahead.Key))).Commit()
	if err != nil || !resp.Succeeded {
		return false
	}
	d.a.log.Warn("removed a durable waiter abandoned by its caller", "key", d.req.Key, "session", w.Session, "identity", w.Identity,
		"deadline", time.Unix(0, w.Deadline))
	return true
}

// countWaiter counts a durable waiter of identity for key, against the
// identity's quota.
func (a *Arbiter) countWaiter(identity, key string) error {
	a.qmu.Lock()
	defer a.qmu.Unlock()
	if err := a.countWaiterLocked(identity); err != nil {
		return err
	}
	a.durableHere[key]++
	return nil
}

// countWaiterLocked counts a waiter of identity against its quota; the
// caller holds a.qmu.
func (a *Arbiter) countWaiterLocked(identity string) error {
	if n := a.waiters[identity]; n >= a.maxWaiters {
		return fmt.Errorf("%w: %s has %d waiters queued on this lockd (limit %d, --max-waiters-per-identity); "+
			"wait for fewer keys at once", ErrQuota, identity, n, a.maxWaiters)
	}
	a.waiters[identity]++
	return nil
}

func (a *Arbiter) uncountWaiter(identity, key string) {
	a.qmu.Lock()
	defer a.qmu.Unlock()
	a.uncountWaiterLocked(identity)
	if a.durableHere[key]--; a.durableHere[key] <= 0 {
		delete(a.durableHere, key)
	}
}

func (a *Arbiter) uncountWaiterLocked(identity string) {
	if a.waiters[identity]--; a.waiters[identity] <= 0 {
		delete(a.waiters, identity)
	}
}
