package arbiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmove"
	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// Force-release keys: pending requests, on a lease of ForceRequestTTL, and
// the records of approved ones, on a lease of ForceRecordTTL.
const (
	forceRequestPrefix = "/sys/force-requests/"
	forceRecordPrefix  = keyspace.ForceRecordPrefix
	// ForceRequestTTL is how long a force-release request waits for its
	// approver.
	ForceRequestTTL = time.Hour
	// ForceRecordTTL is how long the record of an approved force-release
	// is kept in etcd (the log keeps it for longer).
	ForceRecordTTL = 24 * time.Hour
)

// ForceRelease is a pending request to release a hold by force.
type ForceRelease struct {
	ID            string    `json:"id"`
	Key           string    `json:"key"`
	Holder        string    `json:"holder"`
	Session       int64     `json:"session"`
	HoldRevision  int64     `json:"holdRevision"`
	HoldAcquired  time.Time `json:"holdAcquiredAt"`
	Class         string    `json:"class"`
	Enforcement   string    `json:"enforcement"`
	Requester     string    `json:"requester"`
	Reason        string    `json:"reason"`
	RevokeSession bool      `json:"revokeSession"`
	RequestedAt   time.Time `json:"requestedAt"`
	ExpiresAt     time.Time `json:"expiresAt"`
}

// forceRecord is what an approval leaves in /sys/force/.
type forceRecord struct {
	ForceRelease
	Approver   string    `json:"approver"`
	ApprovedAt time.Time `json:"approvedAt"`
	Revoked    bool      `json:"sessionRevoked"`
	// Home is the session Session's lease stands for, when Session is a
	// cluster lease (clusterlease.go).
	Home int64 `json:"home,omitempty"`
	// RevokeOnly marks the record a revoke leaves on a cluster other than
	// the forced hold's: it removed no hold of Key there, and says why the
	// session's holds there end (the audit history records them forced).
	RevokeOnly bool `json:"revokeOnly,omitempty"`
}

func newForceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RequestForceRelease records a request to release key's current hold by
// force. Only operators may ask; the reason is required. The request
// remembers the hold's revision: approval releases that hold and no other.
func (a *Arbiter) RequestForceRelease(ctx context.Context, caller identity.Caller, key, reason string, revokeSession bool) (ForceRelease, error) {
	c := a.cellOfKey(key)
	if !a.IsOperator(caller) {
		return ForceRelease{}, ErrNotOperator
	}
	who := caller.String()
	if err := lockkey.Validate(key); err != nil {
		return ForceRelease{}, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if strings.TrimSpace(reason) == "" {
		return ForceRelease{}, fmt.Errorf("%w: reason: must not be empty", ErrInvalid)
	}
	if err := a.homeCheck(key); err != nil {
		return ForceRelease{}, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.admin.Get(cctx, holdKey(key))
	if err != nil {
		return ForceRelease{}, storeErr(ctx, err)
	}
	if _, err := c.checkHeader(resp.Header); err != nil {
		return ForceRelease{}, err
	}
	if len(resp.Kvs) == 0 {
		return ForceRelease{}, fmt.Errorf("%w: %s", ErrNotHeld, key)
	}
	kv := resp.Kvs[0]
	h, err := decodeHold(kv)
	if err != nil {
		return ForceRelease{}, err
	}
	now := a.now()
	fr := ForceRelease{ID: newForceID(), Key: key, Holder: h.Identity, Session: kv.Lease, HoldRevision: kv.ModRevision,
		HoldAcquired: time.Unix(0, h.AcquiredAt), Class: h.Class, Enforcement: a.enforcementOf(h.Class),
		Requester: who, Reason: reason, RevokeSession: revokeSession, RequestedAt: now, ExpiresAt: now.Add(ForceRequestTTL)}
	lease, err := c.cli.Grant(cctx, int64(ForceRequestTTL/time.Second))
	if err != nil {
		return ForceRelease{}, storeErr(ctx, err)
	}
	b, _ := json.Marshal(fr)
	if _, err := c.admin.Put(cctx, forceRequestPrefix+fr.ID, string(b), clientv3.WithLease(lease.ID)); err != nil {
		return ForceRelease{}, storeErr(ctx, err)
	}
	a.metrics.forceReleases.WithLabelValues(lockkey.Namespace(key), "requested").Inc()
	a.log.Warn("force-release requested", "id", fr.ID, "key", key, "holder", fr.Holder, "class", fr.Class,
		"enforcement", fr.Enforcement, "requester", who, "reason", reason, "revoke_session", revokeSession)
	return fr, nil
}

// enforcementOf is the enforcement served for class ref ("ns/name") in
// the loaded classes (fenced only while a pause test proves it), or
// "unknown" for a class no longer loaded.
func (a *Arbiter) enforcementOf(ref string) string {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return "unknown"
	}
	pol := a.policy.Load()
	c, found := pol.Classes.Class(ns, name)
	if !found {
		return "unknown"
	}
	return string(pol.Classes.Served(c, a.now()))
}

// getForce finds request id in the cell of its key (a request lives with
// the hold it names, so approving it is one transaction there).
func (a *Arbiter) getForce(ctx context.Context, id string) (ForceRelease, int64, *cell, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") {
		return ForceRelease{}, 0, nil, fmt.Errorf("%w: id: must be a request id from RequestForceRelease", ErrInvalid)
	}
	for _, c := range a.cells {
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.admin.Get(cctx, forceRequestPrefix+id)
		cancel()
		if err != nil {
			return ForceRelease{}, 0, nil, storeErr(ctx, err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		var fr ForceRelease
		if err := json.Unmarshal(resp.Kvs[0].Value, &fr); err != nil {
			return ForceRelease{}, 0, nil, fmt.Errorf("%w: force request %s: %v", ErrInternal, id, err)
		}
		return fr, resp.Kvs[0].ModRevision, c, nil
	}
	return ForceRelease{}, 0, nil, fmt.Errorf("%w: %s", ErrForceNotFound, id)
}

// ForceApproval is the outcome of ApproveForceRelease.
type ForceApproval struct {
	// ForceRelease is the approved request.
	ForceRelease ForceRelease
	// RecordKey is the etcd key of the force record written; empty when
	// none was.
	RecordKey string
}

// ApproveForceRelease releases the requested hold: one transaction compares
// the hold with the one requested (revision and session) and the request
// itself, deletes the hold and the request, and writes the force record.
// With RevokeSession the holder's session is then revoked, ending all its
// holds. The approver must be an operator other than the requester.
func (a *Arbiter) ApproveForceRelease(ctx context.Context, caller identity.Caller, id string) (ForceApproval, error) {
	if !a.IsOperator(caller) {
		return ForceApproval{}, ErrNotOperator
	}
	who := caller.String()
	fr, reqRev, c, err := a.getForce(ctx, id)
	if err != nil {
		return ForceApproval{}, err
	}
	ns := lockkey.Namespace(fr.Key)
	if fr.Requester == who {
		a.metrics.forceReleases.WithLabelValues(ns, "refused").Inc()
		return ForceApproval{ForceRelease: fr}, ErrSamePerson
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	lease, err := c.cli.Grant(cctx, int64(ForceRecordTTL/time.Second))
	if err != nil {
		return ForceApproval{}, storeErr(ctx, err)
	}
	rec := forceRecord{ForceRelease: fr, Approver: who, ApprovedAt: a.now(), Revoked: fr.RevokeSession}
	if fr.RevokeSession && c != a.home {
		if rec.Home, err = a.homeOf(ctx, c, fr.Session); err != nil {
			return ForceApproval{}, err
		}
	}
	recKey, err := a.forceHold(cctx, c, rec, lease.ID, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(forceRequestPrefix+fr.ID), "=", reqRev)},
		clientv3.OpDelete(forceRequestPrefix+fr.ID))
	if err != nil {
		if errors.Is(err, ErrHoldChanged) {
			a.metrics.forceReleases.WithLabelValues(ns, "stale").Inc()
			return ForceApproval{ForceRelease: fr}, err
		}
		return ForceApproval{}, storeErr(ctx, err)
	}
	if fr.RevokeSession {
		if err := a.revokeHolder(ctx, c, rec); err != nil {
			return ForceApproval{ForceRelease: fr, RecordKey: recKey}, fmt.Errorf("hold released and recorded, but revoking its session failed: %w", err)
		}
	}
	c.memory.wakeHead(fr.Key)
	a.metrics.forceReleases.WithLabelValues(ns, "approved").Inc()
	a.log.Warn("force-release approved", "id", fr.ID, "key", fr.Key, "holder", fr.Holder, "class", fr.Class,
		"enforcement", fr.Enforcement, "requester", fr.Requester, "approver", who, "reason", fr.Reason,
		"revoke_session", fr.RevokeSession)
	return ForceApproval{ForceRelease: fr, RecordKey: recKey}, nil
}

// forceHold is the transaction of a force-release: while the hold is the
// one rec names (revision and session) and every cmp holds, it deletes the hold,
// does ops and writes rec (on lease), in one transaction. The holder is then told through its
// keepalive answers at once (every arbiter also learns it from the
// record). ErrHoldChanged when a compare failed.
func (a *Arbiter) forceHold(ctx context.Context, c *cell, rec forceRecord, lease clientv3.LeaseID, cmps []clientv3.Cmp, ops ...clientv3.Op) (string, error) {
	b, _ := json.Marshal(rec)
	recKey := forceRecordPrefix + rec.ID
	hk := holdKey(rec.Key)
	resp, err := c.admin.Txn(ctx).If(append([]clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(hk), "=", rec.HoldRevision),
		clientv3.Compare(clientv3.LeaseValue(hk), "=", clientv3.LeaseID(rec.Session)),
	}, cmps...)...).Then(append(ops, clientv3.OpDelete(hk), clientv3.OpPut(recKey, string(b), clientv3.WithLease(lease)))...).Commit()
	if err != nil {
		return "", err
	}
	if !resp.Succeeded {
		return "", ErrHoldChanged
	}
	a.removed.add(rec.Session, RemovedHold{Key: rec.Key, HoldRevision: rec.HoldRevision,
		Requester: rec.Requester, Approver: rec.Approver, Reason: rec.Reason}, time.Now())
	return recKey, nil
}

