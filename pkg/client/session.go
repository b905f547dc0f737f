package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// fenceMargin is subtracted from the TTL for the local deadline.
const fenceMargin = time.Second

// session is one lockd session (one etcd lease) shared by every hold of its
// TTL in this client.
type session struct {
	c   *Client
	id  int64
	ttl time.Duration

	mu       sync.Mutex
	lastOK   time.Time // send time of the last successful keepalive
	degraded bool      // a keepalive failed since the last success
	lost     error
	locks    map[string]*Lock
	resp     chan kaResult
	stop     chan struct{}
}

type kaResult struct {
	sent  time.Time
	ttl   time.Duration
	epoch uint32
}

// session returns the open session for ttl, opening one if needed.
func (c *Client) session(ctx context.Context, ttl time.Duration) (*session, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if s := c.sessions[ttl]; s != nil {
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	sent := c.now()
	resp, err := c.lock.OpenSession(ctx, &lockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)})
	if err != nil {
		return nil, err
	}
	s := &session{c: c, id: resp.GetSessionId(), ttl: ttl, lastOK: sent,
		locks: map[string]*Lock{}, resp: make(chan kaResult, 64), stop: make(chan struct{})}
	c.mu.Lock()
	if other := c.sessions[ttl]; other != nil || c.closed {
		c.mu.Unlock()
		// Lost a race with another Acquire: keep the first, drop ours.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = c.lock.CloseSession(cctx, &lockv1.CloseSessionRequest{SessionId: s.id})
		if other == nil {
			return nil, ErrClosed
		}
		return other, nil
	}
	c.sessions[ttl] = s
	c.mu.Unlock()
	go s.run()
	return s, nil
}

func (s *session) healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.degraded && s.lost == nil && s.c.now().Before(s.lastOK.Add(s.ttl-fenceMargin))
}

func (s *session) remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.lastOK.Add(s.ttl - fenceMargin).Sub(s.c.now())
	if d < 0 {
		return 0
	}
	return d
}

// lose ends the session locally: every lock is lost with err (onFence runs
// when fence is set) and the client forgets the session.
func (s *session) lose(err error, fence bool) {
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return
	}
	s.lost = err
	close(s.stop)
	locks := make([]*Lock, 0, len(s.locks))
	for _, l := range s.locks {
		locks = append(locks, l)
	}
	s.mu.Unlock()
	s.c.mu.Lock()
	if s.c.sessions[s.ttl] == s {
		delete(s.c.sessions, s.ttl)
	}
	s.c.mu.Unlock()
	for _, l := range locks {
		l.lose(err, fence)
	}
}

// run keeps the session alive: a keepalive every TTL/3, a failure mark
// when one is not answered within min(TTL/3, 1s), and the fence at the
// local deadline.
func (s *session) run() {
	interval := s.ttl / 3
	answerWithin := min(interval, time.Second)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	fence := time.NewTimer(s.remaining())
	defer fence.Stop()
	var answerBy <-chan time.Time
	// lastSent is the send time of the newest keepalive. Only its answer
	// clears a failure mark: answers to sends on a stream that broke never
	// come, so counting outstanding sends would never get back to zero.
	var lastSent, lastAnswered time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-s.c.ctx.Done():
			return
		case <-fence.C:
			if s.remaining() > 0 {
				fence.Reset(s.remaining())
				continue
			}
			s.c.log.Warn("lock session lost: local deadline passed", "session", s.id)
			s.lose(ErrDeadline, true)
			s.closeAsync()
			return
		case <-tick.C:
			sent := s.c.now()
			if err := s.c.sendKeepAlive(s, sent); err != nil {
				s.fail("send", err)
				continue
			}
			lastSent = sent
			answerBy = time.After(answerWithin)
		case <-answerBy:
			answerBy = nil
			if lastAnswered.Before(lastSent) {
				s.fail("no answer", nil)
			}
		case r := <-s.resp:
			if r.sent.After(lastAnswered) {
				lastAnswered = r.sent
			}
			if r.ttl <= 0 {
				s.c.log.Warn("lock session expired", "session", s.id)
				s.lose(ErrExpired, true)
				return
			}
			s.dropBefore(r.epoch)
			s.mu.Lock()
			if r.sent.After(s.lastOK) && s.c.now().Before(s.lastOK.Add(s.ttl-fenceMargin)) {
				s.lastOK = r.sent
			}
			if !lastAnswered.Before(lastSent) {
				s.degraded = false
				answerBy = nil
			}
			s.mu.Unlock()
			fence.Reset(s.remaining())
		}
	}
}

