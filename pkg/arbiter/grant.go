package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/pkg/authz"
	"github.com/lockd-dev/lockd/pkg/class"
	"github.com/lockd-dev/lockd/pkg/lockkey"
	"github.com/lockd-dev/lockd/pkg/token"
)

// AcquireRequest asks for a hold.
type AcquireRequest struct {
	// Identity is the caller's authenticated SPIFFE ID.
	Identity string
	// Session is the caller's session; its TTL must be the class TTL.
	Session int64
	// Key is "<namespace>/<path>".
	Key string
	// Class is "name" or "namespace/name" in the key's namespace.
	Class string
	// Wait is how long to wait in line; zero tries once.
	Wait time.Duration
}

// Grant is a successful acquire.
type Grant struct {
	// Token is epoch<<48 | Revision.
	Token uint64
	// Epoch and Revision are the token's parts.
	Epoch    uint32
	Revision int64
	// AcquiredAt is the arbiter's clock at the grant (diagnostics only).
	AcquiredAt time.Time
}

// holdRecord is the value of /l/<key>, on the holder's session lease.
type holdRecord struct {
	Identity   string `json:"id"`
	Session    int64  `json:"session"`
	Class      string `json:"class"`
	AcquiredAt int64  `json:"at"`
}

func (a *Arbiter) encodeHold(identity string, session int64, cls string) (string, time.Time) {
	now := a.now()
	b, _ := json.Marshal(holdRecord{Identity: identity, Session: session, Class: cls, AcquiredAt: now.UnixNano()})
	return string(b), now
}

func decodeHold(kv *mvccpb.KeyValue) (holdRecord, error) {
	var h holdRecord
	if err := json.Unmarshal(kv.Value, &h); err != nil {
		return h, fmt.Errorf("%w: hold record %s: %v", ErrInternal, kv.Key, err)
	}
	return h, nil
}

// resolveClass finds the class a request names in the key's namespace.
func resolveClass(set *class.Set, ns, ref string) (*class.Class, error) {
	name := ref
	if i := strings.IndexByte(ref, '/'); i >= 0 {
		if ref[:i] != ns {
			return nil, fmt.Errorf("%w: class: namespace %q of the class must match the key's namespace %q", ErrInvalid, ref[:i], ns)
		}
		name = ref[i+1:]
	}
	if name == "" {
		return nil, fmt.Errorf("%w: class: required", ErrInvalid)
	}
	c, ok := set.Class(ns, name)
	if !ok {
		return nil, fmt.Errorf("%w: class: no class %q in namespace %q", ErrInvalid, name, ns)
	}
	return c, nil
}

// attempt is the outcome of one grant transaction.
type attempt struct {
	granted bool
	grant   Grant
	// When not granted: the current hold and the response revision (the
	// watch for the release starts after it).
	holder       holdRecord
	holderLease  int64
	holderModRev int64
	rev          int64
	// grace: refused because the epoch advanced less than the longest
	// class TTL ago.
	grace bool
}

