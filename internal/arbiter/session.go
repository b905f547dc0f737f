package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// sessionRecord is the value of /s/<lease id>, on the session's own lease.
type sessionRecord = keyspace.Session

type sessionInfo struct {
	id        int64
	identity  string
	ttl       time.Duration
	namespace string
	openedAt  time.Time
	lastKA    atomic.Int64 // unix nanos of the last keepalive answered here
	// openedHere and closing tell an expiry from a close for the
	// expiries-without-release count.
	openedHere bool
	// local: opened without quorum, known only to this arbiter (open.go);
	// lastKA alone keeps it alive.
	local   bool
	closing atomic.Bool
	// session, for a session's lease on a cluster other than the coord's
	// (clusterlease.go), is the session it extends, and createRev the
	// create revision of its record there.
	session   int64
	createRev int64
}

// SessionInfo describes a session.
type SessionInfo struct {
	ID            int64
	Identity      string
	TTL           time.Duration
	OpenedAt      time.Time
	LastKeepAlive time.Time // zero when this arbiter served none
	Remaining     time.Duration
	Holds         int
}

func sessionKey(id int64) string { return keyspace.SessionKey(id) }

// sessionNamespace is the metrics namespace of an identity: its single
// namespace, or "-" when it has grants in none or several.
func (a *Arbiter) sessionNamespace(identity string) string {
	ns := a.policy.Load().Authz.NamespacesOf(identity)
	if len(ns) == 1 {
		return ns[0]
	}
	return "-"
}

// OpenSession grants a lease with ttl owned by the caller. An identity may
// have at most MaxSessionsPerIdentity sessions opened on this arbiter.
func (a *Arbiter) OpenSession(ctx context.Context, caller identity.Caller, ttl time.Duration) (int64, error) {
	c := a.home
	who := caller.String()
	if ttl < class.MinTTL || ttl > class.MaxTTL || ttl%time.Second != 0 {
		return 0, fmt.Errorf("%w: ttl: must be whole seconds between %s and %s, got %s", ErrInvalid, class.MinTTL, class.MaxTTL, ttl)
	}
	ns := a.sessionNamespace(who)
	if err := a.reserveSession(who); err != nil {
		a.metrics.quotaRefusals.WithLabelValues(ns, "sessions").Inc()
		return 0, err
	}
	kept := false
	defer func() {
		if !kept {
			a.unreserveSession(who)
		}
	}()
	if a.openPosture() {
		kept = true
		return a.openSessionLocal(who, ns, ttl)
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	lease, err := c.cli.Grant(cctx, int64(ttl/time.Second))
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	now := a.now()
	rec, _ := json.Marshal(sessionRecord{Identity: who, TTL: int64(ttl / time.Second), Namespace: ns, OpenedAt: now.UnixNano()})
	resp, err := c.cli.Put(cctx, sessionKey(int64(lease.ID)), string(rec), clientv3.WithLease(lease.ID))
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	if _, err := c.checkHeader(resp.Header); err != nil && !errors.Is(err, ErrSealed) {
		return 0, err
	}
	info := &sessionInfo{id: int64(lease.ID), identity: who, ttl: ttl, namespace: ns, openedAt: now, openedHere: true}
	a.sessions.Store(info.id, info)
	kept = true
	c.noteTTL(ttl)
	a.metrics.sessionsOpened.WithLabelValues(ns).Inc()
	a.log.Info("session opened", "session", info.id, "identity", who, "ttl", ttl.String())
	return info.id, nil
}

// reserveSession counts a session of identity opened here against its
// quota; forgetSession gives it back.
func (a *Arbiter) reserveSession(identity string) error {
	a.smu.Lock()
	defer a.smu.Unlock()
	if n := a.sessionsBy[identity]; n >= a.maxSess {
		return fmt.Errorf("%w: %s has %d sessions open on this lockd (limit %d, --max-sessions-per-identity); "+
			"close sessions it no longer uses (one client per process shares one session per TTL)", ErrQuota, identity, n, a.maxSess)
	}
	a.sessionsBy[identity]++
	return nil
}

func (a *Arbiter) unreserveSession(identity string) {
	a.smu.Lock()
	defer a.smu.Unlock()
	if a.sessionsBy[identity]--; a.sessionsBy[identity] <= 0 {
		delete(a.sessionsBy, identity)
	}
}

// forgetSession drops a session from the cache (it was closed, expired or
// found gone) and returns it; a session opened here gives its quota back.
func (a *Arbiter) forgetSession(id int64) (*sessionInfo, bool) {
	v, ok := a.sessions.LoadAndDelete(id)
	if !ok {
		return nil, false
	}
	s := v.(*sessionInfo)
	if s.openedHere {
		a.unreserveSession(s.identity)
	}
	return s, true
}

// session returns the session if it exists and identity owns it.
func (a *Arbiter) session(ctx context.Context, identity string, id int64) (*sessionInfo, error) {
	c := a.home
	if v, ok := a.sessions.Load(id); ok {
		s := v.(*sessionInfo)
		if s.identity != identity {
			return nil, ErrSessionNotFound
		}
		return s, nil
	}
	if isLocal(id) {
		return nil, ErrSessionNotFound // a local session is never in etcd
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, sessionKey(id))
	if err != nil {
		return nil, storeErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrSessionNotFound
	}
	s, err := decodeSession(resp.Kvs[0])
	if err != nil {
		return nil, err
	}
	c.noteTTL(s.ttl)
	if _, loaded := a.sessions.LoadOrStore(id, s); loaded {
		return a.session(ctx, identity, id)
	}
	if s.identity != identity {
		return nil, ErrSessionNotFound
	}
	return s, nil
}

func decodeSession(kv *mvccpb.KeyValue) (*sessionInfo, error) {
	var r sessionRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, fmt.Errorf("%w: session record %s: %v", ErrInternal, kv.Key, err)
	}
	return &sessionInfo{id: kv.Lease, identity: r.Identity, ttl: time.Duration(r.TTL) * time.Second,
		namespace: r.Namespace, openedAt: time.Unix(0, r.OpenedAt)}, nil
}

