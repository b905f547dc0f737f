package arbiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/token"
)

// Waiter states, guarded by memoryLine.mu.
const (
	waiting = iota
	claimed // a release is handing the key over; wait for done or wake
	granted // handed the key by a release; the result is in done
	gone    // left the queue
)

type waitResult struct {
	grant Grant
	err   error
}

// waiter is one Acquire waiting in a key's queue.
type waiter struct {
	identity string
	session  int64
	ttl      time.Duration   // the session's
	wake     chan struct{}   // cap 1: "you may be head, try"
	done     chan waitResult // cap 1: set by a handoff (or a supersede)
	state    int
	queued   time.Time // when it joined the queue, by the arbiter's clock; set by enqueue
}

// holderHint is who held the key when this arbiter last looked (a refused
// attempt, or a grant it made): a hint for newcomers, never a grant.
type holderHint struct {
	identity string
	session  int64
}

// queue is the in-memory FIFO of waiters for one key on this arbiter.
// Arrival order is kept on this arbiter only and is lost if it restarts.
type queue struct {
	hk string
	// op serialises grant attempts, hold reads and handoffs for the key on
	// this arbiter, so the head waiter's own attempt, a newcomer's look and a
	// release's handoff never race.
	op      chanMutex
	waiters []*waiter  // guarded by memoryLine.mu
	holder  holderHint // guarded by memoryLine.mu
	// grace: the last attempt here was refused because grants wait out a
	// grace (ErrEpochGrace, ErrOpenGrace), not because anyone holds the
	// key. Guarded by memoryLine.mu.
	grace       error
	cancelWatch context.CancelFunc
}

// memoryLine is the best-effort line: the waiters of a key queue in this
// arbiter's memory, in arrival order, and the head tries its own grant
// transaction on a watch hint, a local release or a poll tick; a release
// here hands the key to the head in its own transaction. The order is
// kept on this arbiter only and is lost if it restarts.
type memoryLine struct {
	a *Arbiter
	c *cell

	// mu guards the queues, and every queue's waiters, holder and grace,
	// and every waiter's state.
	mu     sync.Mutex
	queues map[string]*queue
}

func newMemoryLine(a *Arbiter, c *cell) *memoryLine {
	return &memoryLine{a: a, c: c, queues: map[string]*queue{}}
}

// acquire is an Acquire of a key of a best-effort class: a first look (a
// grant attempt when nobody waits here), then a place in the queue until
// granted.
func (m *memoryLine) acquire(ctx context.Context, req AcquireRequest, cls *class.Class) (Grant, error) {
	a := m.a
	c := m.c
	sess, err := a.sessionFor(ctx, c, req, cls)
	if err != nil {
		return Grant{}, err
	}
	hk := holdKey(req.Key)
	w := &waiter{identity: req.Caller.String(), session: req.Session, ttl: sess.ttl,
		wake: make(chan struct{}, 1), done: make(chan waitResult, 1)}
	att, tried, err := m.firstLook(ctx, req, hk, cls)
	if err != nil {
		return Grant{}, a.sessionGone(c, req.Session, err)
	}
	if att.granted {
		return c.releaseIfGone(ctx, req, att.grant)
	}
	if g, mine, err := a.classify(att, req.Caller.String(), req.Session); mine || err != nil {
		return g, err
	}
	switch {
	case req.Wait == 0 && att.grace != nil:
		return Grant{}, att.grace
	case req.Wait == 0:
		return Grant{}, ErrHeld
	}
	if err := m.enqueue(req.Key, w, att, tried); err != nil {
		return Grant{}, err
	}
	c.metrics.waits.WithLabelValues(cls.Namespace, cls.Name).Inc()
	return m.wait(ctx, req, w, hk, time.Now().Add(req.Wait))
}