// endHoldForMove releases key's hold on shard by force for plan p, whose
// drain reached its bound (shardmove.Controller.EndHold): recorded like an
// approved force-release, requested and approved by the plan's operators.
func (a *Arbiter) endHoldForMove(ctx context.Context, shard, key string, p *shardmove.Plan) error {
	c, err := a.cellNamed(shard)
	if err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.admin.Get(cctx, holdKey(key))
	if err != nil || len(resp.Kvs) == 0 {
		return err // gone meanwhile: nothing to end
	}
	kv := resp.Kvs[0]
	h, err := decodeHold(kv)
	if err != nil {
		return err
	}
	now := a.now()
	rec := forceRecord{ForceRelease: ForceRelease{ID: newForceID(), Key: key, Holder: h.Identity, Session: kv.Lease, HoldRevision: kv.ModRevision,
		HoldAcquired: time.Unix(0, h.AcquiredAt), Class: h.Class, Enforcement: a.enforcementOf(h.Class), Requester: p.Requester,
		Reason:      fmt.Sprintf("shard move %s: the range's drain reached its bound (the longest class TTL, %s)", p.ID, max(shardmove.Bound(p.Live), shardmove.Bound(p.Stragglers))),
		RequestedAt: now, ExpiresAt: now}, Approver: p.Approver, ApprovedAt: now}
	lease, err := c.cli.Grant(cctx, int64(ForceRecordTTL/time.Second))
	if err != nil {
		return err
	}
	if _, err := a.forceHold(cctx, c, rec, lease.ID, nil); err != nil {
		return err
	}
	a.metrics.forceReleases.WithLabelValues(lockkey.Namespace(key), "moved").Inc()
	a.log.Warn("force-release for a shard move", "id", rec.ID, "key", key, "holder", rec.Holder, "class", rec.Class,
		"plan", p.ID, "requester", rec.Requester, "approver", rec.Approver, "reason", rec.Reason)
	return nil
}