// CloseSession revokes the session's lease: all its holds are released in
// one committed entry.
func (a *Arbiter) CloseSession(ctx context.Context, caller identity.Caller, id int64) error {
	c := a.home
	s, err := a.session(ctx, caller.String(), id)
	if err != nil {
		return err
	}
	if s.local {
		a.dropLocalSession(id)
		a.log.Info("local session closed", "session", id, "identity", s.identity)
		return nil
	}
	s.closing.Store(true)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	// Mark the record closing first: the audit history tells a close from
	// an expiry by the deleted record's value (both delete the same keys in
	// one revision). A marked session whose revoke does not happen expires
	// later and is still recorded as closed: its holder asked.
	sk := sessionKey(id)
	rec, _ := json.Marshal(sessionRecord{Identity: s.identity, TTL: int64(s.ttl / time.Second), Namespace: s.namespace,
		OpenedAt: s.openedAt.UnixNano(), Closing: true})
	if _, err := c.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(sk), ">", 0)).
		Then(clientv3.OpPut(sk, string(rec), clientv3.WithLease(clientv3.LeaseID(id)))).Commit(); err != nil {
		if isLeaseNotFound(err) {
			a.forgetSession(id)
			return nil
		}
		return storeErr(ctx, err)
	}
	if _, err := c.cli.Revoke(cctx, clientv3.LeaseID(id)); err != nil {
		if isLeaseNotFound(err) {
			a.forgetSession(id)
			return nil
		}
		return storeErr(ctx, err)
	}
	a.forgetSession(id)
	_ = a.revokeLeases(ctx, id, nil, nil) // logged there; each lapses within its TTL
	a.log.Info("session closed", "session", id, "identity", s.identity)
	return nil
}

