package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/tracing"
	"github.com/lockd-dev/lockd/pkg/lockkey"
	"github.com/lockd-dev/lockd/pkg/token"
)

// AcquireRequest asks for a hold.
type AcquireRequest struct {
	// Caller is the authenticated caller.
	Caller identity.Caller
	// Session is the caller's session; its TTL must be the class TTL.
	Session int64
	// Key is "<namespace>/<path>".
	Key string
	// Class is "name" or "namespace/name" in the key's namespace.
	Class string
	// Wait is how long to wait in line; zero tries once.
	Wait time.Duration
	// ClusterLeases are the session's leases on clusters other than the
	// coord's that the caller renews already, by cluster (from earlier
	// grants' ClusterLease). A grant on a lease not named here says how
	// long it lives (Grant.ClusterTTL).
	ClusterLeases map[string]int64
	// RetiredLeases are leases the caller gave up at their deadline, by
	// cluster: it counts their holds lost, so such a lease is revoked, not
	// reused, and the grant goes on a new one.
	RetiredLeases map[string]int64

	// home is the session, once Session names the lease that stands for it
	// in a cell other than the home one (clusterlease.go).
	home int64
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
	// Unprotected: granted from memory without a quorum (open.go). Token
	// is 0, which every fence rejects; another holder may hold the key at
	// the same time. Arbiter and SpoolSeq name the grant in the history.
	Unprotected bool
	Arbiter     string
	SpoolSeq    uint64
	// Class is the class the key was granted under ("namespace/name"): the
	// key's class when the grant was made, recorded in the hold.
	Class string
	// Cluster is the etcd cluster the hold is in (the key's tier's).
	Cluster string
	// ClusterLease, for a hold on a cluster other than the coord's, is the
	// session's lease there: the hold lasts while it is renewed
	// (RenewLease), whatever happens to the session's other leases.
	// ClusterTTL, when not zero, is how long that lease lives at least from
	// a moment after the Acquire was received (it was made or renewed for
	// it); zero when the request named it in ClusterLeases.
	ClusterLease int64
	ClusterTTL   time.Duration
}

// holdRecord is the value of /l/<key>, on the holder's session lease.
type holdRecord = keyspace.Hold

// newHold is a hold record about to be put: its value, when it was made by
// the arbiter's clock, and the class it records (the key's class now).
type newHold struct {
	val string
	at  time.Time
	cls *class.Class
}

func (a *Arbiter) encodeHold(identity string, session int64, cls *class.Class) newHold {
	now := a.now()
	rec := holdRecord{Identity: identity, Session: session, Class: cls.Ref(), AcquiredAt: now.UnixNano()}
	return newHold{val: rec.Encode(), at: now, cls: cls}
}

// grant is h granted at rev under epoch with token tok.
func (h newHold) grant(tok uint64, epoch uint32, rev int64) Grant {
	return Grant{Token: tok, Epoch: epoch, Revision: rev, AcquiredAt: h.at, Class: h.cls.Ref()}
}

func decodeHold(kv *mvccpb.KeyValue) (holdRecord, error) {
	var h holdRecord
	if err := json.Unmarshal(kv.Value, &h); err != nil {
		return h, fmt.Errorf("%w: hold record %s: %v", ErrInternal, kv.Key, err)
	}
	return h, nil
}

// keyClass is the class of key in set: the class owning the longest
// prefix of it (spec.keys). ref, when the request names a class ("name" or
// "namespace/name"), must be that class: a caller never picks a key's class.
func keyClass(set *class.Set, key, ref string) (*class.Class, error) {
	ns := lockkey.Namespace(key)
	owner, owned := set.Owner(key)
	if ref == "" {
		if !owned {
			return nil, noClassErr(ns, key)
		}
		return owner, nil
	}
	name := ref
	if i := strings.IndexByte(ref, '/'); i >= 0 {
		if ref[:i] != ns {
			return nil, fmt.Errorf("%w: class: namespace %q of the class must match the key's namespace %q", ErrInvalid, ref[:i], ns)
		}
		name = ref[i+1:]
	}
	if name == "" {
		return nil, fmt.Errorf("%w: class: must name a class, or be left out for the key's own", ErrInvalid)
	}
	named, ok := set.Class(ns, name)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: class: no class %q in namespace %q", ErrInvalid, name, ns)
	case !owned:
		return nil, noClassErr(ns, key)
	case named != owner:
		return nil, fmt.Errorf("%w: key %s belongs to class %s/%s (its spec.keys has %q), not %s/%s; leave the class out to use the key's own",
			ErrClassMismatch, key, owner.Namespace, owner.Name, set.OwnedPrefix(key), ns, name)
	}
	return owner, nil
}