// tryGrant runs the grant transaction: compare the hold key absent and the
// epoch record unchanged; put the hold on the session lease. The token is
// packed from the epoch compared and the commit revision. A grant whose
// response comes from a store with another cluster ID is not handed out.
func (a *Arbiter) tryGrant(ctx context.Context, hk, val string, lease int64, at time.Time) (attempt, error) {
	for range 3 {
		st := a.epoch.Load()
		if st.sealed {
			return attempt{}, ErrSealed
		}
		cctx, cancel := a.callCtx(ctx)
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(hk), "=", 0),
			clientv3.Compare(clientv3.ModRevision(epochKey), "=", st.modRev),
			clientv3.Compare(clientv3.CreateRevision(graceKey), "=", 0),
		}
		if skipAbsenceCompare {
			cmps = cmps[1:]
		}
		resp, err := a.cli.Txn(cctx).
			If(cmps...).
			Then(clientv3.OpPut(hk, val, clientv3.WithLease(clientv3.LeaseID(lease)))).
			Else(clientv3.OpGet(hk), clientv3.OpGet(epochKey), clientv3.OpGet(graceKey, clientv3.WithCountOnly())).
			Commit()
		cancel()
		if err != nil {
			return attempt{}, storeErr(ctx, err)
		}
		if _, err := a.checkHeader(resp.Header); err != nil {
			return attempt{}, err
		}
		if resp.Succeeded {
			tok, err := token.Pack(st.epoch, resp.Header.Revision)
			if err != nil {
				return attempt{}, fmt.Errorf("%w: %v", ErrInternal, err)
			}
			return attempt{granted: true, grant: Grant{Token: tok, Epoch: st.epoch, Revision: resp.Header.Revision, AcquiredAt: at}}, nil
		}
		holds := resp.Responses[0].GetResponseRange().Kvs
		eps := resp.Responses[1].GetResponseRange().Kvs
		if len(eps) == 1 && eps[0].ModRevision != st.modRev {
			if err := a.applyEpoch(eps[0], resp.Header); err != nil {
				return attempt{}, err
			}
			continue
		}
		if resp.Responses[2].GetResponseRange().Count > 0 {
			// The epoch has just advanced: wait like a contender until
			// the old epoch's holders have all been fenced.
			return attempt{grace: true, rev: resp.Header.Revision}, nil
		}
		if len(holds) == 0 {
			continue
		}
		h, err := decodeHold(holds[0])
		if err != nil {
			return attempt{}, err
		}
		return attempt{holder: h, holderLease: holds[0].Lease, holderModRev: holds[0].ModRevision, rev: resp.Header.Revision}, nil
	}
	return attempt{}, fmt.Errorf("%w: the epoch record kept changing", ErrUnavailable)
}

// classify turns a refused attempt into its answer: the caller's own hold
// (an idempotent re-acquire, e.g. a retry after a lost response), a leak, or
// plain contention (nil).
func (a *Arbiter) classify(at attempt, identity string, session int64) (Grant, bool, error) {
	if at.holderLease == session {
		st := a.epoch.Load()
		tok, err := token.Pack(st.epoch, at.holderModRev)
		if err != nil {
			return Grant{}, false, fmt.Errorf("%w: %v", ErrInternal, err)
		}
		return Grant{Token: tok, Epoch: st.epoch, Revision: at.holderModRev, AcquiredAt: time.Unix(0, at.holder.AcquiredAt)}, true, nil
	}
	if at.holder.Identity == identity {
		return Grant{}, false, fmt.Errorf("%w %d", ErrLeak, at.holderLease)
	}
	return Grant{}, false, nil
}

