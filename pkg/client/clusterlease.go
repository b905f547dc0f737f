package client

import (
	"time"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// clusterLease is a session's lease on an etcd cluster other than the coord
// cluster, which lockd made when the session locked a key there: the holds
// there are attached to it and live while it is renewed. The client renews
// it with the session's keepalives and keeps a deadline for it alone, so a
// cluster that stops answering fences only the holds on it. Its fields are
// guarded by the session's mu.
type clusterLease struct {
	cluster string
	id      int64
	// deadline is the local deadline: the latest send time of a renewal
	// (or of the Acquire that made it) plus the TTL it was answered with,
	// minus fenceMargin.
	deadline time.Time
	lastSent time.Time // send time of the newest renewal
	lastAns  time.Time // send time of the newest renewal answered
	degraded bool      // a renewal failed since the last success
	epoch    uint32    // the highest epoch of the cluster an answer carried
	fence    *time.Timer
}

func (l *clusterLease) remaining(now time.Time) time.Duration { return max(l.deadline.Sub(now), 0) }

// holdDeadlineLocked is the local deadline of h: its lease's, or the
// session's for a hold on the coord cluster.
func (s *session) holdDeadlineLocked(h *hold) time.Time {
	if h.lease != nil {
		return h.lease.deadline
	}
	return s.deadlineLocked()
}

func (s *session) holdRemainingLocked(h *hold) time.Duration {
	return max(s.holdDeadlineLocked(h).Sub(s.c.now()), 0)
}

// holdHealthyLocked reports whether new work may start under h: the
// renewals of its own lease are answered and its deadline is ahead.
func (s *session) holdHealthyLocked(h *hold) bool {
	if h.lease != nil {
		return s.lost == nil && !h.lease.degraded && s.c.now().Before(h.lease.deadline)
	}
	return s.healthyLocked()
}

// checkHoldDeadline runs the deadline check of h's lease (the session's for
// a hold on the coord cluster).
func (s *session) checkHoldDeadline(h *hold) {
	s.mu.Lock()
	l := h.lease
	s.mu.Unlock()
	if l != nil {
		s.checkLeaseDeadline(l)
		return
	}
	s.checkDeadline()
}

// leasesLocked are the leases to name in an Acquire: the ones renewed, and
// the ones given up, by cluster.
func (s *session) leasesLocked() (known, retired map[string]int64) {
	for name, l := range s.leases {
		if known == nil {
			known = map[string]int64{}
		}
		known[name] = l.id
	}
	if len(s.retired) > 0 {
		retired = make(map[string]int64, len(s.retired))
		for name, id := range s.retired {
			retired[name] = id
		}
	}
	return known, retired
}

// adoptLeaseLocked records that lockd put a hold on lease id of cluster, as
// answered to an Acquire sent at sent: ttl, when not zero, is how long it
// lives from then. It returns the lease (or why a hold on it is lost at
// once) and the Locks to fence because lockd replaced a lease the client
// knew (the old one expired, with its holds).
func (s *session) adoptLeaseLocked(cluster string, id int64, ttl time.Duration, sent time.Time) (*clusterLease, []*Lock, error) {
	if s.retired[cluster] == id {
		return nil, nil, ErrDeadline // given up meanwhile: its holds count as lost
	}
	l := s.leases[cluster]
	var fenced []*Lock
	if l != nil && l.id != id {
		s.c.log.Warn("locks lost: lockd replaced the session's lease on a cluster; the old one expired", "session", s.id, "cluster", cluster)
		fenced = s.dropLeaseLocked(l, ErrExpired)
		l = nil
	}
	switch {
	case l == nil && ttl <= 0:
		// One the client knew and dropped meanwhile: a renewal found it gone.
		return nil, fenced, ErrExpired
	case l == nil:
		l = &clusterLease{cluster: cluster, id: id, deadline: sent.Add(ttl - fenceMargin), lastSent: sent, lastAns: sent}
		l.fence = time.AfterFunc(l.remaining(s.c.now()), func() { s.checkLeaseDeadline(l) })
		s.leases[cluster] = l
	case ttl > 0:
		s.extendLocked(l, sent, ttl)
	}
	return l, fenced, nil
}

// extendLocked moves l's deadline to sent+ttl-fenceMargin when that is
// later, unless the deadline has passed already (the fence is due).
func (s *session) extendLocked(l *clusterLease, sent time.Time, ttl time.Duration) {
	now := s.c.now()
	if d := sent.Add(ttl - fenceMargin); d.After(l.deadline) && now.Before(l.deadline) {
		l.deadline = d
		l.fence.Reset(l.remaining(now))
	}
}

// dropLeaseLocked forgets l and loses every hold on it with err; it
// returns the Locks whose onFence must run. A hold on l being released or
// resolved is left to that.
func (s *session) dropLeaseLocked(l *clusterLease, err error) []*Lock {
	if s.leases[l.cluster] == l {
		delete(s.leases, l.cluster)
	}
	l.fence.Stop()
	var fenced []*Lock
	for _, h := range s.holds {
		if h.lease == l && h.state == held {
			fenced = append(fenced, s.loseHoldLocked(h, err)...)
		}
	}
	return fenced
}

// checkLeaseDeadline runs on l's fence timer: at its local deadline every
// hold on it is lost, and the lease is retired: never renewed again, and
// named as retired in later Acquires so lockd revokes it rather than reuse
// it. The session and its other leases go on.
func (s *session) checkLeaseDeadline(l *clusterLease) {
	s.mu.Lock()
	if s.lost != nil || s.leases[l.cluster] != l {
		s.mu.Unlock()
		return
	}
	if left := l.remaining(s.c.now()); left > 0 {
		l.fence.Reset(left)
		s.mu.Unlock()
		return
	}
	s.retired[l.cluster] = l.id
	fenced := s.dropLeaseLocked(l, ErrDeadline)
	s.mu.Unlock()
	s.c.log.Warn("locks on a cluster lost: the local deadline of the session's lease there passed", "session", s.id, "cluster", l.cluster)
	runFences(fenced)
}

// renewLeases sends a renewal of each of the session's cluster leases,
// with send time sent, and marks a lease degraded when its renewal is not
// answered within answerWithin.
func (s *session) renewLeases(sent time.Time, answerWithin time.Duration) {
	s.mu.Lock()
	leases := make([]*clusterLease, 0, len(s.leases))
	for _, l := range s.leases {
		l.lastSent = sent
		leases = append(leases, l)
	}
	s.mu.Unlock()
	for _, l := range leases {
		if !s.c.ka.sendLease(s.id, s.slot.route, l.cluster, l.id, sent) {
			s.failLease(l, "send")
			continue
		}
		time.AfterFunc(answerWithin, func() {
			s.mu.Lock()
			unanswered := l.lastAns.Before(sent)
			s.mu.Unlock()
			if unanswered {
				s.failLease(l, "no answer")
			}
		})
	}
}

func (s *session) failLease(l *clusterLease, what string) {
	s.mu.Lock()
	first := !l.degraded && s.lost == nil && s.leases[l.cluster] == l
	l.degraded = true
	s.mu.Unlock()
	if first {
		s.c.log.Warn("lock lease renewal failed: CanStart is false for locks on its cluster", "session", s.id, "cluster", l.cluster, "reason", what)
	}
}

// onLeaseAnswer applies the answer to a renewal of lease id on cluster
// sent at sent, as onAnswer does for the session itself, to the holds on
// that lease only.
func (s *session) onLeaseAnswer(cluster string, id int64, sent time.Time, resp *lockv1.KeepAliveResponse) {
	s.mu.Lock()
	l := s.leases[cluster]
	if s.lost != nil || l == nil || l.id != id {
		s.mu.Unlock()
		return
	}
	if sent.After(l.lastAns) {
		l.lastAns = sent
	}
	fenced := s.removedLocked(resp.GetRemoved())
	ttl := resp.GetTtl().AsDuration()
	if ttl <= 0 {
		fenced = append(fenced, s.dropLeaseLocked(l, ErrExpired)...)
		s.mu.Unlock()
		s.c.log.Warn("locks on a cluster lost: the session's lease there expired", "session", s.id, "cluster", cluster)
		runFences(fenced)
		return
	}
	if e := resp.GetEpoch(); e > l.epoch {
		l.epoch = e
		for _, h := range s.holds {
			if h.lease == l && h.state == held && h.token.GetEpoch() < e {
				s.c.log.Warn("lock lost: the epoch of its cluster advanced", "key", h.key, "cluster", cluster, "epoch", h.token.GetEpoch(), "now", e)
				fenced = append(fenced, s.loseHoldLocked(h, ErrEpoch)...)
			}
		}
	}
	s.extendLocked(l, sent, ttl)
	if !l.lastAns.Before(l.lastSent) {
		l.degraded = false
	}
	s.mu.Unlock()
	runFences(fenced)
}