func noClassErr(ns, key string) error {
	return fmt.Errorf("%w: no LockClass of namespace %s owns key %s (a key is locked under the class whose spec.keys has the longest prefix of it); add a prefix of the key to a class of %s in review",
		ErrNoClass, ns, key, ns)
}

// attempt is the outcome of one grant transaction (or hold read).
type attempt struct {
	granted bool
	grant   Grant
	// epoch is the epoch the transaction compared: a hold it saw belongs
	// to it (an advance deletes every hold with the record's put).
	epoch uint32
	// When not granted: the current hold and the response revision (the
	// watch for the release starts after it).
	holder       holdRecord
	holderLease  int64
	holderModRev int64
	rev          int64
	// grace, when set, is why nobody may be granted the key now although
	// nobody holds it: ErrEpochGrace (the epoch advanced less than the
	// grace period ago) or ErrOpenGrace (quorum returned after an outage in
	// which the key's class may have been granted unprotected).
	grace error
	// The durable line (see durable.go), when the attempt read it: ahead
	// is the waiter that keeps this attempt from the key (the head for a
	// newcomer, the predecessor for a waiter in line; nil when none), and
	// own is the caller's own waiter key (nil when it has none); joined
	// says the attempt created it.
	ahead, own *mvccpb.KeyValue
	joined     bool
}

// linePos is where an attempt stands in the key's durable line: nowhere
// (a newcomer, qk empty) or at the waiter key qk created at rev. A newcomer
// with join set joins the line with that waiter record when it is refused,
// in the refused transaction itself.
type linePos struct {
	qk   string
	rev  int64
	join string
}

// tryGrant runs the grant transaction: compare the hold key absent, the
// epoch record unchanged and the key's durable line clear for the caller;
// put the hold on the session lease. The token is packed from the epoch
// compared and the commit revision. A grant whose response comes from a
// store with another cluster ID is not handed out.
//
// The durable line is clear for a newcomer (pos.qk empty) when nobody waits
// in it, and for a waiter in it when its key is still the one created at
// pos.rev and no waiter key of the key was created before it: the head, by
// create revision, across every arbiter. Such a grant deletes the waiter's
// key in the same transaction. Best-effort classes compare the line too, so
// no grant of any class jumps a durable waiter.
//
// The transaction is not cancelled when the caller goes away (only bounded
// by the request timeout), so the arbiter always learns whether it granted;
// callers release a grant whose requester has left (releaseIfGone).
func (c *cell) tryGrant(ctx context.Context, key string, h newHold, lease int64, pos linePos) (attempt, error) {
	hk := holdKey(key)
	fence, fenced, err := c.fence(key, h.cls)
	if err != nil {
		return attempt{}, err
	}
	var fenceCmps []*pb.Compare
	var fenceReads []*pb.RequestOp
	if fenced {
		fenceCmps, fenceReads = fence.Cmps(), fence.Reads()
	}
	lineCmps, lineThen, lineReads := lineOps(key, lease, pos, fenceCmps)
	open := openGraced(h.cls)
	grace := etcdop.Absent(graceKey)
	if open {
		// No key under the grace key: neither the epoch grace nor any
		// arbiter's open grace (recovery.go).
		grace = etcdop.WithPrefix(grace)
	}
	for range 3 {
		st := c.epoch.Load()
		if st.sealed {
			return attempt{}, sealedErr(st)
		}
		if open && c.holdingOff() {
			// Quorum has just returned: another arbiter may not have
			// written its open grace yet. Wait like a contender.
			return attempt{epoch: st.epoch, grace: ErrOpenGrace}, nil
		}
		cmps := append([]*pb.Compare{etcdop.Absent(hk), grace}, lineCmps...)
		if skipAbsenceCompare {
			cmps = cmps[1:]
		}
		cmps = append(cmps, fenceCmps...)
		start := time.Now()
		p := &part{key: key, epochRev: st.modRev, lease: lease, cmps: cmps,
			then:    append([]*pb.RequestOp{etcdop.Put(hk, h.val, lease)}, lineThen...),
			els:     append(append(holdReads(hk, open, true), lineReads...), fenceReads...),
			timeout: c.callTimeout(ctx)}
		p.guard, p.alone = c.guardOf(lease)
		resp, retry, err := c.committed(ctx, c.commits.commit(ctx, p), start)
		if err != nil {
			return attempt{}, err
		}
		if retry {
			continue
		}
		if !resp.Succeeded {
			if err := c.fenceRefused(fence, fenced, resp); err != nil {
				return attempt{}, err
			}
		}
		if resp.Succeeded {
			tok, err := token.Pack(st.epoch, resp.Header.Revision)
			if err != nil {
				return attempt{}, fmt.Errorf("%w: %v", ErrInternal, err)
			}
			return attempt{granted: true, epoch: st.epoch, grant: h.grant(tok, st.epoch, resp.Header.Revision)}, nil
		}
		att, res, err := c.readOutcome(resp, st, start, true)
		if err != nil {
			return att, err
		}
		readLine(&att, resp, pos, true)
		if res == found || att.ahead != nil || (pos.qk == "" && att.own != nil) || (pos.qk != "" && !ownAt(att.own, pos.rev)) {
			return att, nil
		}
		// Free and nothing in the way: it was released meanwhile. Again.
	}
	return attempt{}, fmt.Errorf("%w: the epoch record kept changing", ErrUnavailable)
}

