package client

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/locktrace"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// holdState is where a session's hold of one key stands.
type holdState int

const (
	// acquiring: an Acquire RPC is in flight; other acquires of the key wait.
	acquiring holdState = iota
	// held: lockd granted it; further acquires re-enter.
	held
	// settling: the final release, or an acquire whose outcome is unknown,
	// is being resolved with lockd; acquires of the key wait for it and
	// then ask lockd afresh.
	settling
)

// hold is one session's hold (or attempted hold) of one key. Its fields are
// guarded by the session's mu.
type hold struct {
	key, class string
	state      holdState
	// changed is closed when the hold leaves acquiring or settling.
	changed chan struct{}
	token   *lockv1.Token
	// unprotected: lockd granted it without a quorum (token 0), as
	// grant spoolSeq of arbiter.
	unprotected bool
	arbiter     string
	spoolSeq    uint64
	// locks are the outstanding Locks (one per acquire not yet released).
	locks []*Lock
	// lease is the session's lease the hold is on, for a hold on a cluster
	// other than the coord cluster; nil for one on the session itself.
	lease *clusterLease
}

// Lock is one acquirer's handle on a granted hold. Several Locks share a
// hold when a client re-enters a key it holds; each is released on its own.
type Lock struct {
	s       *session
	h       *hold
	token   *lockv1.Token
	onFence func(*Lock)
	done    chan struct{}
	err     error // guarded by s.mu: why this Lock ended; nil while held
}

// Session is the ID of the session (lockd's lease) the hold is on: what
// lockd's Inspect and ListSessions show for it. For diagnostics and tests.
func (l *Lock) Session() int64 { return l.s.id }

// Key is the locked key.
func (l *Lock) Key() string { return l.h.key }

// Class is the class the key was granted under ("namespace/name"): the
// key's class, decided in review, when lockd granted it.
func (l *Lock) Class() string { return l.h.class }

// Token is the fencing token: present it on every write to the guarded
// resource, which must reject a token not greater than the last it
// accepted. Never log it.
func (l *Lock) Token() uint64 { return l.token.GetValue() }

// Epoch is the token's epoch (diagnostics).
func (l *Lock) Epoch() uint32 { return l.token.GetEpoch() }

// CanStart reports whether a new unit of work may start: false from the
// first failed keepalive, once the lock is lost or released, and always for
// an unprotected lock. It is State() == Safe && !Unprotected().
func (l *Lock) CanStart() bool {
	return !l.Unprotected() && l.State() == Safe
}

// Unprotected reports whether lockd granted the lock from memory, without
// an etcd quorum, for a class with onQuorumLoss: open. Such a lock excludes
// nobody for sure: another holder may hold the key at the same time, its
// Token is 0 (every fence rejects it), and it ends with ErrUnprotectedEnded
// when quorum returns. CanStart is false for it; a holder that accepts the
// risk (the class owner chose open) checks State() == Safe itself.
func (l *Lock) Unprotected() bool { return l.h.unprotected }

// Spooled names an unprotected lock's grant as lockd's history will: the
// lockd (arbiter ID) that made it and its sequence number in that lockd's
// spool. Both are zero for a protected lock.
func (l *Lock) Spooled() (arbiter string, seq uint64) { return l.h.arbiter, l.h.spoolSeq }

// State is where a lock stands as its client sees it, after Chubby's safe,
// jeopardy and expired.
type State int

const (
	// Safe: the last keepalive was answered and the local deadline is
	// ahead. New work may start (CanStart is true).
	Safe State = iota + 1
	// Jeopardy: a keepalive failed or went unanswered, and the lock has
	// not ended yet. Start nothing new; work in flight may finish before
	// the local deadline (Deadline, RemainingTTL), and its writes are still
	// checked by the resource's fence. The lock goes back to Safe when a
	// keepalive is answered in time, or ends at the deadline (ErrDeadline).
	Jeopardy
	// Ended: the lock was lost or released; Err says why and onFence has
	// run (or is running) for a loss.
	Ended
)