// dropBefore loses, with ErrEpoch, every lock granted before epoch: the
// epoch advance deleted those holds while the session itself lived on.
func (s *session) dropBefore(epoch uint32) {
	s.mu.Lock()
	var gone []*Lock
	for k, l := range s.locks {
		if l.epoch < epoch {
			gone = append(gone, l)
			delete(s.locks, k)
		}
	}
	s.mu.Unlock()
	for _, l := range gone {
		s.c.log.Warn("lock lost: the epoch advanced", "key", l.key, "epoch", l.epoch, "now", epoch)
		l.lose(ErrEpoch, true)
	}
}

func (s *session) fail(what string, err error) {
	s.mu.Lock()
	first := !s.degraded
	s.degraded = true
	s.mu.Unlock()
	if first {
		s.c.log.Warn("lock session keepalive failed: CanStart is false", "session", s.id, "reason", what, "err", err)
	}
}

// closeAsync tells lockd to end a session we gave up on, best effort.
func (s *session) closeAsync() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = s.c.lock.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: s.id})
	}()
}

// kaStream is the client's one KeepAlive stream. Answers come back in the
// order of the requests, so each answer is matched with the oldest
// unanswered send time of its session: a late answer is credited to the
// earlier send, never to a later one.
type kaStream struct {
	stream  lockv1.LockService_KeepAliveClient
	mu      sync.Mutex // guards Send and pending
	pending map[int64][]time.Time
	broken  bool
}

// sendKeepAlive sends one keepalive for s on the shared stream, opening the
// stream when needed.
func (c *Client) sendKeepAlive(s *session, sent time.Time) error {
	ks, err := c.kaStream()
	if err != nil {
		return err
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.broken {
		return errBroken
	}
	if err := ks.stream.Send(&lockv1.KeepAliveRequest{SessionId: s.id}); err != nil {
		ks.broken = true
		return err
	}
	ks.pending[s.id] = append(ks.pending[s.id], sent)
	return nil
}

// errBroken: the keepalive stream failed; the next tick opens a new one.
var errBroken = errors.New("client: keepalive stream broken")

func (c *Client) kaStream() (*kaStream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ka != nil {
		c.ka.mu.Lock()
		broken := c.ka.broken
		c.ka.mu.Unlock()
		if !broken {
			return c.ka, nil
		}
	}
	stream, err := c.lock.KeepAlive(c.ctx)
	if err != nil {
		return nil, err
	}
	ks := &kaStream{stream: stream, pending: map[int64][]time.Time{}}
	c.ka = ks
	go c.recvKeepAlives(ks)
	return ks, nil
}

func (c *Client) recvKeepAlives(ks *kaStream) {
	for {
		resp, err := ks.stream.Recv()
		if err != nil {
			ks.mu.Lock()
			ks.broken = true
			ks.mu.Unlock()
			return
		}
		id := resp.GetSessionId()
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
		c.mu.Lock()
		var s *session
		for _, x := range c.sessions {
			if x.id == id {
				s = x
			}
		}
		c.mu.Unlock()
		if s == nil {
			continue
		}
		select {
		case s.resp <- kaResult{sent: sent, ttl: resp.GetTtl().AsDuration(), epoch: resp.GetEpoch()}:
		default:
		}
	}
}