// firstLook is an Acquire's first step. With no waiters queued here it
// tries the grant. With waiters queued it must not jump the line: it
// replaces the session's own older waiter for the key, if any, and reads
// the hold when the caller may be its holder (an idempotent retry) or its
// identity's (a leak). tried reports whether the attempt read the store.
func (m *memoryLine) firstLook(ctx context.Context, req AcquireRequest, hk string, cls *class.Class) (attempt, bool, error) {
	a := m.a
	c := m.c
	q, dup, hint := m.queueFor(req.Key, req.Session)
	if q == nil {
		att, err := c.tryGrant(ctx, req.Key, a.encodeHold(req.Caller.String(), req.Session, cls), req.Session, linePos{})
		return att, true, err
	}
	if !dup && hint.identity != "" && hint.identity != req.Caller.String() {
		// Held, as last seen here, by another identity: the caller cannot
		// be its holder. If the hint is stale the caller learns when its
		// turn comes, by a full transaction.
		return attempt{}, false, nil
	}
	if err := q.op.lock(ctx); err != nil {
		return attempt{}, false, err
	}
	defer q.op.unlock()
	if dup {
		m.supersede(req.Key, req.Session)
	}
	att, err := c.readHold(ctx, hk, openGraced(cls))
	return att, true, err
}

// hasSession reports whether session has a waiter queued here. Caller
// holds memoryLine.mu.
func (q *queue) hasSession(session int64) bool {
	for _, w := range q.waiters {
		if w.session == session {
			return true
		}
	}
	return false
}

// chanMutex is a mutex that can be given up on when a context ends.
type chanMutex chan struct{}

func (m chanMutex) lock(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m chanMutex) unlock() { <-m }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// queueFor is what a newcomer needs to know about key's queue here: the
// queue (nil when nobody waits), whether session already waits in it, and
// who held the key when this arbiter last looked.
func (m *memoryLine) queueFor(key string, session int64) (*queue, bool, holderHint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[key]
	if q == nil {
		return nil, false, holderHint{}
	}
	return q, q.hasSession(session), q.holder
}

// enqueue appends w to key's queue, creating the queue and its watch (from
// the revision after the failed attempt's) when needed. A waiter that
// becomes head without having just tried is told to try. It refuses a
// waiter beyond its identity's quota.
func (m *memoryLine) enqueue(key string, w *waiter, att attempt, tried bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.a.waiters.take(w.identity); err != nil {
		return err
	}
	q := m.queues[key]
	if q == nil {
		ctx, cancel := context.WithCancel(m.a.bg)
		q = &queue{hk: holdKey(key), op: make(chanMutex, 1), cancelWatch: cancel}
		m.queues[key] = q
		rev := int64(0)
		if tried && att.rev > 0 {
			rev = att.rev + 1
		}
		go m.watchQueue(ctx, key, q, rev)
	}
	if att.holderLease != 0 {
		q.holder = holderHint{identity: att.holder.Identity, session: att.holderLease}
	}
	if tried {
		q.grace = att.grace
	}
	w.queued = m.a.now()
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 && !tried {
		signal(w.wake)
	}
	return nil
}

// leave removes w from key's queue. Caller holds m.mu. When w was head and
// promoteNext is set, the new head is told to try.
func (m *memoryLine) leave(key string, w *waiter, promoteNext bool) {
	q := m.queues[key]
	if q == nil || w.state == gone {
		return
	}
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			m.a.waiters.give(w.identity)
			if i == 0 && promoteNext && len(q.waiters) > 0 {
				signal(q.waiters[0].wake)
			}
			break
		}
	}
	w.state = gone
	if len(q.waiters) == 0 {
		delete(m.queues, key)
		q.cancelWatch()
	}
}

// supersede ends session's waiters for key with ErrSuperseded: a newer
// Acquire of the key by the same session takes their place. Caller holds
// the queue's op (no attempt or handoff is in flight).
func (m *memoryLine) supersede(key string, session int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[key]
	if q == nil {
		return
	}
	for _, w := range append([]*waiter(nil), q.waiters...) {
		if w.session == session && w.state == waiting {
			m.leave(key, w, true)
			w.done <- waitResult{err: ErrSuperseded}
		}
	}
}

