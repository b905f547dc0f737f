package arbiter

// The open posture: what an arbiter does for a class with onQuorumLoss: open
// while it cannot reach an etcd quorum.
//
// The arbiter counts itself without a quorum once its last linearizable
// read of the epoch record (one every EpochRefresh) is older than
// OpenAfter, which must be longer than an etcd election. From then on:
//
//   - A class that is closed on quorum loss (every correctness and fenced
//     class, and the default) is refused at once with ErrUnavailable.
//   - OpenSession opens a local session: an ID only this arbiter knows
//     (negative, so it can never be an etcd lease), kept alive by this
//     arbiter's clock alone.
//   - Acquire of an open class on a local session is granted from memory:
//     one holder per key on this arbiter, no line and no fairness. The
//     grant is appended to the spool and fsynced before it is answered. Its
//     token is 0, which every fence rejects; the answer says unprotected,
//     with this arbiter's ID and the grant's spool sequence number. Other
//     arbiters, and the etcd majority if there is one somewhere, know
//     nothing of it: the key may be held by someone else at the same time.
//
// When a linearizable read succeeds again, the arbiter recovers: it stops
// granting open, ends every local session (their keepalives are answered
// with TTL zero and unprotected_ended, so holders learn their unprotected
// holds are gone), ships the spool to etcd under /sys/unprotected/ (put if
// absent, once per arbiter ID and sequence number, so shipping again after
// a crash changes nothing; the audit tailer makes each a history row with
// unprotected=true), empties it, and only then serves open classes from
// etcd again. No unprotected hold carries over into the consensus world.
// A spool left unshipped by a crash is shipped when the arbiter starts.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/spool"
)

// MinOpenAfter is the shortest OpenAfter accepted: it must outlast an etcd
// election (1s by default), or a leader change would open the posture.
const MinOpenAfter = 2 * time.Second

// DefaultOpenAfter is OpenAfter's default.
const DefaultOpenAfter = 15 * time.Second

// posture is where an arbiter with a spool stands.
type posture int

const (
	// postureQuorum: grants are transactions in etcd.
	postureQuorum posture = iota
	// postureOpen: no quorum for OpenAfter; open classes are granted from
	// memory, closed ones refused.
	postureOpen
	// postureRecovering: quorum returned; the spool is being shipped.
	// Open classes are refused until it is, closed ones served from etcd.
	postureRecovering
)

func (p posture) String() string {
	return [...]string{"quorum", "open", "recovering"}[p]
}

// openHold is an unprotected hold: a key granted from memory.
type openHold struct {
	session  int64
	identity string
	class    string // "namespace/name"
	seq      uint64 // 0 while its spool append is in flight
	at       time.Time
}

// openState is the arbiter's open posture (nil without a spool).
type openState struct {
	a     *Arbiter
	after time.Duration
	id    string
	sp    *spool.Spool

	// posture is read without mu (every Acquire reads it) and written
	// under it.
	posture   atomic.Int32
	mu        sync.Mutex
	holds     map[string]*openHold // lock key -> hold (mu)
	appends   int                  // spool appends in flight (mu)
	unshipped bool                 // the spool has entries to ship (mu)
	// localOpened counts the local sessions opened since the last open
	// grace was written, and maxLocalTTL is their longest TTL (mu): an
	// outage that opened none needs no grace (recovery.go).
	localOpened int
	maxLocalTTL time.Duration
	// changed is closed (and replaced) when a hold ends or the posture
	// changes: waiters look again.
	changed chan struct{}
}

func newOpenState(a *Arbiter, after time.Duration, id string, sp *spool.Spool, unshipped bool) *openState {
	return &openState{a: a, after: after, id: id, sp: sp, holds: map[string]*openHold{},
		unshipped: unshipped, changed: make(chan struct{})}
}

func (o *openState) load() posture { return posture(o.posture.Load()) }

// set moves the posture (mu held).
func (o *openState) set(p posture) { o.posture.Store(int32(p)) }