// lineOps are the durable line's parts of a grant transaction for the
// caller at pos (see tryGrant): compares, the ops after the hold's put, and
// the reads on refusal (lineReads), followed for a newcomer joining by the
// join itself, which guard (the shard fence) holds too: no new waiter joins
// a range being moved.
func lineOps(key string, session int64, pos linePos, guard []*pb.Compare) (cmps []*pb.Compare, then, reads []*pb.RequestOp) {
	qr := keyspace.QueueRange(key)
	reads = lineReads(key, session, pos)
	if pos.qk == "" {
		if pos.join != "" {
			qk := keyspace.QueueKey(key, session)
			reads = append(reads, etcdop.Txn(append([]*pb.Compare{etcdop.Absent(qk)}, guard...),
				[]*pb.RequestOp{etcdop.Put(qk, pos.join, session)}, nil))
		}
		return []*pb.Compare{etcdop.WithPrefix(etcdop.Absent(qr))}, nil, reads
	}
	return []*pb.Compare{
			etcdop.Created(pos.qk, pb.Compare_EQUAL, pos.rev),
			etcdop.WithPrefix(etcdop.Created(qr, pb.Compare_GREATER, pos.rev-1)),
		},
		[]*pb.RequestOp{etcdop.Delete(pos.qk)},
		reads
}

// lineReads read who is ahead of the caller at pos (the head, for a
// newcomer; its predecessor, for a waiter in line) and the caller's own
// waiter key.
func lineReads(key string, session int64, pos linePos) []*pb.RequestOp {
	qr := keyspace.QueueRange(key)
	if pos.qk == "" {
		// A newcomer needs only whether anyone is in line: a count, from
		// etcd's index without reading the waiters.
		return []*pb.RequestOp{etcdop.Count(qr, true), etcdop.Get(keyspace.QueueKey(key, session))}
	}
	return []*pb.RequestOp{etcdop.FirstCreated(qr, pb.RangeRequest_DESCEND, pos.rev-1), etcdop.Get(pos.qk)}
}

// readLine fills att's view of the durable line from the reads lineOps
// added after holdReads (batched as they were).
func readLine(att *attempt, resp *clientv3.TxnResponse, pos linePos, batched bool) {
	ahead := len(holdReads("", false, batched))
	if len(resp.Responses) < ahead+2 {
		return
	}
	if kvs := resp.Responses[ahead+1].GetResponseRange().Kvs; len(kvs) > 0 {
		att.own = kvs[0]
	}
	if kvs := resp.Responses[ahead].GetResponseRange().Kvs; len(kvs) > 0 {
		att.ahead = kvs[0]
	} else if n := resp.Responses[ahead].GetResponseRange().Count; pos.qk == "" && (n > 1 || (n == 1 && att.own == nil)) {
		att.ahead = &mvccpb.KeyValue{} // others in line; the count does not say who
	}
	if len(resp.Responses) > ahead+2 && resp.Responses[ahead+2].GetResponseTxn().GetSucceeded() {
		// Joined in this transaction: the waiter key was created at its
		// revision.
		att.own = &mvccpb.KeyValue{CreateRevision: resp.Header.Revision}
		att.joined = true
	}
}

