package arbiter

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/pkg/token"
)

// epochRecord is the value of /sys/epoch.
type epochRecord struct {
	Epoch     uint32 `json:"epoch"`
	ClusterID string `json:"clusterID"` // hex, so no JSON reader rounds it
}

// epochState is what the arbiter knows about the epoch. It is replaced
// whole, never mutated.
type epochState struct {
	epoch     uint32
	clusterID uint64 // the cluster the epoch was minted for
	modRev    int64  // ModRevision of /sys/epoch, compared by every grant
	store     uint64 // cluster ID in the latest response header
	sealed    bool
}

// EpochStatus is the epoch as this arbiter sees it.
type EpochStatus struct {
	Epoch           uint32
	RecordClusterID uint64
	StoreClusterID  uint64
	Sealed          bool
	Revision        int64
}

func encodeEpoch(e uint32, cluster uint64) string {
	b, _ := json.Marshal(epochRecord{Epoch: e, ClusterID: strconv.FormatUint(cluster, 16)})
	return string(b)
}

func decodeEpoch(kv *mvccpb.KeyValue) (uint32, uint64, error) {
	var r epochRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return 0, 0, fmt.Errorf("%w: epoch record: %v", ErrInternal, err)
	}
	id, err := strconv.ParseUint(r.ClusterID, 16, 64)
	if err != nil || r.Epoch == 0 || r.Epoch > token.MaxEpoch {
		return 0, 0, fmt.Errorf("%w: epoch record %q is malformed", ErrInternal, kv.Value)
	}
	return r.Epoch, id, nil
}

// initEpoch reads /sys/epoch, creating epoch 1 bound to the store's cluster
// ID on first start.
func (a *Arbiter) initEpoch(ctx context.Context) error {
	for range 3 {
		cctx, cancel := a.callCtx(ctx)
		resp, err := a.cli.Get(cctx, epochKey)
		cancel()
		if err != nil {
			return storeErr(ctx, err)
		}
		if len(resp.Kvs) == 1 {
			return a.applyEpoch(resp.Kvs[0], resp.Header)
		}
		cctx, cancel = a.callCtx(ctx)
		_, err = a.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(epochKey), "=", 0)).
			Then(clientv3.OpPut(epochKey, encodeEpoch(1, resp.Header.ClusterId))).
			Commit()
		cancel()
		if err != nil {
			return storeErr(ctx, err)
		}
		a.log.Info("epoch created", "epoch", 1, "cluster_id", fmt.Sprintf("%x", resp.Header.ClusterId))
	}
	return fmt.Errorf("%w: could not create the epoch record", ErrInternal)
}

// applyEpoch installs the state read from the epoch key and a header.
func (a *Arbiter) applyEpoch(kv *mvccpb.KeyValue, h *pb.ResponseHeader) error {
	e, id, err := decodeEpoch(kv)
	if err != nil {
		return err
	}
	st := &epochState{epoch: e, clusterID: id, modRev: kv.ModRevision, store: h.ClusterId, sealed: id != h.ClusterId}
	old := a.epoch.Swap(st)
	a.metrics.setSealed(st.sealed, e)
	if old == nil || old.sealed != st.sealed || old.epoch != st.epoch {
		a.log.Info("epoch state", "epoch", e, "record_cluster_id", fmt.Sprintf("%x", id),
			"store_cluster_id", fmt.Sprintf("%x", h.ClusterId), "sealed", st.sealed)
	}
	return nil
}

// checkHeader compares a response's cluster ID with the epoch record's. On a
// mismatch the arbiter seals; the caller must not hand out anything from
// that response.
func (a *Arbiter) checkHeader(h *pb.ResponseHeader) (*epochState, error) {
	st := a.epoch.Load()
	if h == nil || h.ClusterId == st.clusterID {
		if st.sealed {
			return st, ErrSealed
		}
		return st, nil
	}
	if !st.sealed || st.store != h.ClusterId {
		sealed := *st
		sealed.sealed, sealed.store = true, h.ClusterId
		a.epoch.Store(&sealed)
		a.metrics.setSealed(true, st.epoch)
		a.log.Error("store cluster ID differs from the epoch record: sealed until the epoch advances",
			"epoch", st.epoch, "record_cluster_id", fmt.Sprintf("%x", st.clusterID),
			"store_cluster_id", fmt.Sprintf("%x", h.ClusterId))
	}
	return a.epoch.Load(), ErrSealed
}

func (a *Arbiter) refreshEpochLoop(ctx context.Context) {
	t := time.NewTicker(a.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := a.reloadEpoch(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("epoch refresh failed", "err", err)
		}
	}
}