// signalLocked wakes everyone waiting on changed.
func (o *openState) signalLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// isLocal reports whether a session ID is a local session's: etcd lease IDs
// are positive.
func isLocal(id int64) bool { return id < 0 }

// Posture reports "quorum", "open" or "recovering" ("quorum" without a
// spool), for status pages and tests.
func (a *Arbiter) Posture() string { return a.home.posture() }

// posture is the cell's posture's name.
func (c *cell) posture() string {
	if c.open == nil {
		return postureQuorum.String()
	}
	return c.open.load().String()
}

// noQuorumFor is how long the store has certainly been without a quorum:
// the time since the first epoch read that failed after the last that
// succeeded came back (zero while reads succeed). The outage began before
// that failure was seen, so it has lasted at least this long; measuring
// from the last success instead would count time the store may have been
// fine.
func (c *cell) noQuorumFor() time.Duration {
	since := c.readsFailing.Load()
	if since == 0 {
		return 0
	}
	return time.Since(c.monoBase) - time.Duration(since)
}

// noteEpochRead records the outcome of a linearizable epoch read for
// noQuorumFor.
func (c *cell) noteEpochRead(err error) {
	if err == nil {
		if c.readsFailing.Swap(0) != 0 {
			// Quorum is back here; another arbiter may not have seen it yet
			// (recovery.go).
			c.holdOff(c.detectionBound())
		}
		return
	}
	c.readsFailing.CompareAndSwap(0, int64(time.Since(c.monoBase))+1)
}

// postureLoop moves the posture with the age of the last epoch read.
func (a *Arbiter) postureLoop(ctx context.Context) {
	tick := time.NewTicker(max(a.home.refresh/2, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.stepPosture(ctx)
	}
}

func (a *Arbiter) stepPosture(ctx context.Context) {
	o := a.home.open
	// Quorum is back once a read has succeeded since the failures began
	// (which clears them), not merely when the last good read is recent:
	// failures that come fast could open the posture within maxEpochAge of
	// that read, and it would flap.
	age := a.home.noQuorumFor()
	fresh := age == 0 && time.Since(a.home.epoch.Load().readAt) <= a.home.maxEpochAge
	o.mu.Lock()
	p, unshipped := o.load(), o.unshipped
	switch {
	case p == postureQuorum && age > o.after && !a.Sealed():
		o.set(postureOpen)
		o.signalLocked()
		o.mu.Unlock()
		a.metrics.openPosture.WithLabelValues(a.home.name).Set(1)
		a.log.Warn("no etcd quorum: open posture on; classes with onQuorumLoss: open are granted from memory, unprotected (token 0), and spooled; closed classes are refused",
			"no_quorum_for", age.Round(time.Millisecond).String(), "open_after", o.after.String(), "arbiter", o.id)
		return
	case p == postureOpen && fresh:
		o.set(postureRecovering)
		o.signalLocked()
		o.mu.Unlock()
		a.log.Warn("etcd quorum returned: ending local sessions and shipping unprotected grants to the history", "arbiter", o.id)
		a.endLocalSessions()
		return
	case p == postureOpen:
		o.mu.Unlock()
		a.expireLocalSessions()
		return
	case p == postureRecovering || (p == postureQuorum && unshipped && fresh):
		o.mu.Unlock()
		if err := a.writeOpenGrace(ctx); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("writing the open grace failed; retrying (open classes stay refused until it is written)", "err", err)
			}
			return
		}
		n, err := a.shipSpool(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("shipping unprotected grants failed; retrying (open classes stay refused until they are shipped)", "err", err)
			}
			return
		}
		o.mu.Lock()
		o.set(postureQuorum)
		o.unshipped = false
		o.signalLocked()
		o.mu.Unlock()
		a.metrics.openPosture.WithLabelValues(a.home.name).Set(0)
		if n > 0 || p == postureRecovering {
			a.log.Info("unprotected grants shipped to the history; normal grants resume", "shipped", n, "arbiter", o.id)
		}
		return
	}
	o.mu.Unlock()
}