// ownAt reports whether own is a waiter key created at rev.
func ownAt(own *mvccpb.KeyValue, rev int64) bool { return own != nil && own.CreateRevision == rev }

// holdReads are the reads that explain a refused grant: the hold, the
// epoch record and the grace key; for a class open on quorum loss (open),
// every key under the grace key, which holds the open graces too
// (recovery.go). A part of a batch (batched) does not read the epoch
// record: it runs only when the batch's compare of the record held.
func holdReads(hk string, open, batched bool) []*pb.RequestOp {
	grace := etcdop.Count(graceKey, false)
	if open {
		grace = etcdop.Keys(graceKey)
	}
	if batched {
		return []*pb.RequestOp{etcdop.Get(hk), grace}
	}
	return []*pb.RequestOp{etcdop.Get(hk), etcdop.Get(epochKey), grace}
}

// graceOf says which grace the grace read of holdReads found: the epoch
// grace key itself (a count, or a key) or an open grace under it; nil when
// neither.
func graceOf(r *pb.RangeResponse) error {
	if len(r.GetKvs()) == 0 {
		if r.GetCount() > 0 {
			return ErrEpochGrace
		}
		return nil
	}
	for _, kv := range r.GetKvs() {
		if string(kv.Key) == graceKey {
			return ErrEpochGrace
		}
	}
	return ErrOpenGrace
}

// readResult is what holdReads found.
type readResult int

const (
	found      readResult = iota // the attempt says who holds it, or that grants wait out the grace
	free                         // nobody holds it
	epochMoved                   // the epoch record moved: read or try again against the new one
)

// readOutcome interprets holdReads' answers (batched as they were), read
// with epoch state st. Only reads that are not batched can find the epoch
// record moved (epochMoved).
func (c *cell) readOutcome(resp *clientv3.TxnResponse, st *epochState, start time.Time, batched bool) (attempt, readResult, error) {
	holds := resp.Responses[0].GetResponseRange().Kvs
	grace := 1
	if !batched {
		grace = 2
		eps := resp.Responses[1].GetResponseRange().Kvs
		if len(eps) == 0 || eps[0].ModRevision != st.modRev {
			o, err := observe(eps, resp.Header, start)
			if err != nil {
				return attempt{}, found, err
			}
			if next := c.apply(o); next.sealed {
				return attempt{}, found, sealedErr(next)
			}
			return attempt{}, epochMoved, nil
		}
	}
	at := attempt{epoch: st.epoch, rev: resp.Header.Revision}
	if at.grace = graceOf(resp.Responses[grace].GetResponseRange()); at.grace != nil {
		// The epoch has just advanced, or an open class's key waits out
		// unprotected holders: wait like a contender until they are fenced.
		return at, found, nil
	}
	if len(holds) == 0 {
		return at, free, nil
	}
	h, err := decodeHold(holds[0])
	if err != nil {
		return attempt{}, found, err
	}
	at.holder, at.holderLease, at.holderModRev = h, holds[0].Lease, holds[0].ModRevision
	return at, found, nil
}

// readHold reads who holds hk (without trying to take it), for a caller
// that must not jump the queue; open says the key's class is open on quorum
// loss, so an open grace counts (recovery.go).
func (c *cell) readHold(ctx context.Context, hk string, open bool) (attempt, error) {
	return c.read(ctx, hk, open, nil, linePos{})
}

// look is a durable waiter's read of the hold and of its place in line
// (who is ahead, its own key), writing nothing.
func (c *cell) look(ctx context.Context, key string, session int64, pos linePos, open bool) (attempt, error) {
	return c.read(ctx, holdKey(key), open, lineReads(key, session, pos), pos)
}

// read runs holdReads, and lineReads for a caller at pos, in one read-only
// transaction.
func (c *cell) read(ctx context.Context, hk string, open bool, lineReads []*pb.RequestOp, pos linePos) (attempt, error) {
	for range 3 {
		st := c.epoch.Load()
		if st.sealed {
			return attempt{}, sealedErr(st)
		}
		cctx, cancel := c.callCtx(ctx)
		start := time.Now()
		resp, err := c.kv.Txn(cctx, etcdop.Request(nil, append(holdReads(hk, open, false), lineReads...), nil))
		cancel()
		if err != nil {
			return attempt{}, storeErr(ctx, err)
		}
		if _, err := c.checkHeader(resp.Header); err != nil {
			return attempt{}, err
		}
		att, res, err := c.readOutcome(resp, st, start, false)
		if err != nil || res != epochMoved {
			if lineReads != nil {
				readLine(&att, resp, pos, false)
			}
			return att, err
		}
	}
	return attempt{}, fmt.Errorf("%w: the epoch record kept changing", ErrUnavailable)
}

