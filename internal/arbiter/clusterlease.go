package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// A session is one lease on the coord tier's cluster (the home cell). When
// it locks a key on another cluster it gets a lease there too, its cluster
// lease, recorded under keyspace.ClusterSessionKey on that lease: the
// session's holds and durable waiters on that cluster are on it, and within
// that cell it stands for the session (re-entrancy, leak detection, the
// waiting lines). There is one per session and cluster (put if absent), so
// every arbiter finds the same one.
//
// A cluster lease is renewed only when its holder names it (RenewLease), and
// lapses on its own otherwise: when the session closes it is revoked, and
// when the session expires nobody renews it any more. Each is renewed
// separately, so losing one cluster (a partition, quorum loss, a seal) ends
// only the holds there; the holder keeps a deadline per lease.

// clusterLeases are the cluster leases of one cell, by lease and by session.
type clusterLeases struct {
	byLease   leaseMap
	bySession leaseMap
}

// leaseMap maps IDs to sessions; it is safe for concurrent use.
type leaseMap struct {
	mu sync.Mutex
	m  map[int64]*sessionInfo
}

func (l *leaseMap) load(id int64) (*sessionInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[id]
	return s, ok
}

func (l *leaseMap) loadOrStore(id int64, s *sessionInfo) (*sessionInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.m[id]; ok {
		return prev, true
	}
	l.storeLocked(id, s)
	return s, false
}

func (l *leaseMap) store(id int64, s *sessionInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.storeLocked(id, s)
}

func (l *leaseMap) storeLocked(id int64, s *sessionInfo) {
	if l.m == nil {
		l.m = map[int64]*sessionInfo{}
	}
	l.m[id] = s
}

func (l *leaseMap) loadAndDelete(id int64) (*sessionInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[id]
	delete(l.m, id)
	return s, ok
}

// compareAndDelete deletes id if it maps to s.
func (l *leaseMap) compareAndDelete(id int64, s *sessionInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[id] == s {
		delete(l.m, id)
	}
}

// each calls f for every entry of a copy taken first.
func (l *leaseMap) each(f func(int64, *sessionInfo)) {
	l.mu.Lock()
	all := maps.Clone(l.m)
	l.mu.Unlock()
	for id, s := range all {
		f(id, s)
	}
}

// sessionIn is the caller's session as cell c knows it: the session itself
// in the home cell; elsewhere its lease there, whose ID is id, of session
// home (leaseIn made or found it).
func (a *Arbiter) sessionIn(ctx context.Context, c *cell, identity string, id, home int64) (*sessionInfo, error) {
	if c == a.home {
		return a.session(ctx, identity, id)
	}
	if s, ok := c.sessionLeases.byLease.load(id); ok {
		if s.identity != identity {
			return nil, ErrSessionNotFound
		}
		return s, nil
	}
	hs, err := a.session(ctx, identity, home)
	if err != nil {
		return nil, err
	}
	s, err := a.findLease(ctx, c, hs)
	if err != nil {
		return nil, err
	}
	if s == nil || s.id != id {
		return nil, ErrSessionNotFound
	}
	return s, nil
}

// rememberLease records kv, session hs's record in cell c, and returns the
// lease's session as the cell knows it.
func (c *cell) rememberLease(hs *sessionInfo, kv *mvccpb.KeyValue) (*sessionInfo, error) {
	var r sessionRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, fmt.Errorf("%w: session record %s: %v", ErrInternal, kv.Key, err)
	}
	if r.Session != hs.id || r.Identity != hs.identity {
		return nil, fmt.Errorf("%w: session record %s names session %d of %s, not %d of %s", ErrInternal, kv.Key, r.Session, r.Identity, hs.id, hs.identity)
	}
	s := &sessionInfo{id: kv.Lease, identity: hs.identity, ttl: hs.ttl, namespace: hs.namespace,
		openedAt: time.Unix(0, r.OpenedAt), session: hs.id, createRev: kv.CreateRevision}
	if prev, loaded := c.sessionLeases.byLease.loadOrStore(s.id, s); loaded {
		s = prev
	}
	c.sessionLeases.bySession.store(hs.id, s)
	return s, nil
}