// openSessionLocal opens a session without etcd, while the posture is open.
func (a *Arbiter) openSessionLocal(who, ns string, ttl time.Duration) (int64, error) {
	now := a.now()
	info := &sessionInfo{identity: who, ttl: ttl, namespace: ns, openedAt: now, openedHere: true, local: true}
	info.lastKA.Store(now.UnixNano())
	for {
		info.id = -rand.Int64N(1<<62) - 1
		if _, taken := a.sessions.LoadOrStore(info.id, info); !taken {
			break
		}
	}
	a.home.noteTTL(ttl)
	a.home.open.mu.Lock()
	a.home.open.localOpened++
	a.home.open.maxLocalTTL = max(a.home.open.maxLocalTTL, ttl)
	a.home.open.mu.Unlock()
	a.metrics.sessionsOpened.WithLabelValues(ns).Inc()
	a.log.Warn("local session opened without quorum (its holds are unprotected and end when quorum returns)", "session", info.id, "identity", who, "ttl", ttl.String())
	return info.id, nil
}

// keepLocal renews a local session by this arbiter's clock; one that
// already lapsed, or whose posture ended, is gone.
func (a *Arbiter) keepLocal(s *sessionInfo) (*KeepAliveAnswer, error) {
	if a.localExpired(s) || !a.openPosture() {
		a.dropLocalSession(s.id)
		return nil, ErrSessionNotFound
	}
	s.lastKA.Store(a.now().UnixNano())
	return &KeepAliveAnswer{Session: s.id, TTL: s.ttl, Epoch: a.home.epoch.Load().epoch}, nil
}

// servesOpen reports whether the arbiter is in its open posture with a
// class open on quorum loss to serve: then it is ready for traffic (Ready),
// or a load balancer that follows readiness would take every lockd out of
// service in the outage the class owner chose to be served through.
func (a *Arbiter) servesOpen() bool {
	if !a.openPosture() {
		return false
	}
	for _, c := range a.policy.Load().Classes.Classes() {
		if c.OnQuorumLoss == class.QuorumLossOpen {
			return true
		}
	}
	return false
}

// openPosture reports whether the arbiter grants open classes from memory
// now.
func (a *Arbiter) openPosture() bool {
	if a.home.open == nil {
		return false
	}
	return a.home.open.load() == postureOpen
}

// localExpired reports whether a local session has gone a TTL without a
// keepalive, by this arbiter's clock.
func (a *Arbiter) localExpired(s *sessionInfo) bool {
	return a.now().Sub(time.Unix(0, s.lastKA.Load())) >= s.ttl
}

// expireLocalSessions ends local sessions that missed their keepalives.
func (a *Arbiter) expireLocalSessions() {
	a.sessions.Range(func(k, v any) bool {
		if s := v.(*sessionInfo); s.local && a.localExpired(s) {
			a.dropLocalSession(s.id)
		}
		return true
	})
}