// classify turns a refused attempt into its answer: the caller's own hold
// (an idempotent re-acquire, e.g. a retry after a lost response), a leak, or
// plain contention (nil). The token is packed with the epoch the attempt's
// transaction compared, never one loaded since.
func (a *Arbiter) classify(at attempt, identity string, session int64) (Grant, bool, error) {
	if at.holderLease != 0 && at.holderLease == session {
		tok, err := token.Pack(at.epoch, at.holderModRev)
		if err != nil {
			return Grant{}, false, fmt.Errorf("%w: %v", ErrInternal, err)
		}
		return Grant{Token: tok, Epoch: at.epoch, Revision: at.holderModRev, AcquiredAt: time.Unix(0, at.holder.AcquiredAt),
			Class: at.holder.Class}, true, nil
	}
	if at.holderLease != 0 && at.holder.Identity == identity {
		return Grant{}, false, &leakError{holder: at.holderLease}
	}
	return Grant{}, false, nil
}

// leakError is ErrLeak with the session that holds the key.
type leakError struct{ holder int64 }

func (e *leakError) Error() string { return fmt.Sprintf("%s %d", ErrLeak, e.holder) }
func (e *leakError) Unwrap() error { return ErrLeak }

// authorizeAcquire checks, against the policy served now, that identity may
// lock key with a session of ttl (0: not known yet), and returns the key's
// class; classRef, when set, must name that class. Waiters are checked
// again before every attempt, with no classRef: a class reload can revoke a
// grant, move the key to another class or change a TTL, and a grant records
// the key's class at the moment it is made.
func (a *Arbiter) authorizeAcquire(identity, key, classRef string, ttl time.Duration) (*class.Class, error) {
	pol := a.policy.Load()
	if !pol.Authz.Allow(identity, key) {
		return nil, authz.ErrDenied
	}
	cls, err := keyClass(pol.Classes, key, classRef)
	if err != nil {
		return nil, err
	}
	if ttl != 0 && ttl != cls.TTL {
		return nil, fmt.Errorf("%w: class %s/%s has ttl %s, the session has ttl %s; open a session with the class TTL",
			ErrSessionTTL, cls.Namespace, cls.Name, cls.TTL, ttl)
	}
	return cls, nil
}

// Acquire grants req.Key to req.Session, waiting up to req.Wait in arrival
// order behind other waiters on this arbiter. It checks the request and the
// key's class, then hands it to one line of the cell the class's tier is
// served by.
func (a *Arbiter) Acquire(ctx context.Context, req AcquireRequest) (g Grant, err error) {
	start := time.Now()
	ns, clsName, tier, cluster := "-", "-", "-", "-"
	var in *cell
	defer func() {
		d := time.Since(start)
		if err == nil && in != nil {
			in.grantRate.add(a.now())
		}
		a.metrics.observeAcquire(ns, clsName, tier, cluster, err, d)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(tracing.AttrNamespace.String(ns), tracing.AttrClass.String(clsName),
				tracing.Seconds(tracing.AttrWaitRequested, req.Wait), tracing.Seconds(tracing.AttrWaited, d))
		}
		if !a.log.Enabled(ctx, slog.LevelDebug) {
			return
		}
		msg, args := "granted", []any{"key", req.Key, "class", ns + "/" + clsName, "caller", req.Caller.String(), "session", req.Session, "waited", d}
		if err != nil {
			msg, args = "acquire refused", append(args, "err", err)
		}
		a.log.Debug(msg, args...)
	}()

	if err := lockkey.Validate(req.Key); err != nil {
		return Grant{}, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	cls, err := a.authorizeAcquire(req.Caller.String(), req.Key, req.Class, 0)
	if err != nil {
		return Grant{}, err
	}
	ns, clsName = cls.Namespace, cls.Name
	if err := a.homeCheck(req.Key); err != nil {
		return Grant{}, err
	}
	if req.Wait < 0 {
		return Grant{}, fmt.Errorf("%w: wait: must not be negative", ErrInvalid)
	}
	c := a.cellFor(cls, req.Key)
	tier, cluster, in = string(cls.Tier), c.name, c
	if st := c.epoch.Load(); st.sealed {
		return Grant{}, sealedErr(st)
	}
	g, err = a.acquireIn(ctx, c, req, cls)
	var leak *leakError
	switch {
	case errors.Is(err, ErrQuota):
		a.metrics.quotaRefusals.WithLabelValues(ns, "waiters").Inc()
	case errors.As(err, &leak):
		a.metrics.leaks.WithLabelValues(ns, clsName).Inc()
		a.log.Warn("leak refused", "identity", req.Caller.String(), "session", req.Session, "holder_session", leak.holder, "namespace", ns, "class", clsName)
	}
	return g, err
}