// forgetLease drops a cluster lease that is gone.
func (c *cell) forgetLease(id int64) {
	s, ok := c.sessionLeases.byLease.loadAndDelete(id)
	if !ok {
		return
	}
	c.sessionLeases.bySession.compareAndDelete(s.session, s)
}

// homeOf is the session whose lease in cell c is lease: lease itself in
// the home cell; elsewhere the session its record names, from memory or
// else from the cell's records. Zero when no live record names lease (it
// lapsed, or was revoked).
func (a *Arbiter) homeOf(ctx context.Context, c *cell, lease int64) (int64, error) {
	if c == a.home || lease == 0 {
		return lease, nil
	}
	if s, ok := c.sessionLeases.byLease.load(lease); ok {
		return s.session, nil
	}
	homes, err := c.leaseHomes(ctx)
	return homes[lease], err
}

// leaseHomes maps every cluster lease of cell c to the session it extends,
// read in one range of the records' keys (a session has one per cluster).
func (c *cell) leaseHomes(ctx context.Context) (map[int64]int64, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, keyspace.ClusterSessionPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, storeErr(ctx, err)
	}
	homes := make(map[int64]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if id, ok := keyspace.ClusterSessionID(string(kv.Key)); ok {
			homes[kv.Lease] = id
		}
	}
	return homes, nil
}

// findLease reads session hs's lease in cell c; nil when it has none.
func (a *Arbiter) findLease(ctx context.Context, c *cell, hs *sessionInfo) (*sessionInfo, error) {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, keyspace.ClusterSessionKey(hs.id))
	if err != nil {
		return nil, storeErr(ctx, err)
	}
	if _, err := c.checkHeader(resp.Header); err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return c.rememberLease(hs, resp.Kvs[0])
}

// leaseIn returns session hs's lease in cell c (not the home cell), making
// one when it has none there. fresh is how long the lease lives at least,
// counted from a moment after the call began (it was granted or renewed
// here); it is zero when the lease is known, the one the caller says it
// already renews, whose deadline the caller keeps. A retired lease, one the
// caller gave up, is revoked (with whatever holds are left on it) and
// replaced.
func (a *Arbiter) leaseIn(ctx context.Context, c *cell, hs *sessionInfo, known, retired int64) (sub *sessionInfo, fresh time.Duration, err error) {
	if s, ok := c.sessionLeases.bySession.load(hs.id); ok && known != 0 && s.id == known && known != retired {
		return s, 0, nil
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sk := keyspace.ClusterSessionKey(hs.id)
	for range 3 {
		resp, err := c.cli.Get(cctx, sk)
		if err != nil {
			return nil, 0, storeErr(ctx, err)
		}
		if _, err := c.checkHeader(resp.Header); err != nil {
			return nil, 0, err
		}
		if len(resp.Kvs) > 0 && retired != 0 && resp.Kvs[0].Lease == retired {
			if _, err := c.cli.Revoke(cctx, clientv3.LeaseID(retired)); err != nil && !isLeaseNotFound(err) {
				return nil, 0, storeErr(ctx, err)
			}
			c.forgetLease(retired)
			c.log.Info("retired session lease revoked on cluster", "session", hs.id, "lease", retired, "cluster", c.name)
			continue
		}
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			s, err := c.rememberLease(hs, kv)
			if err != nil || kv.Lease == known {
				return s, 0, err
			}
			ka, err := c.cli.KeepAliveOnce(cctx, clientv3.LeaseID(kv.Lease))
			if isLeaseNotFound(err) {
				c.forgetLease(kv.Lease) // it lapsed a moment ago: make another
				continue
			}
			if err != nil {
				return nil, 0, storeErr(ctx, err)
			}
			return s, time.Duration(ka.TTL) * time.Second, nil
		}
		s, made, err := a.makeLease(ctx, cctx, c, hs)
		if err != nil || made {
			return s, hs.ttl, err
		}
		// Another arbiter made one meanwhile: use it.
	}
	return nil, 0, fmt.Errorf("%w: session %d's lease on cluster %s kept changing", ErrUnavailable, hs.id, c.name)
}

