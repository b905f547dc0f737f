package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// fenceMargin is subtracted from the TTL for the local deadline.
const fenceMargin = time.Second

// session is one lockd session (one etcd lease) shared by every hold of its
// TTL in this client.
type session struct {
	c    *Client
	id   int64
	ttl  time.Duration
	slot slot

	mu       sync.Mutex
	lastOK   time.Time // send time of the last successful keepalive
	lastSent time.Time // send time of the newest keepalive
	lastAns  time.Time // send time of the newest keepalive answered
	degraded bool      // a keepalive failed since the last success
	epoch    uint32    // the highest epoch a keepalive answer carried
	lost     error     // set once: the session is over
	holds    map[string]*hold
	// removed are the force-released holds already acted on, by revision.
	removed map[int64]bool
	// leases are the session's leases on clusters other than the coord
	// cluster, by cluster (clusterlease.go); retired are the ones given up
	// at their deadline, named in Acquires so lockd revokes them.
	leases  map[string]*clusterLease
	retired map[string]int64
	// onLease are the keys a grant showed to be held on a cluster lease
	// (their tier is not the coord cluster's), at most maxOnLease of them
	// (a key forgotten is treated as the coord's: giveUp ends the session).
	onLease map[string]bool
	// fence fires at the local deadline, whatever any RPC is doing.
	fence *time.Timer
	stop  chan struct{} // closed when lost
}

// slot is where a session is kept: one per TTL, and one more per TTL for
// unprotected grants, opened when lockd says it has no quorum
// (ErrNoQuorumSession) while the first may still hold protected locks.
type slot struct {
	ttl      time.Duration
	noQuorum bool
	// route, for a session lockd opened without an etcd quorum (a negative
	// ID) for a client routing over several lockds, is the key it was
	// opened for: such a session lives in the memory of one lockd, so its
	// calls and keepalives are routed as that key's are. Empty: any lockd
	// serves it (an etcd lease).
	route string
}

// sessionIn returns the open session in sl for an Acquire of key, opening
// one if needed.
//
// A client routing over several lockds opens it through key's lockd. A
// session lockd opens without an etcd quorum (a negative ID) lives in that
// lockd's memory only: it is kept pinned to key (slot.route), and opened,
// renewed and closed through it.
func (c *Client) sessionIn(ctx context.Context, sl slot, key string) (*session, error) {
	ttl := sl.ttl
	pinned := sl
	if c.routed {
		pinned.route = key
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	for _, try := range []slot{sl, pinned} {
		if s := c.sessions[try]; s != nil {
			c.mu.Unlock()
			return s, nil
		}
	}
	c.mu.Unlock()
	sent := c.now()
	resp, err := c.lock.OpenSession(withRoute(ctx, pinned.route), &lockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)})
	if err != nil {
		return nil, decode(err)
	}
	if resp.GetSessionId() < 0 {
		sl = pinned // only the lockd that opened it knows it
	}
	s := &session{c: c, id: resp.GetSessionId(), ttl: ttl, slot: sl, lastOK: sent, lastAns: sent, lastSent: sent,
		holds: map[string]*hold{}, removed: map[int64]bool{}, leases: map[string]*clusterLease{}, retired: map[string]int64{}, onLease: map[string]bool{},
		stop: make(chan struct{})}
	s.mu.Lock()
	s.fence = time.AfterFunc(s.remainingLocked(), s.checkDeadline)
	s.mu.Unlock()
	c.mu.Lock()
	if other := c.sessions[sl]; other != nil || c.closed {
		c.mu.Unlock()
		// Lost a race with another Acquire: keep the first, drop ours.
		s.fence.Stop()
		if !c.background(func() { c.endSession(s.id, sl.route) }) {
			c.endSession(s.id, sl.route) // closed meanwhile: Shutdown ends the retries
		}
		if other == nil {
			return nil, ErrClosed
		}
		return other, nil
	}
	c.sessions[sl] = s
	c.mu.Unlock()
	c.ka.add(s)
	go s.run()
	return s, nil
}