// acquireIn hands req to the line of cell c that serves it. In a cell other
// than the home one the session's lease there stands for the session: it is
// found or made first, and made again once if it lapsed while the session
// lives (its holder stopped renewing it, having no holds there).
func (a *Arbiter) acquireIn(ctx context.Context, c *cell, req AcquireRequest, cls *class.Class) (Grant, error) {
	for try := 0; ; try++ {
		sreq := req
		var sub *sessionInfo
		var fresh time.Duration
		if c != a.home && !isLocal(req.Session) {
			hs, err := a.session(ctx, req.Caller.String(), req.Session)
			if err != nil {
				return Grant{}, err
			}
			if sub, fresh, err = a.leaseIn(ctx, c, hs, req.ClusterLeases[c.name], req.RetiredLeases[c.name]); err != nil {
				return Grant{}, err
			}
			sreq.home, sreq.Session = req.Session, sub.id
			if fresh > 0 && req.Wait > 0 {
				// The caller learns of the lease only with the grant:
				// keep it alive while the request waits in line.
				defer c.renewWhileWaiting(ctx, sub.id, hs.ttl)()
			}
		}
		ln, err := c.lineOf(sreq, cls)
		if err != nil {
			return Grant{}, err
		}
		g, err := ln.acquire(ctx, sreq, cls)
		if sub != nil && errors.Is(err, ErrSessionNotFound) && try == 0 {
			continue
		}
		g.Cluster = c.name
		if sub != nil && err == nil {
			g.ClusterLease, g.ClusterTTL = sub.id, fresh
		}
		return g, err
	}
}

// sessionFor is the caller's session, as cell c knows it, for an Acquire of
// a key of cls; it must have the class's TTL.
func (a *Arbiter) sessionFor(ctx context.Context, c *cell, req AcquireRequest, cls *class.Class) (*sessionInfo, error) {
	sess, err := a.sessionIn(ctx, c, req.Caller.String(), req.Session, req.home)
	if err != nil {
		return nil, err
	}
	return sess, sessionTTLFits(sess, cls, req.Session)
}

// sessionTTLFits refuses a session whose TTL is not the class's.
func sessionTTLFits(sess *sessionInfo, cls *class.Class, id int64) error {
	if sess.ttl != cls.TTL {
		return fmt.Errorf("%w: class %s/%s has ttl %s, session %d has ttl %s; open a session with the class TTL",
			ErrSessionTTL, cls.Namespace, cls.Name, cls.TTL, id, sess.ttl)
	}
	return nil
}