// Acquire grants req.Key to req.Session, waiting up to req.Wait in arrival
// order behind other waiters on this arbiter.
func (a *Arbiter) Acquire(ctx context.Context, req AcquireRequest) (g Grant, err error) {
	start := time.Now()
	ns, clsName := "-", "-"
	defer func() { a.metrics.observeAcquire(ns, clsName, err, time.Since(start)) }()

	if err := lockkey.Validate(req.Key); err != nil {
		return Grant{}, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	pol := a.policy.Load()
	if !pol.Authz.Allow(req.Identity, req.Key) {
		return Grant{}, authz.ErrDenied
	}
	keyNS := lockkey.Namespace(req.Key)
	cls, err := resolveClass(pol.Classes, keyNS, req.Class)
	if err != nil {
		return Grant{}, err
	}
	ns, clsName = cls.Namespace, cls.Name
	if req.Wait < 0 {
		return Grant{}, fmt.Errorf("%w: wait: must not be negative", ErrInvalid)
	}
	if a.epoch.Load().sealed {
		return Grant{}, ErrSealed
	}
	sess, err := a.session(ctx, req.Identity, req.Session)
	if err != nil {
		return Grant{}, err
	}
	if sess.ttl != cls.TTL {
		return Grant{}, fmt.Errorf("%w: class %s/%s has ttl %s, session %d has ttl %s; open a session with the class TTL",
			ErrSessionTTL, cls.Namespace, cls.Name, cls.TTL, req.Session, sess.ttl)
	}
	classRef := cls.Namespace + "/" + cls.Name
	hk := holdKey(req.Key)

	w := &waiter{identity: req.Identity, session: req.Session, class: classRef,
		wake: make(chan struct{}, 1), done: make(chan waitResult, 1)}
	if !a.busy(req.Key) {
		val, at := a.encodeHold(req.Identity, req.Session, classRef)
		att, err := a.tryGrant(ctx, hk, val, req.Session, at)
		if err != nil {
			return Grant{}, a.sessionGone(req.Session, err)
		}
		if att.granted {
			return att.grant, nil
		}
		if g, mine, err := a.classify(att, req.Identity, req.Session); mine || err != nil {
			if errors.Is(err, ErrLeak) {
				a.metrics.leaks.WithLabelValues(ns, clsName).Inc()
				a.log.Warn("leak refused", "identity", req.Identity, "session", req.Session, "holder_session", att.holderLease, "namespace", ns, "class", clsName)
			}
			return g, err
		}
		if req.Wait == 0 && att.grace {
			return Grant{}, ErrEpochGrace
		}
		if req.Wait == 0 {
			return Grant{}, ErrHeld
		}
		a.enqueue(req.Key, w, att.rev, true)
	} else {
		if req.Wait == 0 {
			return Grant{}, ErrHeld
		}
		a.enqueue(req.Key, w, 0, false)
	}
	a.metrics.waits.WithLabelValues(ns, clsName).Inc()
	g, err = a.wait(ctx, req, w, hk, time.Now().Add(req.Wait))
	if errors.Is(err, ErrLeak) {
		a.metrics.leaks.WithLabelValues(ns, clsName).Inc()
	}
	return g, err
}

// sessionGone drops a cached session the store says is gone.
func (a *Arbiter) sessionGone(id int64, err error) error {
	if errors.Is(err, ErrSessionNotFound) {
		a.sessions.Delete(id)
	}
	return err
}

// Release ends the hold of key by session with tok. An absent hold is not an
// error (released is false); a hold with another token or session is
// ErrStaleToken. When a waiter is queued here, the key is handed to it in
// the same transaction.
func (a *Arbiter) Release(ctx context.Context, identity string, session int64, key string, tok uint64) (released bool, err error) {
	if err := lockkey.Validate(key); err != nil {
		return false, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if _, err := a.session(ctx, identity, session); err != nil {
		return false, err
	}
	ep, rev := token.Unpack(tok)
	hk := holdKey(key)
	for range 3 {
		st := a.epoch.Load()
		if st.sealed {
			return false, ErrSealed
		}
		if ep != st.epoch {
			return false, ErrStaleToken
		}
		cmp := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(hk), "=", rev),
			clientv3.Compare(clientv3.LeaseValue(hk), "=", clientv3.LeaseID(session)),
			clientv3.Compare(clientv3.ModRevision(epochKey), "=", st.modRev),
		}
		done, released, retry, err := a.handoff(ctx, key, hk, cmp, st)
		if retry {
			continue // the epoch record moved: compare against the new one
		}
		if err != nil || done {
			return released, err
		}
		cctx, cancel := a.callCtx(ctx)
		resp, err := a.cli.Txn(cctx).If(cmp...).
			Then(clientv3.OpDelete(hk)).
			Else(clientv3.OpGet(hk), clientv3.OpGet(epochKey)).Commit()
		cancel()
		if err != nil {
			return false, storeErr(ctx, err)
		}
		if _, err := a.checkHeader(resp.Header); err != nil {
			return false, err
		}
		if resp.Succeeded {
			a.wakeHead(key)
			return true, nil
		}
		retry, err = a.releaseRefused(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs, st, resp.Header)
		if !retry {
			return false, err
		}
	}
	return false, fmt.Errorf("%w: the epoch record kept changing", ErrUnavailable)
}

// releaseRefused explains a refused release: gone (nil), stale, or an epoch
// change (retry).
func (a *Arbiter) releaseRefused(holds, eps []*mvccpb.KeyValue, st *epochState, h *pb.ResponseHeader) (retry bool, err error) {
	if len(eps) == 1 && eps[0].ModRevision != st.modRev {
		if err := a.applyEpoch(eps[0], h); err != nil {
			return false, err
		}
		return true, nil
	}
	if len(holds) == 0 {
		return false, nil
	}
	return false, ErrStaleToken
}