// head returns key's queue if w is at its head and still waiting.
func (m *memoryLine) head(key string, w *waiter) *queue {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[key]
	if q == nil || w.state != waiting || len(q.waiters) == 0 || q.waiters[0] != w {
		return nil
	}
	return q
}

// wakeHead tells key's head waiter to try (the key was just released here).
func (m *memoryLine) wakeHead(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.queues[key]; q != nil && len(q.waiters) > 0 {
		signal(q.waiters[0].wake)
	}
}

// QueueLen is the number of waiters queued for key on this arbiter, in
// its memory and in the key's durable line.
func (a *Arbiter) QueueLen(key string) int { return a.cellOfKey(key).waiting(key) }

// waiting is the number of waiters queued for key in the cell's lines.
func (c *cell) waiting(key string) int { return c.memory.len(key) + c.durables.len(key) }

// stop ends the queues' watches (at Close).
func (m *memoryLine) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, q := range m.queues {
		q.cancelWatch()
	}
}

// len is the number of waiters queued for key here.
func (m *memoryLine) len(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.queues[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// queueInfo lists key's waiters queued on this arbiter in arrival order,
// which is the order they are granted in. A waiter that already has the
// key (handed over, or its own transaction won and it has not left the
// line yet) is not waiting: holder is the session that holds key (0 when
// none), and neither it nor a handed-over waiter is listed.
func (m *memoryLine) queueInfo(key string, holder int64, ahead int) []WaiterInfo {
	now := m.a.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[key]
	if q == nil {
		return nil
	}
	var out []WaiterInfo
	for _, w := range q.waiters {
		if w.state == granted || (holder != 0 && w.session == holder) {
			continue
		}
		out = append(out, WaiterInfo{Identity: w.identity, Session: w.session, Waited: now.Sub(w.queued), Position: ahead + len(out) + 1})
	}
	return out
}

func (a *Arbiter) jitter() time.Duration {
	return a.poll/2 + rand.N(a.poll)
}

// wait keeps w in line until it is granted (by its own transaction or a
// handoff), its deadline passes, ctx ends or the arbiter closes. Only the
// head tries; it tries on a watch hint, a local release, or a poll tick.
// Every grant is a full transaction.
func (m *memoryLine) wait(ctx context.Context, req AcquireRequest, w *waiter, hk string, deadline time.Time) (Grant, error) {
	dl := time.NewTimer(time.Until(deadline))
	defer dl.Stop()
	poll := time.NewTimer(m.a.jitter())
	defer poll.Stop()
	for {
		select {
		case r := <-w.done:
			if r.err != nil {
				return Grant{}, r.err
			}
			return m.c.releaseIfGone(ctx, req, r.grant)
		case <-w.wake:
		case <-poll.C:
			poll.Reset(m.a.jitter())
		case <-dl.C:
			return m.giveUp(ctx, req, w, m.waitTimeout(req.Key))
		case <-ctx.Done():
			return m.giveUp(ctx, req, w, ctx.Err())
		case <-m.a.draining:
			return m.giveUp(ctx, req, w, fmt.Errorf("%w: lockd is shutting down; acquire again", ErrUnavailable))
		}
		q := m.head(req.Key, w)
		if q == nil {
			continue
		}
		if err := q.op.lock(ctx); err != nil {
			return m.giveUp(ctx, req, w, err)
		}
		g, finished, err := m.headAttempt(ctx, req, w, q, hk)
		q.op.unlock()
		if finished {
			if err != nil {
				return Grant{}, err
			}
			return m.c.releaseIfGone(ctx, req, g)
		}
	}
}

// waitTimeout is the answer to a wait whose deadline passed: the epoch
// grace when that is what the key's last attempt here was refused for
// (nobody holds it; grants resume when the grace ends), else the holder's
// wait timeout.
func (m *memoryLine) waitTimeout(key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.queues[key]; q != nil && q.grace != nil {
		return fmt.Errorf("%w; the wait deadline passed first", q.grace)
	}
	return ErrWaitTimeout
}

// headAttempt is the head waiter's grant transaction, run under q.op. The
// waiter is authorized again first: a class reload may have revoked its
// grant or changed the class TTL since it queued.
func (m *memoryLine) headAttempt(ctx context.Context, req AcquireRequest, w *waiter, q *queue, hk string) (Grant, bool, error) {
	if m.head(req.Key, w) != q {
		// A handoff got here first; the result is in w.done.
		return Grant{}, false, nil
	}
	cls, err := m.a.authorizeAcquire(w.identity, req.Key, "", w.ttl)
	if err != nil {
		m.mu.Lock()
		m.leave(req.Key, w, true)
		m.mu.Unlock()
		return Grant{}, true, err
	}
	att, err := m.c.tryGrant(ctx, req.Key, m.a.encodeHold(req.Caller.String(), req.Session, cls), req.Session, linePos{})
	if err == nil && att.granted {
		m.mu.Lock()
		q.holder = holderHint{identity: w.identity, session: w.session}
		q.grace = nil
		m.leave(req.Key, w, false)
		m.mu.Unlock()
		return att.grant, true, nil
	}
	if err == nil {
		m.mu.Lock()
		if att.holderLease != 0 {
			q.holder = holderHint{identity: att.holder.Identity, session: att.holderLease}
		}
		q.grace = att.grace
		m.mu.Unlock()
		var mine bool
		var g Grant
		if g, mine, err = m.a.classify(att, req.Caller.String(), req.Session); !mine && err == nil {
			return Grant{}, false, nil // still held: keep waiting
		}
		if mine {
			m.mu.Lock()
			m.leave(req.Key, w, false)
			m.mu.Unlock()
			return g, true, nil
		}
	}
	m.mu.Lock()
	m.leave(req.Key, w, true)
	m.mu.Unlock()
	return Grant{}, true, m.a.sessionGone(m.c, req.Session, err)
}

// giveUp leaves the queue with err, unless a handoff already granted the
// key: then the grant is returned if the caller is still there, and released
// if not.
func (m *memoryLine) giveUp(ctx context.Context, req AcquireRequest, w *waiter, err error) (Grant, error) {
	var r waitResult
	for {
		m.mu.Lock()
		if w.state == waiting {
			m.leave(req.Key, w, true)
			m.mu.Unlock()
			return Grant{}, err
		}
		m.mu.Unlock()
		// A handoff holds a claim on w: it either delivers a result or
		// gives the claim back and wakes w.
		select {
		case r = <-w.done:
		case <-w.wake:
			continue
		}
		break
	}
	if r.err != nil {
		return Grant{}, r.err
	}
	if ctx.Err() == nil {
		return r.grant, nil // the handoff won the race with the deadline
	}
	_, _ = m.c.releaseIfGone(ctx, req, r.grant) // the caller is gone
	return Grant{}, err
}

// handoff, when a waiter is queued here for key, releases the hold matching
// cmp and puts the head waiter's hold in the same transaction. done is false
// when there was nobody to hand to; retry is set when the epoch record moved
// and cmp must be rebuilt.
func (m *memoryLine) handoff(ctx context.Context, key, hk string, cmp []*pb.Compare, st *epochState) (done, released, retry bool, err error) {
	m.mu.Lock()
	q := m.queues[key]
	m.mu.Unlock()
	if q == nil {
		return false, false, false, nil
	}
	if err := q.op.lock(ctx); err != nil {
		return true, false, false, err
	}
	defer q.op.unlock()
	for {
		m.mu.Lock()
		var w *waiter
		if len(q.waiters) > 0 && q.waiters[0].state == waiting && m.queues[key] == q {
			w = q.waiters[0]
			w.state = claimed // a waiter giving up now waits for our result
		}
		m.mu.Unlock()
		if w == nil {
			return false, false, false, nil
		}
		cls, aerr := m.a.authorizeAcquire(w.identity, key, "", w.ttl)
		if aerr != nil {
			// A class reload revoked its grant or changed the TTL: it cannot
			// hold the key; next.
			m.mu.Lock()
			m.leave(key, w, false)
			m.mu.Unlock()
			w.done <- waitResult{err: aerr}
			continue
		}
		unclaim := func() {
			m.mu.Lock()
			if w.state == claimed {
				w.state = waiting
			}
			m.mu.Unlock()
			signal(w.wake)
		}
		if openGraced(cls) {
			// A class open on quorum loss is granted only by its waiter's
			// own transaction, which waits out an open grace (recovery.go):
			// release, and the woken head tries.
			unclaim()
			return false, false, false, nil
		}
		fence, fenced, ferr := m.c.fence(key, cls)
		if ferr != nil {
			// The key is homed to another shard now: release, and the
			// woken head hears MOVING from its own attempt.
			unclaim()
			return false, false, false, nil
		}
		handCmps := append(slices.Clip(cmp), etcdop.WithPrefix(etcdop.Absent(keyspace.QueueRange(key))))
		var fenceReads []*pb.RequestOp
		if fenced {
			handCmps, fenceReads = append(handCmps, fence.Cmps()...), fence.Reads()
		}
		h := m.a.encodeHold(w.identity, w.session, cls)
		cctx, cancel := m.c.txnCtx(ctx)
		start := time.Now()
		qr := keyspace.QueueRange(key)
		resp, err := m.c.kv.Txn(cctx, etcdop.Request(handCmps, []*pb.RequestOp{etcdop.Put(hk, h.val, w.session)},
			append([]*pb.RequestOp{etcdop.Get(hk), etcdop.Get(epochKey), etcdop.Count(qr, true)}, fenceReads...)))
		cancel()
		if err != nil {
			if isLeaseNotFound(err) {
				// The waiter's session is gone: it cannot hold; next.
				m.mu.Lock()
				m.leave(key, w, false)
				m.mu.Unlock()
				w.done <- waitResult{err: m.a.sessionGone(m.c, w.session, ErrSessionNotFound)}
				continue
			}
			unclaim()
			return true, false, false, storeErr(ctx, err)
		}
		if _, err := m.c.checkHeader(resp.Header); err != nil {
			unclaim()
			return true, false, false, err
		}
		if !resp.Succeeded {
			unclaim()
			if m.c.fenceRefused(fence, fenced, resp) != nil {
				// The range is moving: release without a handoff.
				return false, false, false, nil
			}
			if resp.Responses[2].GetResponseRange().Count > 0 {
				// Durable waiters are in line (a key taken under a durable
				// class too): the key goes to their head, by its own
				// transaction, not to this queue. Release without a handoff.
				return false, false, false, nil
			}
			retry, err := m.c.releaseRefused(resp, st, start, false)
			return !retry, false, retry, err
		}
		g := h.grant(0, st.epoch, resp.Header.Revision)
		if g.Token, err = token.Pack(st.epoch, resp.Header.Revision); err != nil {
			unclaim()
			return true, false, false, fmt.Errorf("%w: %v", ErrInternal, err)
		}
		m.mu.Lock()
		q.holder = holderHint{identity: w.identity, session: w.session}
		m.leave(key, w, false)
		w.state = granted
		m.mu.Unlock()
		w.done <- waitResult{grant: g}
		return true, true, false, nil
	}
}

// watchQueue turns deletes of the key into hints for the head waiter, from
// revision rev on. On compaction or any stream error it hints (the head
// re-tries its transaction) and watches again from the current revision.
func (m *memoryLine) watchQueue(ctx context.Context, key string, q *queue, rev int64) {
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithFilterPut()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		for resp := range m.c.cli.Watch(clientv3.WithRequireLeader(ctx), q.hk, opts...) {
			if resp.CompactRevision != 0 || resp.Err() != nil {
				rev = 0 // events may be gone: the head re-tries, then watch from now
				break
			}
			if len(resp.Events) > 0 {
				m.wakeHead(key)
			}
			rev = resp.Header.Revision + 1
		}
		if ctx.Err() != nil {
			return
		}
		m.wakeHead(key)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