// endSessionFor bounds how long the client keeps asking lockd to end a
// session it gave up, while lockd or its store is unavailable.
const endSessionFor = 2 * time.Minute

// endSession tells lockd to end a session. It asks again while lockd or its
// store is unavailable (the session's lease, and so its holds, would
// otherwise outlive an outage by a TTL), for up to endSessionFor and until
// the client is shut down; any answer from lockd ends it.
func (c *Client) endSession(id int64, route string) {
	ctx, cancel := context.WithTimeout(withRoute(c.ctx, route), endSessionFor)
	defer cancel()
	backoff := 200 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.lock.CloseSession(actx, &lockv1.CloseSessionRequest{SessionId: id})
		acancel()
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (s *session) deadlineLocked() time.Time { return s.lastOK.Add(s.ttl - fenceMargin) }

func (s *session) remainingLocked() time.Duration {
	return max(s.deadlineLocked().Sub(s.c.now()), 0)
}

func (s *session) healthyLocked() bool {
	return !s.degraded && s.lost == nil && s.c.now().Before(s.deadlineLocked())
}

// alive reports whether the session is still kept alive.
func (s *session) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost == nil
}

// checkDeadline runs on the fence timer: at the local deadline every hold
// of the session is lost.
func (s *session) checkDeadline() {
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return
	}
	if left := s.remainingLocked(); left > 0 {
		s.fence.Reset(left)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.c.log.Warn("lock session lost: local deadline passed", "session", s.id)
	s.lose(ErrDeadline, true)
	s.c.background(func() { s.c.endSession(s.id, s.slot.route) })
}

// lose ends the session locally: every lock is lost with err (onFence runs
// when fence is set), acquires and releases of its keys waiting on it are
// woken, and the client forgets the session and stops renewing it.
func (s *session) lose(err error, fence bool) {
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return
	}
	s.lost = err
	close(s.stop)
	if s.fence != nil {
		s.fence.Stop()
	}
	for _, l := range s.leases {
		l.fence.Stop()
	}
	var fenced []*Lock
	for _, h := range s.holds {
		fenced = append(fenced, s.loseHoldLocked(h, err)...)
	}
	s.mu.Unlock()
	s.c.ka.remove(s)
	s.c.mu.Lock()
	if s.c.sessions[s.slot] == s {
		delete(s.c.sessions, s.slot)
	}
	s.c.mu.Unlock()
	if fence {
		runFences(fenced)
	}
}

// end gives up on the session because the state of its hold of key could
// not be learned (cause): it stops renewing it, so the hold expires with
// the session's lease, and every lock of the session is lost.
func (s *session) end(key string, cause error) {
	s.c.log.Warn("ending lock session: could not learn whether a hold still exists; it expires with the session",
		"session", s.id, "key", key, "err", cause)
	s.lose(ErrSessionEnded, true)
	s.c.background(func() { s.c.endSession(s.id, s.slot.route) })
}

// giveUp is what the client does when the state of a hold of key could
// not be learned (cause). A key held on a cluster lease (a grant of it
// said so) is on another cluster than the coord's: the session gives up
// its leases on every such cluster instead of ending, so whatever is left
// there lapses with them, and its holds on the coord cluster go on (an
// entity cluster's outage does not fence them). Any other key ends the
// session (end).
func (s *session) giveUp(key string, cause error) {
	s.mu.Lock()
	if !s.onLease[key] || s.lost != nil {
		s.mu.Unlock()
		s.end(key, cause)
		return
	}
	var fenced []*Lock
	for _, l := range s.leases {
		s.retired[l.cluster] = l.id
		fenced = append(fenced, s.dropLeaseLocked(l, ErrLeaseGivenUp)...)
	}
	s.mu.Unlock()
	s.c.log.Warn("giving up the session's leases on other clusters than the coord's: could not learn whether a hold there still exists; it expires with them",
		"session", s.id, "key", key, "err", cause)
	runFences(fenced)
}