// reloadEpoch re-reads the epoch record (another arbiter may have advanced
// it, or the store may have been swapped under us). It returns the store's
// revision.
func (a *Arbiter) reloadEpoch(ctx context.Context) (int64, error) {
	cctx, cancel := a.callCtx(ctx)
	defer cancel()
	resp, err := a.cli.Get(cctx, epochKey)
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	if len(resp.Kvs) != 1 {
		return 0, fmt.Errorf("%w: epoch record missing", ErrInternal)
	}
	return resp.Header.Revision, a.applyEpoch(resp.Kvs[0], resp.Header)
}

// Sealed reports whether the arbiter refuses grants because the store was
// restored.
func (a *Arbiter) Sealed() bool { return a.epoch.Load().sealed }

// EpochStatus reads the epoch record and the store's cluster ID now.
func (a *Arbiter) EpochStatus(ctx context.Context) (EpochStatus, error) {
	rev, err := a.reloadEpoch(ctx)
	if err != nil {
		return EpochStatus{}, err
	}
	return a.epochStatus(rev), nil
}

func (a *Arbiter) epochStatus(rev int64) EpochStatus {
	st := a.epoch.Load()
	return EpochStatus{Epoch: st.epoch, RecordClusterID: st.clusterID, StoreClusterID: st.store,
		Sealed: st.sealed, Revision: rev}
}

// EpochRequest is a pending request to advance the epoch.
type EpochRequest struct {
	ID        string    `json:"id"`
	From      uint32    `json:"from"`
	Requester string    `json:"requester"`
	Reason    string    `json:"reason"`
	ExpiresAt time.Time `json:"expiresAt"`
}

const epochRequestPrefix = "/sys/epoch-requests/"

// RequestEpochAdvance records an operator's request to advance the epoch
// from `from`. Another operator must approve it (ApproveEpochAdvance)
// within ForceRequestTTL.
func (a *Arbiter) RequestEpochAdvance(ctx context.Context, caller string, from uint32, reason string) (EpochRequest, error) {
	if !a.IsOperator(caller) {
		return EpochRequest{}, ErrNotOperator
	}
	if strings.TrimSpace(reason) == "" {
		return EpochRequest{}, fmt.Errorf("%w: reason: must not be empty", ErrInvalid)
	}
	cctx, cancel := a.callCtx(ctx)
	defer cancel()
	cur, err := a.admin.Get(cctx, epochKey)
	if err != nil {
		return EpochRequest{}, storeErr(ctx, err)
	}
	if len(cur.Kvs) != 1 {
		return EpochRequest{}, fmt.Errorf("%w: epoch record missing", ErrInternal)
	}
	if e, _, err := decodeEpoch(cur.Kvs[0]); err != nil {
		return EpochRequest{}, err
	} else if e != from {
		return EpochRequest{}, fmt.Errorf("%w: current epoch is %d, not %d", ErrEpochMoved, e, from)
	}
	req := EpochRequest{ID: newForceID(), From: from, Requester: caller, Reason: reason, ExpiresAt: a.now().Add(ForceRequestTTL)}
	lease, err := a.cli.Grant(cctx, int64(ForceRequestTTL/time.Second))
	if err != nil {
		return EpochRequest{}, storeErr(ctx, err)
	}
	b, _ := json.Marshal(req)
	if _, err := a.admin.Put(cctx, epochRequestPrefix+req.ID, string(b), clientv3.WithLease(lease.ID)); err != nil {
		return EpochRequest{}, storeErr(ctx, err)
	}
	a.metrics.epochAdvances.WithLabelValues("requested").Inc()
	a.log.Warn("epoch advance requested", "id", req.ID, "from", from, "requester", caller, "reason", reason)
	return req, nil
}