// revokeHolder revokes the session whose lease in cell c is rec.Session,
// with every hold it has on any cluster: its lease on the coord cluster
// (the session itself) and its lease on every other. On each cluster but
// c it first leaves a record of the revoke (revokeLeaseIn). When no record
// names the session any more (the lease lapsed meanwhile), rec.Session
// alone is revoked.
func (a *Arbiter) revokeHolder(ctx context.Context, c *cell, rec forceRecord) error {
	if c != a.home && rec.Home == 0 {
		return a.revokeLease(ctx, c, rec.Session)
	}
	home := rec.Session
	if c != a.home {
		home = rec.Home
	}
	// The session first: once it is gone arbiters stop renewing its leases
	// anywhere, so one whose revoke fails below lapses within a TTL.
	if err := a.revokeSessionLease(ctx, c, home, rec); err != nil {
		return err
	}
	var errs []error
	if c != a.home {
		errs = append(errs, a.revokeLease(ctx, c, rec.Session))
	}
	errs = append(errs, a.revokeLeases(ctx, home, c, &rec))
	return errors.Join(errs...)
}

// revokeLease revokes lease id in cell c, with every hold on it.
func (a *Arbiter) revokeLease(ctx context.Context, c *cell, id int64) error {
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.cli.Revoke(cctx, clientv3.LeaseID(id)); err != nil && !isLeaseNotFound(err) {
		return fmt.Errorf("session lease %d on cluster %s: %w", id, c.name, storeErr(ctx, err))
	}
	a.forgetIn(c, id)
	return nil
}

// revokeSessionLease revokes session home's own lease, the coord
// cluster's, recording why there first when the forced hold was elsewhere.
func (a *Arbiter) revokeSessionLease(ctx context.Context, forced *cell, home int64, rec forceRecord) error {
	if forced != a.home {
		cctx, cancel := a.home.callCtx(ctx)
		err := a.putRevokeRecord(ctx, cctx, a.home, rec, home, 0)
		cancel()
		if err != nil {
			return err
		}
	}
	return a.revokeLease(ctx, a.home, home)
}

// putRevokeRecord leaves in cell c the record of a revoke of lease (of
// session home, when lease is a cluster lease): rec, marked RevokeOnly.
func (a *Arbiter) putRevokeRecord(ctx, cctx context.Context, c *cell, rec forceRecord, lease, home int64) error {
	l, err := c.cli.Grant(cctx, int64(ForceRecordTTL/time.Second))
	if err == nil {
		rec.Session, rec.Home, rec.RevokeOnly = lease, home, true
		b, _ := json.Marshal(rec)
		_, err = c.cli.Put(cctx, forceRecordPrefix+rec.ID, string(b), clientv3.WithLease(l.ID))
	}
	if err != nil {
		return fmt.Errorf("recording the revoke on cluster %s: %w", c.name, storeErr(ctx, err))
	}
	return nil
}

// DenyForceRelease withdraws a pending request (its requester) or refuses
// it (another operator).
func (a *Arbiter) DenyForceRelease(ctx context.Context, caller identity.Caller, id, reason string) (ForceRelease, error) {
	if !a.IsOperator(caller) {
		return ForceRelease{}, ErrNotOperator
	}
	who := caller.String()
	fr, reqRev, c, err := a.getForce(ctx, id)
	if err != nil {
		return ForceRelease{}, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.admin.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(forceRequestPrefix+id), "=", reqRev)).
		Then(clientv3.OpDelete(forceRequestPrefix + id)).Commit()
	if err != nil {
		return ForceRelease{}, storeErr(ctx, err)
	}
	if !resp.Succeeded {
		return ForceRelease{}, fmt.Errorf("%w: %s", ErrForceNotFound, id)
	}
	a.metrics.forceReleases.WithLabelValues(lockkey.Namespace(fr.Key), "denied").Inc()
	a.log.Warn("force-release denied", "id", id, "key", fr.Key, "requester", fr.Requester, "by", who, "reason", reason)
	return fr, nil
}

// ListForceReleases lists the pending requests, oldest first.
func (a *Arbiter) ListForceReleases(ctx context.Context, caller identity.Caller) ([]ForceRelease, error) {
	if !a.IsOperator(caller) {
		return nil, ErrNotOperator
	}
	var out []ForceRelease
	for _, c := range a.cells {
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.admin.Get(cctx, forceRequestPrefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			return nil, storeErr(ctx, err)
		}
		for _, kv := range resp.Kvs {
			var fr ForceRelease
			if err := json.Unmarshal(kv.Value, &fr); err != nil {
				return nil, fmt.Errorf("%w: force request %s: %v", ErrInternal, kv.Key, err)
			}
			out = append(out, fr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	return out, nil
}