// makeLease grants session hs a lease in cell c and records it, unless the
// session has one there already (made is false then).
func (a *Arbiter) makeLease(ctx, cctx context.Context, c *cell, hs *sessionInfo) (s *sessionInfo, made bool, err error) {
	lease, err := c.cli.Grant(cctx, int64(hs.ttl/time.Second))
	if err != nil {
		return nil, false, storeErr(ctx, err)
	}
	sk := keyspace.ClusterSessionKey(hs.id)
	rec, _ := json.Marshal(sessionRecord{Identity: hs.identity, TTL: int64(hs.ttl / time.Second), Namespace: hs.namespace,
		OpenedAt: a.now().UnixNano(), Session: hs.id})
	resp, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(sk), "=", 0)).
		Then(clientv3.OpPut(sk, string(rec), clientv3.WithLease(lease.ID))).Commit()
	if err == nil {
		_, err = c.checkHeader(resp.Header)
	}
	if err != nil || !resp.Succeeded {
		if _, rerr := c.cli.Revoke(context.WithoutCancel(cctx), lease.ID); rerr != nil && !isLeaseNotFound(rerr) {
			c.log.Warn("could not revoke an unused session lease; it lapses by itself", "session", hs.id, "err", rerr)
		}
		if err != nil {
			return nil, false, storeErr(ctx, err)
		}
		return nil, false, nil
	}
	c.noteTTL(hs.ttl)
	s, err = c.rememberLease(hs, &mvccpb.KeyValue{Key: []byte(sk), Value: rec, Lease: int64(lease.ID), CreateRevision: resp.Header.Revision})
	if err != nil {
		return nil, false, err
	}
	c.log.Info("session lease opened on cluster", "session", hs.id, "lease", s.id, "cluster", c.name, "identity", hs.identity)
	return s, true, nil
}

// renewWhileWaiting renews lease every third of ttl until the returned
// stop is called (or ctx ends): a lease made for a request that waits in
// line, which its holder does not know of yet.
func (c *cell) renewWhileWaiting(ctx context.Context, lease int64, ttl time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := c.callCtx(ctx)
			_, err := c.cli.KeepAliveOnce(cctx, clientv3.LeaseID(lease))
			ccancel()
			if err != nil && ctx.Err() == nil {
				c.log.Debug("renewing a waiting session's new lease failed", "lease", lease, "cluster", c.name, "err", err)
			}
		}
	}()
	return cancel
}

// LeaseRenewal is the answer to RenewLease.
type LeaseRenewal struct {
	Cluster string
	Lease   int64
	// TTL remaining after renewal, counted from a moment after the call
	// began; zero when the lease is gone, and every hold on it.
	TTL time.Duration
	// Epoch of the cluster when etcd answered (as KeepAliveAnswer.Epoch):
	// the session's holds there from an earlier epoch are gone.
	Epoch uint32
	// Uncredited: etcd renewed the lease but lockd could not pair the answer
	// with a recent epoch read of that cluster, or the cluster is sealed;
	// the holder treats it as unanswered.
	Uncredited bool
	// Removed are holds on the lease that operators released by force.
	Removed []RemovedHold
}