// ApproveEpochAdvance runs a requested epoch advance; the approver must be
// an operator other than the requester. It moves the epoch from the
// request's epoch to the next, bound to the store's current cluster ID, and
// deletes every hold and queue key and the request, in one transaction.
// Every token granted afterwards is greater than every token granted
// before, whatever revision the store restarted from.
func (a *Arbiter) ApproveEpochAdvance(ctx context.Context, caller, id string) (EpochRequest, EpochStatus, int64, error) {
	if !a.IsOperator(caller) {
		return EpochRequest{}, EpochStatus{}, 0, ErrNotOperator
	}
	if id == "" || strings.ContainsAny(id, "/\x00") {
		return EpochRequest{}, EpochStatus{}, 0, fmt.Errorf("%w: id: must be a request id from RequestEpochAdvance", ErrInvalid)
	}
	cctx, cancel := a.callCtx(ctx)
	defer cancel()
	got, err := a.admin.Get(cctx, epochRequestPrefix+id)
	if err != nil {
		return EpochRequest{}, EpochStatus{}, 0, storeErr(ctx, err)
	}
	if len(got.Kvs) == 0 {
		return EpochRequest{}, EpochStatus{}, 0, fmt.Errorf("%w: %s", ErrEpochRequestNotFound, id)
	}
	var req EpochRequest
	if err := json.Unmarshal(got.Kvs[0].Value, &req); err != nil {
		return EpochRequest{}, EpochStatus{}, 0, fmt.Errorf("%w: epoch request %s: %v", ErrInternal, id, err)
	}
	if req.Requester == caller {
		a.metrics.epochAdvances.WithLabelValues("refused").Inc()
		a.log.Warn("epoch advance refused: the approver is the requester", "id", id, "requester", caller)
		return req, EpochStatus{}, 0, ErrSamePerson
	}
	st, deleted, err := a.advanceEpoch(ctx, caller, req, got.Kvs[0].ModRevision)
	if err == nil {
		a.metrics.epochAdvances.WithLabelValues("approved").Inc()
	}
	return req, st, deleted, err
}

func (a *Arbiter) advanceEpoch(ctx context.Context, caller string, req EpochRequest, reqRev int64) (EpochStatus, int64, error) {
	from, reason := req.From, req.Reason
	cctx, cancel := a.callCtx(ctx)
	defer cancel()
	cur, err := a.admin.Get(cctx, epochKey)
	if err != nil {
		return EpochStatus{}, 0, storeErr(ctx, err)
	}
	if len(cur.Kvs) != 1 {
		return EpochStatus{}, 0, fmt.Errorf("%w: epoch record missing", ErrInternal)
	}
	e, _, err := decodeEpoch(cur.Kvs[0])
	if err != nil {
		return EpochStatus{}, 0, err
	}
	if e != from {
		return EpochStatus{}, 0, fmt.Errorf("%w: current epoch is %d, not %d", ErrEpochMoved, e, from)
	}
	if e >= token.MaxEpoch {
		return EpochStatus{}, 0, fmt.Errorf("%w: epoch %d is the last one", ErrEpochExhausted, e)
	}
	newID := cur.Header.ClusterId
	// A holder of the old epoch learns that its hold is gone from its next
	// keepalive answer (it carries the epoch), or is fenced by its own
	// deadline when no answer comes: either way within its class TTL. The
	// grace key, on a lease of the longest class TTL, holds every grant off
	// until then, so no new holder overlaps an old one that still believes
	// it holds.
	grace := a.policy.Load().Classes.MaxTTL() + time.Second
	lease, err := a.cli.Grant(cctx, int64((grace+time.Second-1)/time.Second))
	if err != nil {
		return EpochStatus{}, 0, storeErr(ctx, err)
	}
	resp, err := a.admin.Txn(cctx).
		If(
			clientv3.Compare(clientv3.ModRevision(epochKey), "=", cur.Kvs[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(epochRequestPrefix+req.ID), "=", reqRev),
		).
		Then(
			clientv3.OpPut(epochKey, encodeEpoch(e+1, newID)),
			clientv3.OpDelete(holdPrefix, clientv3.WithPrefix()),
			clientv3.OpDelete(queuePrefix, clientv3.WithPrefix()),
			clientv3.OpPut(graceKey, reason, clientv3.WithLease(lease.ID)),
			clientv3.OpDelete(epochRequestPrefix+req.ID),
		).Commit()
	if err != nil {
		return EpochStatus{}, 0, storeErr(ctx, err)
	}
	if !resp.Succeeded {
		return EpochStatus{}, 0, fmt.Errorf("%w: the epoch record or the request changed during the advance", ErrEpochMoved)
	}
	if resp.Header.ClusterId != newID {
		return EpochStatus{}, 0, fmt.Errorf("%w: the store's cluster ID changed during the advance", ErrEpochMoved)
	}
	deleted := resp.Responses[1].GetResponseDeleteRange().Deleted
	a.log.Warn("epoch advanced", "requester", req.Requester, "approver", caller, "from", e, "to", e+1,
		"cluster_id", fmt.Sprintf("%x", newID), "holds_deleted", deleted, "reason", reason, "grants_resume_in", grace)
	rev, err := a.reloadEpoch(ctx)
	if err != nil {
		return EpochStatus{}, deleted, err
	}
	return a.epochStatus(rev), deleted, nil
}

// Ready reports whether the arbiter can grant: etcd answers and the store is
// not sealed.
func (a *Arbiter) Ready(ctx context.Context) error {
	if _, err := a.reloadEpoch(ctx); err != nil {
		return err
	}
	if a.Sealed() {
		return ErrSealed
	}
	return nil
}