func (s State) String() string {
	switch s {
	case Safe:
		return "safe"
	case Jeopardy:
		return "jeopardy"
	case Ended:
		return "ended"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// State reports whether the lock is Safe, in Jeopardy or Ended. Between
// the local deadline and the fence timer's run (a moment) a lock is in
// Jeopardy with Err still nil.
func (l *Lock) State() State {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	switch {
	case l.err != nil:
		return Ended
	case l.s.holdHealthyLocked(l.h):
		return Safe
	}
	return Jeopardy
}

// RemainingTTL is the time left before the local deadline; 0 once the lock
// ended.
func (l *Lock) RemainingTTL() time.Duration {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.err != nil {
		return 0
	}
	return l.s.holdRemainingLocked(l.h)
}

// Deadline is the local deadline: the send time of the last successful
// keepalive plus the TTL minus one second, by the client's clock. It moves
// later with every successful keepalive and passes before the store can
// expire the session. Stop acting on the resource by then.
func (l *Lock) Deadline() time.Time {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.holdDeadlineLocked(l.h)
}

// Done is closed when the lock is lost or released.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Err is why the lock ended: ErrDeadline, ErrExpired, ErrForced, ErrEpoch,
// ErrSessionEnded, ErrReleased, ErrClosed; nil while held.
func (l *Lock) Err() error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.err
}

// endLocked ends l with err; it returns whether l was still held. The
// caller holds s.mu and runs onFence (outside the lock) when asked.
func (l *Lock) endLocked(err error) bool {
	if l.err != nil {
		return false
	}
	l.err = err
	close(l.done)
	return true
}

// Release releases this Lock; the hold ends at lockd when the last Lock of
// it is released. A release of a lock already lost returns its lost reason.
func (l *Lock) Release(ctx context.Context) error {
	_, err := l.ReleaseHeld(ctx)
	return err
}

// ReleaseHeld is Release that also reports whether lockd still held the
// lock with this token when the final release reached it. False with a nil
// error means the hold had already ended (it expired, or was removed) before
// the release: work done since the last CanStart may have overlapped another
// holder's, which only the resource's fence can have stopped. A release
// that is not the last of its hold reports true.
//
// The release is carried out with the client's own bounded context: if ctx
// ends first, ReleaseHeld returns ctx's error and the client still releases
// the hold (or, failing that, ends the session so the hold expires).
func (l *Lock) ReleaseHeld(ctx context.Context) (bool, error) {
	s, h := l.s, l.h
	s.mu.Lock()
	if l.err != nil {
		err := l.err
		s.mu.Unlock()
		if errors.Is(err, ErrReleased) {
			return false, nil
		}
		return false, err
	}
	l.endLocked(ErrReleased)
	h.locks = remove(h.locks, l)
	if len(h.locks) > 0 {
		s.mu.Unlock()
		return true, nil
	}
	// The last Lock: from here on no acquire may re-enter this hold; a new
	// one waits for the release and is then a new grant.
	h.state, h.changed = settling, make(chan struct{})
	s.mu.Unlock()

	ctx, span := s.c.tracer.Start(ctx, "lockd.client/Release", trace.WithAttributes(
		locktrace.Namespace(h.key), locktrace.AttrClass.String(h.class)))
	held, err := s.releaseLast(ctx, h)
	locktrace.End(span, err, Reason(err))
	return held, err
}

// releaseLast releases h at lockd for its last Lock. The first attempt
// runs here, bounded by ctx; lockd's definite answer settles the hold.
// Otherwise (ctx ended, lockd unreachable) the client resolves it in the
// background with its own context.
func (s *session) releaseLast(ctx context.Context, h *hold) (bool, error) {
	if held, ok, err := s.releaseOnce(ctx, h.key, h.token.GetValue()); ok {
		s.settle(h)
		return held, err
	}
	type result struct {
		held bool
		err  error
	}
	res := make(chan result, 1)
	if !s.c.background(func() {
		held, err := s.resolveRelease(h)
		res <- result{held, err}
	}) {
		s.settle(h)
		return false, ErrClosed // Close ends the session, and so the hold, at lockd
	}
	select {
	case r := <-res:
		return r.held, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func remove(ls []*Lock, l *Lock) []*Lock {
	for i, x := range ls {
		if x == l {
			return append(ls[:i], ls[i+1:]...)
		}
	}
	return ls
}

// enter finds or creates the session's hold of key. It returns a new Lock
// when the hold is granted already (re-entry), or the hold in state
// acquiring, now the caller's to grant. It waits, within ctx, while another
// acquire or a release of the key is in flight.
func (s *session) enter(ctx context.Context, key, class string, onFence func(*Lock)) (*hold, *Lock, error) {
	for {
		s.mu.Lock()
		if s.lost != nil {
			s.mu.Unlock()
			return nil, nil, errSessionLost
		}
		h := s.holds[key]
		switch {
		case h == nil:
			h = &hold{key: key, class: class, state: acquiring, changed: make(chan struct{})}
			s.holds[key] = h
			s.mu.Unlock()
			return h, nil, nil
		case h.state == held && s.holdRemainingLocked(h) <= 0:
			// The local deadline has passed and the fence timer has not run
			// yet (a pause, a clock step): lockd may no longer hold it. End
			// the session (or its lease on the hold's cluster) now; the
			// caller opens another.
			s.mu.Unlock()
			s.checkHoldDeadline(h)
			continue
		case h.state == held && class != "" && h.class != "" && classRef(key, class) != h.class:
			// Re-entering shares the hold, which is of the class lockd
			// granted it under: another class is refused as lockd would.
			held := h.class
			s.mu.Unlock()
			return nil, nil, &Error{Reason: "CLASS_MISMATCH", err: status.Errorf(codes.FailedPrecondition,
				"client: class mismatch: %s is held by this client under class %s, not %s; leave the class out to re-enter it", key, held, classRef(key, class))}
		case h.state == held:
			l := s.newLockLocked(h, onFence)
			s.mu.Unlock()
			return nil, l, nil
		}
		wait := h.changed
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// errSessionLost makes Acquire open a new session.
var errSessionLost = errors.New("client: session lost")

func (s *session) newLockLocked(h *hold, onFence func(*Lock)) *Lock {
	l := &Lock{s: s, h: h, token: h.token, onFence: onFence, done: make(chan struct{})}
	h.locks = append(h.locks, l)
	return l
}

// granted records lockd's grant of h and returns its first Lock. On a
// session already lost (or a token of an epoch the session has seen pass)
// the Lock is returned lost: its onFence runs.
func (s *session) granted(h *hold, resp *lockv1.AcquireResponse, sent time.Time, onFence func(*Lock)) *Lock {
	tok := resp.GetToken()
	s.mu.Lock()
	h.token, h.unprotected, h.arbiter, h.spoolSeq = tok, resp.GetUnprotected(), resp.GetArbiterId(), resp.GetSpoolSeq()
	if c := resp.GetClass(); c != "" {
		h.class = c
	}
	l := s.newLockLocked(h, onFence)
	lost := s.lost
	var fenced []*Lock
	if id := resp.GetClusterLease(); id != 0 && lost == nil {
		h.lease, fenced, lost = s.adoptLeaseLocked(resp.GetCluster(), id, resp.GetClusterTtl().AsDuration(), sent)
		if len(s.onLease) >= maxOnLease {
			clear(s.onLease) // bounded: a session may take keys without end
		}
		s.onLease[h.key] = true
	}
	epoch := s.epoch
	if h.lease != nil {
		epoch = h.lease.epoch
	}
	switch {
	case lost != nil:
	case !h.unprotected && tok.GetEpoch() < epoch:
		lost = ErrEpoch // an unprotected grant (token 0) belongs to no epoch
	case s.holdRemainingLocked(h) <= 0:
		lost = ErrDeadline // granted on a session (or lease) whose deadline passed meanwhile
	}
	if lost != nil {
		s.dropLocked(h)
		l.endLocked(lost)
		s.mu.Unlock()
		runFences(fenced)
		go onFence(l)
		if errors.Is(lost, ErrDeadline) {
			s.checkHoldDeadline(h)
		}
		return l
	}
	h.state = held
	close(h.changed)
	h.changed = nil
	s.mu.Unlock()
	runFences(fenced)
	return l
}

// settle forgets h: its acquire was refused, or its release or unknown
// acquire has been resolved.
func (s *session) settle(h *hold) {
	s.mu.Lock()
	s.dropLocked(h)
	s.mu.Unlock()
}

// dropLocked removes h from the session and wakes acquires waiting on it.
func (s *session) dropLocked(h *hold) {
	if s.holds[h.key] == h {
		delete(s.holds, h.key)
	}
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// loseHoldLocked ends every Lock of h with err and drops h; it returns the
// Locks whose onFence must run.
func (s *session) loseHoldLocked(h *hold, err error) []*Lock {
	var fence []*Lock
	for _, l := range h.locks {
		if l.endLocked(err) {
			fence = append(fence, l)
		}
	}
	h.locks = nil
	s.dropLocked(h)
	return fence
}

func runFences(ls []*Lock) {
	for _, l := range ls {
		go l.onFence(l)
	}
}

// Background resolution: bounds and pacing.
const (
	// maxOnLease bounds what a session remembers of which keys are on a
	// cluster lease (session.onLease).
	maxOnLease            = 4096
	resolveAttemptTimeout = 5 * time.Second
	resolveBackoff        = 200 * time.Millisecond
)

// resolveRelease releases h at lockd, retrying until lockd answers
// definitively. It gives up after the session's TTL (or when the session
// is lost) and then ends the session, or for a key on another cluster
// its leases there (giveUp), so the hold expires.
func (s *session) resolveRelease(h *hold) (bool, error) {
	defer s.settle(h)
	return s.releaseToken(h.key, h.token.GetValue())
}

// releaseToken is the release loop shared by resolveRelease and
// resolveAcquire: it retries until lockd answers definitively, for at
// most the session's TTL, and then ends the session.
func (s *session) releaseToken(key string, tok uint64) (bool, error) {
	giveUp := time.Now().Add(s.ttl)
	var last error
	for s.alive() && time.Now().Before(giveUp) {
		held, ok, err := s.releaseOnce(s.c.ctx, key, tok)
		if ok {
			return held, err
		}
		last = err
		s.c.sleep(resolveBackoff)
	}
	if s.alive() {
		s.giveUp(key, last)
	}
	return false, last
}

// releaseOnce makes one release attempt within ctx (and at most
// resolveAttemptTimeout). ok is false when the outcome is unknown.
func (s *session) releaseOnce(ctx context.Context, key string, tok uint64) (held, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, resolveAttemptTimeout)
	defer cancel()
	resp, err := s.c.lock.Release(ctx, &lockv1.ReleaseRequest{SessionId: s.id, Key: key, Token: tok})
	err = decode(err)
	switch {
	case err == nil:
		return resp.GetReleased(), true, nil
	case errors.Is(err, ErrStaleToken):
		return false, true, nil // the hold is not this token's any more
	case errors.Is(err, ErrSessionNotFound):
		s.lose(ErrExpired, true)
		return false, true, nil
	case Definite(err):
		// lockd will not release it for us (sealed, or the grant was
		// revoked): end the session (or its lease there) so the hold
		// expires.
		s.giveUp(key, err)
		return false, true, err
	}
	return false, false, err
}

// resolveAcquire finds out whether an acquire whose outcome was unknown
// left a hold on the session, and releases it if so: it acquires again on
// the same session without waiting, which lockd answers with the session's
// own hold when there is one (and which replaces the earlier request if it
// is still queued). It gives up after the session's TTL and then ends the
// session, or for a key on another cluster its leases there (giveUp).
func (s *session) resolveAcquire(h *hold) {
	defer s.settle(h)
	giveUp := time.Now().Add(s.ttl)
	var last error
	for s.alive() && time.Now().Before(giveUp) {
		ctx, cancel := context.WithTimeout(s.c.ctx, resolveAttemptTimeout)
		s.mu.Lock()
		known, retired := s.leasesLocked()
		s.mu.Unlock()
		// The key's class: only its own hold matters.
		resp, err := s.c.lock.Acquire(ctx, &lockv1.AcquireRequest{SessionId: s.id, Key: h.key, ClusterLeases: known, RetiredLeases: retired})
		cancel()
		err = decode(err)
		switch {
		case err == nil:
			_, _ = s.releaseToken(h.key, resp.GetToken().GetValue())
			return
		case errors.Is(err, ErrHeld), errors.Is(err, ErrLeak), errors.Is(err, ErrEpochGrace):
			return // another session holds it, or an advance deleted every hold
		case errors.Is(err, ErrSessionNotFound):
			s.lose(ErrExpired, true)
			return
		case Definite(err):
			s.giveUp(h.key, err) // lockd will not tell us: let it expire
			return
		}
		last = err
		s.c.sleep(resolveBackoff)
	}
	if s.alive() {
		s.giveUp(h.key, last)
	}
}

// sleep waits d or until the client closes.
func (c *Client) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.ctx.Done():
	}
}