// watchSessions drops cached sessions when their key goes away (expiry or
// revoke) and counts expiries of sessions opened here. It lists the session
// keys at one revision and watches from the next, so no delete is missed;
// after a compaction or a broken watch it lists again and drops what is gone.
func (a *Arbiter) watchSessions(ctx context.Context) {
	a.home.follow(ctx, sessionPrefix, func(kvs []*mvccpb.KeyValue, _ int64) {
		live := make(map[int64]bool, len(kvs))
		for _, kv := range kvs {
			live[kv.Lease] = true
		}
		a.sessions.Range(func(k, _ any) bool {
			if id := k.(int64); !live[id] && !isLocal(id) {
				a.forgetSession(k.(int64))
			}
			return true
		})
	}, func(ev *clientv3.Event) {
		if ev.Type != clientv3.EventTypeDelete || ev.PrevKv == nil {
			return
		}
		id := ev.PrevKv.Lease
		if s, ok := a.forgetSession(id); ok && s.openedHere && !s.closing.Load() {
			a.metrics.ExpiriesWithoutRelease.WithLabelValues(s.namespace).Inc()
			a.log.Warn("session expired without close", "session", id, "identity", s.identity, "namespace", s.namespace)
		}
	})
}

// follow lists prefix at one revision (sync) and then applies every later
// change under it (event) from the next revision on, with PrevKV: the
// snapshot-then-watch of clientv3/mirror. On compaction or any watch failure
// it lists again. It returns when ctx ends.
func (c *cell) follow(ctx context.Context, prefix string, sync func(kvs []*mvccpb.KeyValue, rev int64), event func(*clientv3.Event)) {
	for ctx.Err() == nil {
		changed := c.storeChangedCh()
		rev, err := c.list(ctx, prefix, sync)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("listing for a watch failed", "prefix", prefix, "err", err)
			}
			pause(ctx, c.poll)
			continue
		}
		// The watch also ends when the epoch state changes: a restored or
		// rebuilt store's revisions start lower than rev.
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-wctx.Done():
			}
		}()
		wch := c.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(),
			clientv3.WithPrevKV(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if resp.Err() != nil || resp.CompactRevision != 0 {
				break
			}
			for _, ev := range resp.Events {
				event(ev)
			}
		}
		cancel()
		pause(ctx, c.poll)
	}
}

// storeChangedCh is closed at the next epoch state change.
func (c *cell) storeChangedCh() <-chan struct{} {
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	if c.storeChanged == nil {
		c.storeChanged = make(chan struct{})
	}
	return c.storeChanged
}