// RenewLease renews session's lease on cluster (not the coord cluster:
// the session's own lease there is renewed by its keepalive). The lease must
// be the session's there and the session the caller's; otherwise, or when
// it has lapsed, the answer has TTL zero. An error means the cluster could
// not be asked: the renewal did not happen as far as the caller can know.
func (a *Arbiter) RenewLease(ctx context.Context, caller identity.Caller, session int64, cluster string, lease int64) (LeaseRenewal, error) {
	c, err := a.cellNamed(cluster)
	if err != nil {
		return LeaseRenewal{}, err
	}
	if c == a.home {
		return LeaseRenewal{}, fmt.Errorf("%w: cluster: %s is the coord cluster; its lease is the session, renewed by its keepalive", ErrInvalid, cluster)
	}
	ans := LeaseRenewal{Cluster: c.name, Lease: lease}
	gone := func() (LeaseRenewal, error) {
		ans.Removed = a.removed.of(lease)
		if st := c.epoch.Load(); st != nil {
			ans.Epoch = st.epoch
		}
		return ans, nil
	}
	// The session must live too: a lease of a session that ended is left
	// to lapse, whoever still renews it.
	_, err = a.session(ctx, caller.String(), session)
	var sub *sessionInfo
	if err == nil {
		sub, err = a.sessionIn(ctx, c, caller.String(), lease, session)
	}
	switch {
	case errors.Is(err, ErrSessionNotFound) || (err == nil && sub.session != session):
		return gone()
	case err != nil:
		return LeaseRenewal{}, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.KeepAliveOnce(cctx, clientv3.LeaseID(lease))
	if isLeaseNotFound(err) {
		c.forgetLease(lease)
		return gone()
	}
	if err != nil {
		return LeaseRenewal{}, storeErr(ctx, err)
	}
	st, err := c.checkHeader(resp.ResponseHeader)
	if err == nil {
		st, err = c.confirmedEpoch(ctx)
	}
	if err != nil || st.sealed {
		a.metrics.keepAlivesNotCredited.Inc()
		ans.Uncredited = true
		return ans, nil
	}
	ans.Epoch, ans.TTL, ans.Removed = st.epoch, time.Duration(resp.TTL)*time.Second, a.removed.of(lease)
	return ans, nil
}

// revokeLeases revokes session home's leases on every cluster but the
// coord's and except's (nil: none excepted), as it ends. The error names
// each cluster whose lease could not be revoked; that lease lapses within
// its TTL, since nobody renews a lease of a session that ended.
func (a *Arbiter) revokeLeases(ctx context.Context, home int64, except *cell, fr *forceRecord) error {
	var errs []error
	for _, c := range a.cells[1:] {
		if c == except {
			continue
		}
		if err := a.revokeLeaseIn(ctx, c, home, fr); err != nil {
			c.log.Warn("could not revoke an ended session's lease on a cluster; it lapses within its TTL", "session", home, "cluster", c.name, "err", err)
			errs = append(errs, fmt.Errorf("session %d's lease on cluster %s: %w", home, c.name, err))
		}
	}
	return errors.Join(errs...)
}

// revokeLeaseIn revokes session home's lease in cell c, if it has one. It
// first leaves there what the audit history needs to say why the holds on
// it end: the lease's record marked closing when the session closes, or
// fr's record of a revoke by force-release.
func (a *Arbiter) revokeLeaseIn(ctx context.Context, c *cell, home int64, fr *forceRecord) error {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sk := keyspace.ClusterSessionKey(home)
	resp, err := c.cli.Get(cctx, sk)
	if err != nil {
		return storeErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	kv := resp.Kvs[0]
	var rec sessionRecord
	switch {
	case fr != nil:
		if err := a.putRevokeRecord(ctx, cctx, c, *fr, kv.Lease, home); err != nil {
			return err
		}
	case json.Unmarshal(kv.Value, &rec) == nil:
		rec.Closing = true
		b, _ := json.Marshal(rec)
		_, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(sk), "=", kv.ModRevision)).
			Then(clientv3.OpPut(sk, string(b), clientv3.WithLease(clientv3.LeaseID(kv.Lease)))).Commit()
		if err != nil && !isLeaseNotFound(err) { // gone already: nothing to revoke below
			return storeErr(ctx, err)
		}
	}
	if _, err := c.cli.Revoke(cctx, clientv3.LeaseID(kv.Lease)); err != nil && !isLeaseNotFound(err) {
		return storeErr(ctx, err)
	}
	c.forgetLease(kv.Lease)
	return nil
}

// watchLeases forgets the cell's cluster leases that go away (expiry or
// revoke): the list-then-watch of watchSessions. A listing forgets only
// leases made before it was read, so one made meanwhile stays.
func (c *cell) watchLeases(ctx context.Context) {
	c.follow(ctx, keyspace.ClusterSessionPrefix, func(kvs []*mvccpb.KeyValue, rev int64) {
		live := make(map[int64]bool, len(kvs))
		for _, kv := range kvs {
			live[kv.Lease] = true
		}
		c.sessionLeases.byLease.each(func(id int64, s *sessionInfo) {
			if !live[id] && s.createRev <= rev {
				c.forgetLease(id)
			}
		})
	}, func(ev *clientv3.Event) {
		if ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil {
			c.forgetLease(ev.PrevKv.Lease)
		}
	})
}