// releaseIfGone returns g to the caller, or, when the caller has gone
// (its context ended while the grant was in flight), releases it so that
// no hold is left that nobody knows about.
func (c *cell) releaseIfGone(ctx context.Context, req AcquireRequest, g Grant) (Grant, error) {
	if ctx.Err() == nil {
		return g, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	if _, err := c.release(rctx, req.Session, req.Key, g.Token); err != nil {
		c.log.Warn("could not release a grant whose caller left; it ends with its session", "session", req.Session, "err", err)
	}
	return Grant{}, ctx.Err()
}

// sessionGone drops a cached session (in cell c) the store says is gone.
func (a *Arbiter) sessionGone(c *cell, id int64, err error) error {
	if errors.Is(err, ErrSessionNotFound) {
		a.forgetIn(c, id)
	}
	return err
}

// forgetIn drops session id as cell c knows it: the session in the home
// cell, its lease elsewhere.
func (a *Arbiter) forgetIn(c *cell, id int64) {
	if c == a.home {
		a.forgetSession(id)
		return
	}
	c.forgetLease(id)
}

// Release ends the hold of key by session with tok. An absent hold is not an
// error (released is false); a hold with another token or session is
// ErrStaleToken. When a waiter is queued here, the key is handed to it in
// the same transaction. The caller must be allowed to lock key (the one
// denial otherwise, before anything is read).
func (a *Arbiter) Release(ctx context.Context, caller identity.Caller, session int64, key string, tok uint64) (released bool, err error) {
	who := caller.String()
	defer func() {
		if !a.log.Enabled(ctx, slog.LevelDebug) {
			return
		}
		a.log.Debug("release", "key", key, "caller", who, "session", session, "held", released, "err", err)
	}()
	if err := lockkey.Validate(key); err != nil {
		return false, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if !a.policy.Load().Authz.Allow(who, key) {
		return false, authz.ErrDenied
	}
	if err := a.homeCheck(key); err != nil {
		return false, err
	}
	if isLocal(session) && a.home.open != nil {
		return a.releaseOpen(who, session, key, tok)
	}
	hs, err := a.session(ctx, who, session)
	if err != nil {
		return false, err
	}
	c := a.cellOfToken(key, tok)
	if c == a.home {
		return c.release(ctx, session, key, tok)
	}
	sub, ok := c.sessionLeases.bySession.load(hs.id)
	if !ok {
		if sub, err = a.findLease(ctx, c, hs); err != nil || sub == nil {
			return false, err // no lease there: nothing is held there
		}
	}
	return c.release(ctx, sub.id, key, tok)
}

// release is Release after the caller's checks.
func (c *cell) release(ctx context.Context, session int64, key string, tok uint64) (bool, error) {
	ep, rev := token.Unpack(tok)
	hk := holdKey(key)
	for range 3 {
		st := c.epoch.Load()
		if st.sealed {
			return false, sealedErr(st)
		}
		if ep != st.epoch {
			return false, ErrStaleToken
		}
		// own are the hold's compares: this grant of the key (its
		// revision, which the token carries) on this session. A release
		// retried after its answer was lost must never free a newer grant
		// of the key, the same session's included. A handoff's
		// transaction, sent alone, adds the epoch record's (a batch
		// compares it once).
		own := []*pb.Compare{etcdop.Modified(hk, rev), etcdop.Lease(hk, session)}
		if releaseByKey {
			own = own[1:]
		}
		cmp := append(slices.Clip(own), etcdop.Modified(epochKey, st.modRev))
		if done, err := c.durables.handoff(ctx, key, hk, cmp, st, session, rev); done {
			return err == nil, err
		}
		done, released, retry, err := c.memory.handoff(ctx, key, hk, cmp, st)
		if retry {
			continue // the epoch record moved: compare against the new one
		}
		if err != nil || done {
			return released, err
		}
		start := time.Now()
		resp, retry, err := c.committed(ctx, c.commits.commit(ctx, &part{key: key, epochRev: st.modRev, cmps: own,
			then: []*pb.RequestOp{etcdop.Delete(hk)}, els: []*pb.RequestOp{etcdop.Get(hk)},
			timeout: c.callTimeout(ctx)}), start)
		if err != nil {
			return false, err
		}
		if retry {
			continue
		}
		if resp.Succeeded {
			c.memory.wakeHead(key)
			return true, nil
		}
		retry, err = c.releaseRefused(resp, st, start, true)
		if !retry {
			return false, err
		}
	}
	return false, fmt.Errorf("%w: the epoch record kept changing", ErrUnavailable)
}

// releaseRefused explains a refused release: gone (nil), stale, or an epoch
// change (retry). Its Else read the hold and, unless it was a part of a
// batch (batched: the batch compared the record), the epoch record.
func (c *cell) releaseRefused(resp *clientv3.TxnResponse, st *epochState, start time.Time, batched bool) (retry bool, err error) {
	holds := resp.Responses[0].GetResponseRange().Kvs
	if !batched {
		if eps := resp.Responses[1].GetResponseRange().Kvs; len(eps) == 0 || eps[0].ModRevision != st.modRev {
			o, err := observe(eps, resp.Header, start)
			if err != nil {
				return false, err
			}
			if next := c.apply(o); next.sealed {
				return false, sealedErr(next)
			}
			return true, nil
		}
	}
	if len(holds) == 0 {
		return false, nil
	}
	return false, ErrStaleToken
}