// run sends a keepalive every TTL/3 and marks the session degraded when one
// is not answered within min(TTL/3, 1s). The fence has its own timer.
func (s *session) run() {
	interval := s.ttl / 3
	answerWithin := min(interval, time.Second)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.c.ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		past := s.remainingLocked() <= 0
		sent := s.c.now()
		s.lastSent = sent
		s.mu.Unlock()
		if past {
			s.checkDeadline() // the clock stepped past the deadline
			continue
		}
		s.renewLeases(sent, answerWithin)
		if !s.c.ka.send(s.id, s.slot.route, sent) {
			s.fail("send")
			continue
		}
		time.AfterFunc(answerWithin, func() {
			s.mu.Lock()
			unanswered := s.lastAns.Before(sent)
			s.mu.Unlock()
			if unanswered {
				s.fail("no answer")
			}
		})
	}
}

func (s *session) fail(what string) {
	s.mu.Lock()
	first := !s.degraded && s.lost == nil
	s.degraded = true
	s.mu.Unlock()
	if first {
		s.c.log.Warn("lock session keepalive failed: CanStart is false", "session", s.id, "reason", what)
	}
}

// answer is one keepalive answer, matched with the send time of the
// keepalive it answers.
type answer struct {
	sent    time.Time
	ttl     time.Duration
	epoch   uint32
	removed []*lockv1.RemovedHold
	// unprotectedEnded: with ttl zero, a session lockd opened without
	// quorum ended with its unprotected holds.
	unprotectedEnded bool
}

// onAnswer applies one keepalive answer: an expired session is lost; holds
// released by force, and holds of an earlier epoch, are lost; otherwise the
// deadline moves to the answered keepalive's send time plus the TTL.
func (s *session) onAnswer(a answer) {
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return
	}
	if a.sent.After(s.lastAns) {
		s.lastAns = a.sent
	}
	// Holds released by force first: a force-release that also revoked the
	// session names the hold it was asked for, and its holder is told who
	// and why, not only that the session expired.
	fenced := s.removedLocked(a.removed)
	if a.ttl <= 0 {
		s.mu.Unlock()
		runFences(fenced)
		if a.unprotectedEnded {
			s.c.log.Warn("unprotected lock session ended (quorum returned, or it lapsed)", "session", s.id)
			s.lose(ErrUnprotectedEnded, true)
			return
		}
		s.c.log.Warn("lock session expired", "session", s.id)
		s.lose(ErrExpired, true)
		return
	}
	if a.epoch > s.epoch {
		s.epoch = a.epoch
		for _, h := range s.holds {
			// An unprotected hold (token 0) belongs to no epoch: it ends
			// when lockd says so (unprotectedEnded) or at its deadline. A
			// hold on another cluster follows that cluster's epoch.
			if h.state == held && !h.unprotected && h.lease == nil && h.token.GetEpoch() < a.epoch {
				s.c.log.Warn("lock lost: the epoch advanced", "key", h.key, "epoch", h.token.GetEpoch(), "now", a.epoch)
				fenced = append(fenced, s.loseHoldLocked(h, ErrEpoch)...)
			}
		}
	}
	if a.sent.After(s.lastOK) && s.c.now().Before(s.deadlineLocked()) {
		s.lastOK = a.sent
		s.fence.Reset(s.remainingLocked())
	}
	if !s.lastAns.Before(s.lastSent) {
		s.degraded = false
	}
	s.mu.Unlock()
	runFences(fenced)
}

// removedLocked loses the holds operators released by force, as a
// keepalive answer names them, each once; it returns the Locks to fence.
func (s *session) removedLocked(removed []*lockv1.RemovedHold) []*Lock {
	var fenced []*Lock
	for _, r := range removed {
		h := s.holds[r.GetKey()]
		if s.removed[r.GetHoldRevision()] || h == nil || h.state != held || h.token.GetRevision() != r.GetHoldRevision() {
			continue
		}
		s.removed[r.GetHoldRevision()] = true
		s.c.log.Warn("lock lost: released by force by operators", "key", h.key, "session", s.id,
			"requester", r.GetRequester(), "approver", r.GetApprover(), "reason", r.GetReason())
		fenced = append(fenced, s.loseHoldLocked(h, &ForcedError{Requester: r.GetRequester(), Approver: r.GetApprover(), Reason: r.GetReason()})...)
	}
	return fenced
}