// endLocalSessions ends every local session and unprotected hold; it waits
// for spool appends in flight, so that every grant answered is in the
// spool that is shipped next.
func (a *Arbiter) endLocalSessions() {
	o := a.home.open
	for {
		o.mu.Lock()
		if o.appends == 0 {
			n := len(o.holds)
			clear(o.holds)
			o.signalLocked()
			o.mu.Unlock()
			if n > 0 {
				a.log.Warn("unprotected holds ended: quorum returned", "holds", n)
			}
			break
		}
		o.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	a.sessions.Range(func(k, v any) bool {
		if v.(*sessionInfo).local {
			a.forgetSession(k.(int64))
		}
		return true
	})
}

// dropLocalSession ends a local session and its unprotected holds.
func (a *Arbiter) dropLocalSession(id int64) {
	a.forgetSession(id)
	o := a.home.open
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, h := range o.holds {
		if h.session == id {
			delete(o.holds, k)
		}
	}
	o.signalLocked()
}

// localSession returns a live local session owned by identity.
func (a *Arbiter) localSession(identity string, id int64) (*sessionInfo, error) {
	v, ok := a.sessions.Load(id)
	if !ok || v.(*sessionInfo).identity != identity {
		return nil, fmt.Errorf("%w (a session opened without quorum ends when quorum returns)", ErrSessionNotFound)
	}
	s := v.(*sessionInfo)
	if a.localExpired(s) {
		a.dropLocalSession(id)
		return nil, ErrSessionNotFound
	}
	return s, nil
}

// serves reports whether the open posture decides req: it grants it from
// memory (true), or refuses it (an error); false when the request goes the
// normal way, to etcd.
func (o *openState) serves(req AcquireRequest, cls *class.Class) (bool, error) {
	p := o.load()
	if p == postureQuorum && !isLocal(req.Session) {
		return false, nil // the usual case: nothing to do here
	}
	open := cls.OnQuorumLoss == class.QuorumLossOpen || brokenOpenAll
	ref := cls.Ref()
	switch {
	case p == postureOpen && !open:
		return false, fmt.Errorf("%w: no etcd quorum for %s; class %s is closed on quorum loss, so nothing is granted until quorum returns",
			ErrUnavailable, o.a.home.noQuorumFor().Round(time.Second), ref)
	case p == postureOpen && !isLocal(req.Session):
		return false, fmt.Errorf("%w (class %s; session %d was opened in etcd)", ErrNoQuorumSession, ref, req.Session)
	case p == postureOpen:
		return true, nil
	case isLocal(req.Session):
		return false, fmt.Errorf("%w (a session opened without quorum ends when quorum returns)", ErrSessionNotFound)
	case p == postureRecovering && open:
		return false, fmt.Errorf("%w: etcd quorum has just returned; this lockd is shipping its unprotected grants to the history before it grants class %s again; retry shortly",
			ErrUnavailable, ref)
	}
	return false, nil
}

// acquire grants req.Key from memory: the key is free on this arbiter (or
// already the session's), and the grant is in the spool on disk before it
// is answered.
func (o *openState) acquire(ctx context.Context, req AcquireRequest, cls *class.Class) (Grant, error) {
	a := o.a
	who := req.Caller.String()
	sess, err := a.localSession(who, req.Session)
	if err != nil {
		return Grant{}, err
	}
	if err := sessionTTLFits(sess, cls, req.Session); err != nil {
		return Grant{}, err
	}
	deadline := time.Now().Add(req.Wait)
	for {
		o.mu.Lock()
		if o.load() != postureOpen {
			o.mu.Unlock()
			return Grant{}, fmt.Errorf("%w: etcd quorum has just returned; acquire again", ErrUnavailable)
		}
		h := o.holds[req.Key]
		if h != nil && h.session != req.Session {
			if v, ok := a.sessions.Load(h.session); !ok || a.localExpired(v.(*sessionInfo)) {
				delete(o.holds, req.Key)
				h = nil
			}
		}
		switch {
		case h == nil:
			h = &openHold{session: req.Session, identity: who, class: cls.Ref(), at: a.now()}
			o.holds[req.Key] = h
			o.appends++
			o.mu.Unlock()
			return a.spoolGrant(req, cls, h)
		case h.session == req.Session && h.seq != 0:
			g := a.openGrant(h)
			o.mu.Unlock()
			return g, nil
		}
		ch := o.changed
		o.mu.Unlock()
		if req.Wait == 0 {
			return Grant{}, ErrHeld
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Grant{}, ErrWaitTimeout
		}
		t := time.NewTimer(min(left, a.poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return Grant{}, ctx.Err()
		case <-a.draining:
			t.Stop()
			return Grant{}, fmt.Errorf("%w: lockd is shutting down; acquire again", ErrUnavailable)
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// spoolGrant appends a reserved hold to the spool and answers it, or gives
// the reservation up when the append fails: nothing unrecorded is granted.
func (a *Arbiter) spoolGrant(req AcquireRequest, cls *class.Class, h *openHold) (Grant, error) {
	o := a.home.open
	rec, _ := json.Marshal(keyspace.Unprotected{Arbiter: o.id, Key: req.Key, Class: cls.Ref(),
		Identity: h.identity, Session: h.session, AcquiredAt: h.at.UnixNano(), TTL: int64(cls.TTL / time.Second)})
	seq, err := o.sp.Append(rec)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.appends--
	if err != nil {
		delete(o.holds, req.Key)
		o.signalLocked()
		a.log.Error("unprotected grant refused: the spool could not record it", "err", err)
		return Grant{}, fmt.Errorf("%w: the grant could not be recorded in the spool, so it was not made: %v", ErrUnavailable, err)
	}
	h.seq = seq
	o.unshipped = true
	a.metrics.unprotectedGrants.WithLabelValues(cls.Namespace, cls.Name).Inc()
	return a.openGrant(h), nil
}

func (a *Arbiter) openGrant(h *openHold) Grant {
	return Grant{AcquiredAt: h.at, Unprotected: true, Arbiter: a.home.open.id, SpoolSeq: h.seq, Class: h.class}
}

// releaseOpen ends an unprotected hold of a local session.
func (a *Arbiter) releaseOpen(caller string, session int64, key string, tok uint64) (bool, error) {
	if _, err := a.localSession(caller, session); err != nil {
		return false, err
	}
	o := a.home.open
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.holds[key]
	switch {
	case h == nil:
		return false, nil
	case h.session != session || tok != 0:
		return false, ErrStaleToken
	}
	delete(o.holds, key)
	o.signalLocked()
	return true, nil
}

// shipBatch bounds the puts in one shipping transaction.
const shipBatch = 64

// shipSpool puts every unshipped spool entry under /sys/unprotected/, if
// absent, marks the spool shipped after each committed batch and empties
// it once everything is shipped. It returns how many entries it shipped.
// Two grants of one lock key never share a batch, so each is its own
// history row (a row is one key at one revision).
func (a *Arbiter) shipSpool(ctx context.Context) (int, error) {
	o := a.home.open
	entries, err := o.sp.Unshipped()
	if err != nil {
		return 0, err
	}
	shipped := 0
	for len(entries) > 0 {
		var ops []clientv3.Op
		keys := map[string]bool{}
		n := 0
		for ; n < len(entries) && n < shipBatch; n++ {
			e := entries[n]
			u, err := spooled(e)
			if err != nil {
				return shipped, fmt.Errorf("%w: spool entry %d: %v", ErrInternal, e.Seq, err)
			}
			if keys[u.Key] {
				break
			}
			keys[u.Key] = true
			k := keyspace.UnprotectedKey(o.id, e.Seq)
			v, _ := json.Marshal(u)
			ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(k, string(v))}, nil))
		}
		cctx, cancel := a.home.callCtx(ctx)
		resp, err := a.home.cli.Txn(cctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return shipped, storeErr(ctx, err)
		}
		if _, err := a.home.checkHeader(resp.Header); err != nil {
			return shipped, err
		}
		if err := o.sp.MarkShipped(entries[n-1].Seq); err != nil {
			return shipped, err
		}
		shipped += n
		a.metrics.unprotectedShipped.Add(float64(n))
		entries = entries[n:]
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.appends > 0 || o.load() == postureOpen {
		return shipped, nil // more may come; Reset only an idle spool
	}
	if err := o.sp.Reset(); err != nil && !errors.Is(err, spool.ErrClosed) {
		return shipped, err
	}
	return shipped, nil
}

// spooled decodes a spool entry; its sequence number is the spool's.
func spooled(e spool.Entry) (keyspace.Unprotected, error) {
	var u keyspace.Unprotected
	if err := json.Unmarshal(e.Data, &u); err != nil {
		return u, err
	}
	u.Seq = e.Seq
	if u.Arbiter == "" || u.Key == "" {
		return u, errors.New("arbiter and key are required")
	}
	return u, nil
}