// list reads every key under prefix at one revision, in pages, and hands
// them to sync; it returns that revision.
func (c *cell) list(ctx context.Context, prefix string, sync func(kvs []*mvccpb.KeyValue, rev int64)) (int64, error) {
	var all []*mvccpb.KeyValue
	key, end, rev := prefix, clientv3.GetPrefixRangeEnd(prefix), int64(0)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(5000)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.cli.Get(cctx, key, opts...)
		cancel()
		if err != nil {
			return 0, storeErr(ctx, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		all = append(all, resp.Kvs...)
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	sync(all, rev)
	return rev, nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// KeepAliveStream forwards keepalives for one client stream to etcd, one
// etcd keepalive per request. It never renews on its own. The etcd stream is
// opened by the first keepalive of an etcd session; a local session's
// (open.go) is answered by Send itself, so a client with only local
// sessions keeps them alive without etcd.
type KeepAliveStream struct {
	a        *Arbiter
	identity string
	ctx      context.Context
	cancel   context.CancelFunc

	mu    sync.Mutex
	s     pb.Lease_LeaseKeepAliveClient // nil until the first etcd session
	ready chan struct{}                 // closed once s is set
}

// OpenKeepAlive starts serving one client stream's keepalives.
func (a *Arbiter) OpenKeepAlive(ctx context.Context, caller identity.Caller) (*KeepAliveStream, error) {
	// Require a leader: a member cut off from the leader fails the stream
	// instead of holding keepalives it cannot forward.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	return &KeepAliveStream{a: a, identity: caller.String(), ctx: sctx, cancel: cancel, ready: make(chan struct{})}, nil
}

func (k *KeepAliveStream) etcd(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
	select {
	case <-k.ready: // open: every keepalive after the first takes no lock
		return k.s, nil
	default:
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.s == nil {
		s, err := k.a.home.leases.LeaseKeepAlive(k.ctx)
		if err != nil {
			return nil, storeErr(ctx, err)
		}
		k.s = s
		close(k.ready)
	}
	return k.s, nil
}

// Send forwards one keepalive; for a local session it renews it here and
// returns the answer to send (nil for an etcd session, whose answer comes
// from Recv). ErrSessionNotFound means the session is not the caller's or
// is gone; the caller should answer it with Expired.
func (k *KeepAliveStream) Send(ctx context.Context, id int64) (*KeepAliveAnswer, error) {
	s, err := k.a.session(ctx, k.identity, id)
	if err != nil {
		return nil, err
	}
	if s.local {
		return k.a.keepLocal(s)
	}
	es, err := k.etcd(ctx)
	if err != nil {
		return nil, err
	}
	if err := es.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		return nil, storeErr(ctx, err)
	}
	return nil, nil
}

// KeepAliveAnswer is etcd's answer to one keepalive.
type KeepAliveAnswer struct {
	// Session renewed.
	Session int64
	// TTL remaining; zero when the lease has expired.
	TTL time.Duration
	// Epoch when etcd answered, read at most MaxEpochAge before: holds from
	// an earlier epoch are gone.
	Epoch uint32
	// Removed are holds of the session operators released by force.
	Removed []RemovedHold
	// Uncredited: etcd renewed the lease, but the arbiter could not pair
	// the answer with an epoch read within MaxEpochAge, so it vouches for
	// nothing; the client treats it as unanswered. Only Session is set.
	Uncredited bool
	// UnprotectedEnded: with TTL zero, the session was a local one (opened
	// without quorum) and it is gone, with its unprotected holds.
	UnprotectedEnded bool
}

// Recv returns the next etcd answer. An answer from a store with another
// cluster ID (a restored store, not yet advanced) is ErrSealed, never a
// renewal: the session's holds may have been rolled back. An answer the
// arbiter cannot pair with an epoch read within MaxEpochAge is returned
// Uncredited, so that every request still gets exactly one answer.
func (k *KeepAliveStream) Recv() (KeepAliveAnswer, error) {
	select {
	case <-k.ready:
	case <-k.ctx.Done():
		return KeepAliveAnswer{}, k.ctx.Err()
	}
	resp, err := k.s.Recv()
	if err != nil {
		return KeepAliveAnswer{}, fmt.Errorf("%w: keepalive stream: %v", ErrUnavailable, err)
	}
	if _, err := k.a.home.checkHeader(resp.Header); err != nil {
		return KeepAliveAnswer{}, err
	}
	st, err := k.a.home.confirmedEpoch(k.ctx)
	if err != nil {
		k.a.metrics.keepAlivesNotCredited.Inc()
		return KeepAliveAnswer{Session: resp.ID, Uncredited: true}, nil
	}
	if st.sealed {
		return KeepAliveAnswer{}, sealedErr(st)
	}
	ans := KeepAliveAnswer{Session: resp.ID, Epoch: st.epoch, Removed: k.a.removed.of(resp.ID)}
	if resp.TTL <= 0 {
		k.a.metrics.keepAliveFailures.Inc()
		k.a.forgetSession(resp.ID)
		return ans, nil
	}
	if v, ok := k.a.sessions.Load(resp.ID); ok {
		v.(*sessionInfo).lastKA.Store(k.a.now().UnixNano())
	}
	ans.TTL = time.Duration(resp.TTL) * time.Second
	return ans, nil
}

// Expired is the answer for a session that is gone: TTL zero, with the
// holds of it that were released by force.
func (k *KeepAliveStream) Expired(id int64) KeepAliveAnswer {
	return KeepAliveAnswer{Session: id, Epoch: k.a.home.epoch.Load().epoch, Removed: k.a.removed.of(id), UnprotectedEnded: isLocal(id)}
}

// Close ends the etcd stream.
func (k *KeepAliveStream) Close() {
	k.mu.Lock()
	if k.s != nil {
		_ = k.s.CloseSend()
	}
	k.mu.Unlock()
	k.cancel()
}