// keepalives is the client's one KeepAlive stream, shared by its sessions.
// One goroutine owns the stream: it opens it (with a bounded context, never
// under a client mutex) and sends on it; another receives. Answers come
// back in the order of the requests, so each is matched with the oldest
// unanswered send time of its session: a late answer is credited to the
// earlier send, never to a later one. Renewals of cluster leases are
// answered as each cluster answers, and matched by their seq.
type keepalives struct {
	c    *Client
	reqs chan kaReq
	done chan struct{}
	seq  atomic.Uint64

	mu       sync.Mutex
	sessions map[int64]*session
	closed   bool
}

type kaReq struct {
	id   int64
	sent time.Time
	// route pins the stream the keepalive goes on (slot.route): "" for
	// sessions any lockd serves.
	route string
	// cluster and lease name a cluster lease to renew, with seq.
	cluster string
	lease   int64
	seq     uint64
}

// Keepalive stream bounds: opening a stream, and one Send on it, must not
// take longer than these, or the stream is dropped and opened again.
const (
	kaOpenTimeout = 2 * time.Second
	kaSendTimeout = time.Second
)

func newKeepalives(c *Client) *keepalives {
	k := &keepalives{c: c, reqs: make(chan kaReq, 1024), done: make(chan struct{}), sessions: map[int64]*session{}}
	go k.run()
	return k
}

func (k *keepalives) add(s *session) {
	k.mu.Lock()
	k.sessions[s.id] = s
	k.mu.Unlock()
}

func (k *keepalives) remove(s *session) {
	k.mu.Lock()
	if k.sessions[s.id] == s {
		delete(k.sessions, s.id)
	}
	k.mu.Unlock()
}

func (k *keepalives) lookup(id int64) *session {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sessions[id]
}

// send queues one keepalive; false when it cannot even be queued.
func (k *keepalives) send(id int64, route string, sent time.Time) bool {
	select {
	case k.reqs <- kaReq{id: id, sent: sent, route: route}:
		return true
	default:
		return false
	}
}

// sendLease queues one renewal of session id's lease on cluster; false
// when it cannot even be queued.
func (k *keepalives) sendLease(id int64, route, cluster string, lease int64, sent time.Time) bool {
	select {
	case k.reqs <- kaReq{id: id, sent: sent, route: route, cluster: cluster, lease: lease, seq: k.seq.Add(1)}:
		return true
	default:
		return false
	}
}

func (k *keepalives) close() {
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		close(k.done)
	}
	k.mu.Unlock()
}

// kaStream is one open KeepAlive stream and its unanswered sends.
type kaStream struct {
	stream lockv1.LockService_KeepAliveClient
	cancel context.CancelFunc
	broken chan struct{} // closed when the stream fails

	mu      sync.Mutex
	pending map[int64][]time.Time
	// leases are the unanswered cluster lease renewals, by seq.
	leases map[uint64]kaReq
}

func (ks *kaStream) fail() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	select {
	case <-ks.broken:
	default:
		close(ks.broken)
		ks.cancel()
	}
}

