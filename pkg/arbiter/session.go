package arbiter

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session TTL bounds, the platform's range.
const (
	MinTTL = 5 * time.Second
	MaxTTL = 300 * time.Second
)

// sessionRecord is the value of /s/<lease id>, on the session's own lease.
type sessionRecord struct {
	Identity  string `json:"id"`
	TTL       int64  `json:"ttl"`
	Namespace string `json:"ns,omitempty"`
	OpenedAt  int64  `json:"at"`
}

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
	closing    atomic.Bool
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

func sessionKey(id int64) string { return sessionPrefix + strconv.FormatInt(id, 16) }

// sessionNamespace is the metrics namespace of an identity: its single
// namespace, or "-" when it has grants in none or several.
func (a *Arbiter) sessionNamespace(identity string) string {
	ns := a.policy.Load().Authz.NamespacesOf(identity)
	if len(ns) == 1 {
		return ns[0]
	}
	return "-"
}

// OpenSession grants a lease with ttl owned by identity.
func (a *Arbiter) OpenSession(ctx context.Context, identity string, ttl time.Duration) (int64, error) {
	if ttl < MinTTL || ttl > MaxTTL || ttl%time.Second != 0 {
		return 0, fmt.Errorf("%w: ttl: must be whole seconds between %s and %s, got %s", ErrInvalid, MinTTL, MaxTTL, ttl)
	}
	cctx, cancel := a.callCtx(ctx)
	defer cancel()
	lease, err := a.cli.Grant(cctx, int64(ttl/time.Second))
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	now := a.now()
	ns := a.sessionNamespace(identity)
	rec, _ := json.Marshal(sessionRecord{Identity: identity, TTL: int64(ttl / time.Second), Namespace: ns, OpenedAt: now.UnixNano()})
	resp, err := a.cli.Put(cctx, sessionKey(int64(lease.ID)), string(rec), clientv3.WithLease(lease.ID))
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	if _, err := a.checkHeader(resp.Header); err != nil && err != ErrSealed {
		return 0, err
	}
	info := &sessionInfo{id: int64(lease.ID), identity: identity, ttl: ttl, namespace: ns, openedAt: now, openedHere: true}
	a.sessions.Store(info.id, info)
	a.metrics.sessionsOpened.WithLabelValues(ns).Inc()
	a.log.Info("session opened", "session", info.id, "identity", identity, "ttl", ttl.String())
	return info.id, nil
}

// session returns the session if it exists and identity owns it.
func (a *Arbiter) session(ctx context.Context, identity string, id int64) (*sessionInfo, error) {
	if v, ok := a.sessions.Load(id); ok {
		s := v.(*sessionInfo)
		if s.identity != identity {
			return nil, ErrSessionNotFound
		}
		return s, nil
	}
	cctx, cancel := a.callCtx(ctx)
	defer cancel()
	resp, err := a.cli.Get(cctx, sessionKey(id))
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
	a.sessions.Store(id, s)
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
func (a *Arbiter) CloseSession(ctx context.Context, identity string, id int64) error {
	s, err := a.session(ctx, identity, id)
	if err != nil {
		return err
	}
	s.closing.Store(true)
	cctx, cancel := a.callCtx(ctx)
	defer cancel()
	if _, err := a.cli.Revoke(cctx, clientv3.LeaseID(id)); err != nil {
		if isLeaseNotFound(err) {
			a.sessions.Delete(id)
			return nil
		}
		return storeErr(ctx, err)
	}
	a.sessions.Delete(id)
	a.log.Info("session closed", "session", id, "identity", s.identity)
	return nil
}

// watchSessions drops cached sessions when their key goes away (expiry or
// revoke) and counts expiries of sessions opened here.
func (a *Arbiter) watchSessions(ctx context.Context) {
	for ctx.Err() == nil {
		wch := a.cli.Watch(clientv3.WithRequireLeader(ctx), sessionPrefix, clientv3.WithPrefix(),
			clientv3.WithFilterPut(), clientv3.WithPrevKV())
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete || ev.PrevKv == nil {
					continue
				}
				id := ev.PrevKv.Lease
				if v, ok := a.sessions.LoadAndDelete(id); ok {
					s := v.(*sessionInfo)
					if s.openedHere && !s.closing.Load() {
						a.metrics.ExpiriesWithoutRelease.WithLabelValues(s.namespace).Inc()
						a.log.Warn("session expired without close", "session", id, "identity", s.identity, "namespace", s.namespace)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.poll):
		}
	}
}

// KeepAliveStream forwards keepalives for one client stream to etcd, one
// etcd keepalive per request. It never renews on its own.
type KeepAliveStream struct {
	a        *Arbiter
	identity string
	s        pb.Lease_LeaseKeepAliveClient
	cancel   context.CancelFunc
}

// OpenKeepAlive opens the etcd keepalive stream for one client stream.
func (a *Arbiter) OpenKeepAlive(ctx context.Context, identity string) (*KeepAliveStream, error) {
	// Require a leader: a member cut off from the leader fails the stream
	// instead of holding keepalives it cannot forward.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	s, err := a.leases.LeaseKeepAlive(sctx)
	if err != nil {
		cancel()
		return nil, storeErr(ctx, err)
	}
	return &KeepAliveStream{a: a, identity: identity, s: s, cancel: cancel}, nil
}

// Send forwards one keepalive. ErrSessionNotFound means the session is not
// the caller's or is gone; the caller should answer it with TTL zero.
func (k *KeepAliveStream) Send(ctx context.Context, id int64) error {
	if _, err := k.a.session(ctx, k.identity, id); err != nil {
		return err
	}
	if err := k.s.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		return storeErr(ctx, err)
	}
	return nil
}

// KeepAliveAnswer is etcd's answer to one keepalive.
type KeepAliveAnswer struct {
	// Session renewed.
	Session int64
	// TTL remaining; zero when the lease has expired.
	TTL time.Duration
	// Epoch when etcd answered: holds from an earlier epoch are gone.
	Epoch uint32
}

// Recv returns the next etcd answer. An answer from a store with another
// cluster ID (a restored store, not yet advanced) is ErrSealed, never a
// renewal: the session's holds may have been rolled back.
func (k *KeepAliveStream) Recv() (KeepAliveAnswer, error) {
	resp, err := k.s.Recv()
	if err != nil {
		return KeepAliveAnswer{}, fmt.Errorf("%w: keepalive stream: %v", ErrUnavailable, err)
	}
	st, err := k.a.checkHeader(resp.Header)
	if err != nil {
		return KeepAliveAnswer{}, err
	}
	if resp.TTL <= 0 {
		k.a.metrics.keepAliveFailures.Inc()
		k.a.sessions.Delete(resp.ID)
		return KeepAliveAnswer{Session: resp.ID, Epoch: st.epoch}, nil
	}
	if v, ok := k.a.sessions.Load(resp.ID); ok {
		v.(*sessionInfo).lastKA.Store(k.a.now().UnixNano())
	}
	return KeepAliveAnswer{Session: resp.ID, TTL: time.Duration(resp.TTL) * time.Second, Epoch: st.epoch}, nil
}

// Close ends the etcd stream.
func (k *KeepAliveStream) Close() {
	_ = k.s.CloseSend()
	k.cancel()
}