func (k *keepalives) run() {
	// streams are the open streams by route: one for the sessions any
	// lockd serves (""), one per session pinned to the lockd that holds it.
	streams := map[string]*kaStream{}
	defer func() {
		for _, ks := range streams {
			ks.fail()
		}
	}()
	for {
		var r kaReq
		select {
		case <-k.done:
			return
		case <-k.c.ctx.Done():
			return
		case r = <-k.reqs:
		}
		ks := streams[r.route]
		if ks != nil {
			select {
			case <-ks.broken:
				ks = nil
				delete(streams, r.route)
			default:
			}
		}
		if ks == nil {
			var err error
			if ks, err = k.open(r.route); err != nil {
				k.c.log.Debug("keepalive stream: open failed", "err", err)
				continue // unanswered: the session marks itself degraded
			}
			streams[r.route] = ks
		}
		ks.mu.Lock()
		if r.cluster != "" {
			ks.leases[r.seq] = r
		} else {
			ks.pending[r.id] = append(ks.pending[r.id], r.sent)
		}
		ks.mu.Unlock()
		watchdog := time.AfterFunc(kaSendTimeout, ks.fail)
		err := ks.stream.Send(&lockv1.KeepAliveRequest{SessionId: r.id, Cluster: r.cluster, Lease: r.lease, Seq: r.seq})
		watchdog.Stop()
		if err != nil {
			ks.fail()
			delete(streams, r.route)
		}
		k.dropIdle(streams)
	}
}

// dropIdle closes the pinned streams of sessions that are gone: a pinned
// stream serves one session, opened without quorum.
func (k *keepalives) dropIdle(streams map[string]*kaStream) {
	if len(streams) <= 1 {
		return
	}
	k.mu.Lock()
	live := map[string]bool{}
	for _, s := range k.sessions {
		live[s.slot.route] = true
	}
	k.mu.Unlock()
	for route, ks := range streams {
		if route != "" && !live[route] {
			ks.fail()
			delete(streams, route)
		}
	}
}

// open opens a stream, routed by route (see slot.route); it gives up after
// kaOpenTimeout.
func (k *keepalives) open(route string) (*kaStream, error) {
	ctx, cancel := context.WithCancel(withRoute(k.c.ctx, route))
	giveUp := time.AfterFunc(kaOpenTimeout, cancel)
	stream, err := k.c.lock.KeepAlive(ctx)
	if !giveUp.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		return nil, err
	}
	ks := &kaStream{stream: stream, cancel: cancel, broken: make(chan struct{}), pending: map[int64][]time.Time{},
		leases: map[uint64]kaReq{}}
	go k.recv(ks)
	return ks, nil
}

func (k *keepalives) recv(ks *kaStream) {
	for {
		resp, err := ks.stream.Recv()
		if err != nil {
			ks.fail()
			return
		}
		id := resp.GetSessionId()
		if resp.GetCluster() != "" {
			k.leaseAnswer(ks, resp)
			continue
		}
		ks.mu.Lock()
		q := ks.pending[id]
		if len(q) == 0 {
			ks.mu.Unlock()
			continue
		}
		sent := q[0]
		if len(q) == 1 {
			delete(ks.pending, id)
		} else {
			ks.pending[id] = q[1:]
		}
		ks.mu.Unlock()
		if resp.GetUncredited() {
			continue // lockd could not vouch for it: as good as no answer
		}
		if s := k.lookup(id); s != nil {
			s.onAnswer(answer{sent: sent, ttl: resp.GetTtl().AsDuration(), epoch: resp.GetEpoch(), removed: resp.GetRemoved(),
				unprotectedEnded: resp.GetUnprotectedEnded()})
		}
	}
}

// leaseAnswer matches the answer to a cluster lease renewal with its
// request, by seq, and applies it.
func (k *keepalives) leaseAnswer(ks *kaStream, resp *lockv1.KeepAliveResponse) {
	ks.mu.Lock()
	r, ok := ks.leases[resp.GetSeq()]
	delete(ks.leases, resp.GetSeq())
	ks.mu.Unlock()
	if !ok || r.id != resp.GetSessionId() || r.cluster != resp.GetCluster() || r.lease != resp.GetLease() || resp.GetUncredited() {
		return // not ours, or lockd could not vouch for it: as good as no answer
	}
	if s := k.lookup(r.id); s != nil {
		s.onLeaseAnswer(r.cluster, r.lease, r.sent, resp)
	}
}
