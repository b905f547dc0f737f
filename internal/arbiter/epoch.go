package arbiter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/pkg/token"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// epochRecord is the value of /sys/epoch.
type epochRecord = keyspace.Epoch

// epochState is what the arbiter knows about the epoch. It is replaced
// whole, never mutated, and never moves backwards: epoch only grows, and
// once sealed only a read showing a higher epoch bound to that response's
// cluster ID unseals (nextEpoch).
type epochState struct {
	epoch     uint32 // the epoch served; while sealed, the highest known
	record    uint32 // the epoch the store's record holds (0: none)
	clusterID uint64 // the cluster the epoch was minted for
	modRev    int64  // ModRevision of /sys/epoch, compared by every grant
	store     uint64 // cluster ID in the latest response header
	sealed    bool
	why       string    // why sealed, in words, with what to do
	missing   bool      // the store has no epoch record
	readAt    time.Time // send time of the latest read that confirmed it
}

// EpochStatus is the epoch as this arbiter sees it.
type EpochStatus struct {
	// Epoch is the epoch the store's record holds (0 when it has none): the
	// --from of an advance.
	Epoch           uint32
	RecordClusterID uint64
	StoreClusterID  uint64
	Sealed          bool
	// SealedReason says why, and what to do; empty when not sealed.
	SealedReason string
	// RecordMissing: the store has no epoch record.
	RecordMissing bool
	// Highest is the highest epoch this arbiter has seen (in memory and in
	// its state file): an advance must go above it.
	Highest  uint32
	Revision int64
	// Cluster names the cluster.
	Cluster string
	// Allocated is the highest epoch allocated to any cluster (the coord
	// cluster's counter); 0 when none was, or it could not be read.
	Allocated uint32
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

// observation is one read of the epoch record and the header it came with.
type observation struct {
	found   bool
	epoch   uint32
	cluster uint64 // the record's cluster ID
	modRev  int64
	store   uint64 // the response header's cluster ID
	rev     int64  // the response header's revision
	readAt  time.Time
}

func observe(kvs []*mvccpb.KeyValue, h *pb.ResponseHeader, readAt time.Time) (observation, error) {
	if h == nil {
		return observation{}, fmt.Errorf("%w: a store response without a header", ErrInternal)
	}
	o := observation{store: h.ClusterId, rev: h.Revision, readAt: readAt}
	if len(kvs) == 0 {
		return o, nil
	}
	e, id, err := decodeEpoch(kvs[0])
	if err != nil {
		return o, err
	}
	o.found, o.epoch, o.cluster, o.modRev = true, e, id, kvs[0].ModRevision
	return o, nil
}

func hexID(id uint64) string { return strconv.FormatUint(id, 16) }

// advanceHint is what to do about a seal, for messages.
func advanceHint(from, highest uint32) string {
	if from == 0 {
		return fmt.Sprintf("two operators initialise it above every epoch issued before: "+
			"lockctl epoch advance request --from 0 --to <N> (N > %d; docs/operating.md says where to find the last one)", highest)
	}
	to := max(from, highest) + 1
	return fmt.Sprintf("two operators advance it: lockctl epoch advance request --from %d --to %d", from, to)
}

// nextEpoch is the state after observation o, given the previous state
// (nil at start) and floor, the highest epoch served before (the state
// file). It never moves the epoch backwards, and a sealed state stays
// sealed until a higher epoch bound to the answering cluster is read.
func nextEpoch(old *epochState, o observation, floor watermark) *epochState {
	highest := floor.Epoch
	if old != nil {
		highest = max(highest, old.epoch)
	}
	readAt := o.readAt
	if old != nil && old.readAt.After(readAt) {
		readAt = old.readAt
	}
	sealed := func(why string) *epochState {
		// The sealed state keeps the highest epoch known, the record's
		// included: only a read of a higher one may unseal it.
		st := &epochState{epoch: max(highest, o.epoch), record: o.epoch, store: o.store, sealed: true, why: why, missing: !o.found, readAt: readAt}
		if old != nil {
			st.clusterID, st.modRev = old.clusterID, old.modRev
		}
		if o.found && o.epoch >= highest {
			st.clusterID, st.modRev = o.cluster, o.modRev
		}
		return st
	}
	switch {
	case !o.found:
		return sealed("the store has no epoch record (a store rebuilt empty, or restored from before lockd first ran): " +
			advanceHint(0, highest))
	case o.epoch < highest:
		return sealed(fmt.Sprintf("the store is behind: its epoch record says %d, but epoch %d has been served: %s",
			o.epoch, highest, advanceHint(o.epoch, highest)))
	case o.epoch == highest && old != nil && old.sealed:
		// Sealed: only a higher epoch unseals.
		st := *old
		st.store, st.readAt, st.record = o.store, readAt, o.epoch
		if o.store != old.store && o.store != o.cluster {
			st.why = fmt.Sprintf("the store's cluster ID %s differs from the epoch record's %s (a restore): %s",
				hexID(o.store), hexID(o.cluster), advanceHint(o.epoch, highest))
		}
		return &st
	case o.epoch == highest && old != nil && (o.cluster != old.clusterID || o.modRev != old.modRev):
		return sealed(fmt.Sprintf("the epoch record was rewritten without advancing (epoch %d): %s",
			o.epoch, advanceHint(o.epoch, highest)))
	case o.epoch == highest && old == nil && floor.Epoch == o.epoch && floor.ClusterID != 0 && floor.ClusterID != o.cluster:
		return sealed(fmt.Sprintf("the store's epoch %d record names cluster %s, but this lockd served epoch %d on cluster %s: %s",
			o.epoch, hexID(o.cluster), o.epoch, hexID(floor.ClusterID), advanceHint(o.epoch, highest)))
	case old == nil && o.epoch == floor.Epoch && o.rev < floor.Revision:
		return sealed(fmt.Sprintf("the store is behind: its revision %d is below %d, which this lockd served in epoch %d "+
			"(restored without a new cluster token?): %s", o.rev, floor.Revision, o.epoch, advanceHint(o.epoch, highest)))
	case o.store != o.cluster:
		return sealed(fmt.Sprintf("the store's cluster ID %s differs from the epoch record's %s (a restore): %s",
			hexID(o.store), hexID(o.cluster), advanceHint(o.epoch, highest)))
	}
	return &epochState{epoch: o.epoch, record: o.epoch, clusterID: o.cluster, modRev: o.modRev, store: o.store, readAt: readAt}
}

// Bootstrap says when the arbiter may create the epoch record itself.
// Everywhere else a missing record seals the arbiter until two operators
// initialise it at an epoch they state.
type Bootstrap struct {
	// FreshStore: the store is an embedded member that started on an empty
	// data dir, so no token was ever issued from it. The arbiter creates
	// epoch 1, or one above the state file's.
	FreshStore bool
	// ClusterID, when set, lets the arbiter create epoch 1 on the cluster
	// with this ID only, and only if its state file records no epoch: a
	// first deployment. A store rebuilt later has another cluster ID, so a
	// setting left in place does nothing there.
	ClusterID uint64
}

// initEpoch reads /sys/epoch and installs the state, creating the record
// only where Bootstrap allows.
func (c *cell) initEpoch(ctx context.Context) error {
	for range 3 {
		start := time.Now()
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.cli.Get(cctx, epochKey)
		cancel()
		if err != nil {
			return storeErr(ctx, err)
		}
		o, err := observe(resp.Kvs, resp.Header, start)
		if err != nil {
			return err
		}
		first, ok := c.bootstrapEpoch(o)
		if !o.found && ok && c.allocate != nil {
			if first, err = c.allocate(ctx, first); err != nil {
				return err
			}
		}
		if o.found || !ok {
			c.epochMu.Lock()
			st := nextEpoch(nil, o, c.floor)
			c.installLocked(st)
			if !st.sealed {
				c.lastRead.epoch, c.lastRead.rev = st.epoch, o.rev
				c.rememberLocked(st, o.rev)
			}
			c.epochMu.Unlock()
			return nil
		}
		cctx, cancel = c.callCtx(ctx)
		_, err = c.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(epochKey), "=", 0)).
			Then(clientv3.OpPut(epochKey, encodeEpoch(first, o.store))).
			Commit()
		cancel()
		if err != nil {
			return storeErr(ctx, err)
		}
		c.log.Info("epoch created", "epoch", first, "cluster_id", hexID(o.store), "why", c.bootstrapWhy())
	}
	return fmt.Errorf("%w: could not create the epoch record", ErrInternal)
}

// bootstrapEpoch is the epoch the arbiter may create on this store, if any.
func (c *cell) bootstrapEpoch(o observation) (uint32, bool) {
	switch {
	case c.bootstrap.FreshStore:
		return c.floor.Epoch + 1, true
	case c.bootstrap.ClusterID != 0 && c.bootstrap.ClusterID == o.store && c.floor.Epoch == 0:
		return 1, true
	case c.bootstrap.ClusterID != 0:
		c.log.Warn("not creating the epoch record: the bootstrap cluster ID does not match the store's, or this lockd served an epoch before",
			"bootstrap_cluster_id", hexID(c.bootstrap.ClusterID), "store_cluster_id", hexID(o.store), "highest_epoch", c.floor.Epoch)
	}
	return 0, false
}

func (c *cell) bootstrapWhy() string {
	if c.bootstrap.FreshStore {
		return "embedded store on an empty data dir"
	}
	return "first deployment on the named cluster"
}

// apply installs the state after observation o and returns it.
func (c *cell) apply(o observation) *epochState {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	st := nextEpoch(c.epoch.Load(), o, c.floor)
	c.installLocked(st)
	return st
}

func (c *cell) installLocked(st *epochState) {
	old := c.epoch.Swap(st)
	c.metrics.setSealed(c.name, st.sealed, st.epoch)
	if old == nil || old.sealed != st.sealed || old.epoch != st.epoch || old.clusterID != st.clusterID {
		// The store may have been swapped (a restore or a rebuild starts
		// its revisions lower): watches from a revision of the old store
		// would wait for revisions that are not coming. Followers list again.
		c.storeMu.Lock()
		if c.storeChanged != nil {
			close(c.storeChanged)
		}
		c.storeChanged = make(chan struct{})
		c.storeMu.Unlock()
	}
	if old == nil || old.sealed != st.sealed || old.epoch != st.epoch || old.why != st.why {
		if st.sealed {
			c.log.Error("sealed: grants and renewals are refused until the epoch advances", "epoch", st.epoch,
				"record_cluster_id", hexID(st.clusterID), "store_cluster_id", hexID(st.store), "why", st.why)
		} else {
			c.log.Info("epoch state", "epoch", st.epoch, "cluster_id", hexID(st.clusterID), "sealed", false)
		}
	}
}

// checkHeader compares a response's cluster ID with the epoch record's. On a
// mismatch the arbiter seals, for good; the caller must not hand out
// anything from that response. A response without a header fails closed.
func (c *cell) checkHeader(h *pb.ResponseHeader) (*epochState, error) {
	st := c.epoch.Load()
	if h == nil {
		return st, fmt.Errorf("%w: a store response without a header", ErrInternal)
	}
	if h.ClusterId != st.clusterID && !(st.sealed && st.store == h.ClusterId) {
		c.epochMu.Lock()
		cur := c.epoch.Load()
		sealed := *cur
		sealed.sealed, sealed.store = true, h.ClusterId
		sealed.why = fmt.Sprintf("the store's cluster ID %s differs from the epoch record's %s (a restore): %s",
			hexID(h.ClusterId), hexID(cur.clusterID), advanceHint(cur.epoch, cur.epoch))
		c.installLocked(&sealed)
		c.epochMu.Unlock()
		st = &sealed
	}
	if st.sealed {
		return st, sealedErr(st)
	}
	return st, nil
}

func sealedErr(st *epochState) error {
	return fmt.Errorf("%w: %s", ErrSealed, st.why)
}

func (c *cell) refreshEpochLoop(ctx context.Context) {
	t := time.NewTicker(c.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.reloadEpoch(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("epoch refresh failed", "err", err)
		}
	}
}

// reloadEpoch re-reads the epoch record (another arbiter may have advanced
// it, or the store may have been swapped under us) and returns the store's
// revision. Reads are sequential here, so a revision lower than the last
// one read in the same epoch means the store went back in time under the
// same cluster ID: the arbiter seals.
func (c *cell) reloadEpoch(ctx context.Context) (int64, error) {
	if err := c.reloadMu.lock(ctx); err != nil {
		return 0, err
	}
	defer c.reloadMu.unlock()
	return c.reloadEpochLocked(ctx)
}

func (c *cell) reloadEpochLocked(ctx context.Context) (int64, error) {
	start := time.Now()
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, epochKey)
	if ctx.Err() == nil {
		c.noteEpochRead(err)
	}
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	o, err := observe(resp.Kvs, resp.Header, start)
	if err != nil {
		return 0, err
	}
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	st := nextEpoch(c.epoch.Load(), o, c.floor)
	if !st.sealed && st.epoch == c.lastRead.epoch && resp.Header.Revision < c.lastRead.rev {
		sealed := *st
		sealed.sealed = true
		sealed.why = fmt.Sprintf("the store's revision went back from %d to %d under the same cluster ID (restored without a new cluster token?): %s",
			c.lastRead.rev, resp.Header.Revision, advanceHint(st.epoch, st.epoch))
		st = &sealed
	}
	c.installLocked(st)
	if !st.sealed {
		c.lastRead.epoch, c.lastRead.rev = st.epoch, resp.Header.Revision
		c.rememberLocked(st, resp.Header.Revision)
	}
	return resp.Header.Revision, nil
}

// confirmedEpoch returns the epoch state if it was read within maxEpochAge;
// otherwise it reads the epoch again (one read for all callers at once).
// Keepalive answers are credited only with a confirmed epoch: the epoch
// advance's grace counts on it.
func (c *cell) confirmedEpoch(ctx context.Context) (*epochState, error) {
	if st := c.epoch.Load(); time.Since(st.readAt) <= c.maxEpochAge {
		return st, nil
	}
	cctx, cancel := context.WithTimeout(ctx, c.maxEpochAge)
	defer cancel()
	if err := c.reloadMu.lock(cctx); err != nil {
		return nil, fmt.Errorf("%w: the epoch could not be confirmed within %s", ErrUnavailable, c.maxEpochAge)
	}
	defer c.reloadMu.unlock()
	if st := c.epoch.Load(); time.Since(st.readAt) <= c.maxEpochAge {
		return st, nil // another caller read it meanwhile
	}
	if _, err := c.reloadEpochLocked(cctx); err != nil {
		return nil, err
	}
	st := c.epoch.Load()
	if time.Since(st.readAt) > c.maxEpochAge {
		return nil, fmt.Errorf("%w: the epoch could not be confirmed within %s", ErrUnavailable, c.maxEpochAge)
	}
	return st, nil
}

// Sealed reports whether the arbiter refuses grants because the store was
// restored, rebuilt or is behind.
func (a *Arbiter) Sealed() bool { return a.home.epoch.Load().sealed }

// EpochStatus reads the epoch record and the store's cluster ID of the
// cluster named now ("" names the home cluster), and the allocation counter.
func (a *Arbiter) EpochStatus(ctx context.Context, cluster string) (EpochStatus, error) {
	c := a.home
	if cluster != "" {
		var err error
		if c, err = a.cellNamed(cluster); err != nil {
			return EpochStatus{}, err
		}
	}
	rev, err := c.reloadEpoch(ctx)
	if err != nil {
		return EpochStatus{}, err
	}
	st := c.epochStatus(rev)
	if st.Allocated, err = a.allocatedEpoch(ctx); err != nil {
		return EpochStatus{}, err
	}
	return st, nil
}

// cellNamed is the cell of the cluster named; "" names the only one, and is
// refused when there are several.
func (a *Arbiter) cellNamed(name string) (*cell, error) {
	names := make([]string, 0, len(a.cells))
	for _, c := range a.cells {
		if c.name == name || (name == "" && len(a.cells) == 1) {
			return c, nil
		}
		names = append(names, c.name)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: cluster: required: this lockd fronts %s (lockctl clusters)", ErrInvalid, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("%w: cluster: no cluster %q: this lockd fronts %s (lockctl clusters)", ErrInvalid, name, strings.Join(names, ", "))
}

// allocatedEpoch reads the highest epoch allocated to any cluster: the
// counter on the home (coord) cluster; 0 when it has none.
func (a *Arbiter) allocatedEpoch(ctx context.Context) (uint32, error) {
	n, _, err := a.readAllocated(ctx)
	return n, err
}

func (a *Arbiter) readAllocated(ctx context.Context) (n uint32, modRev int64, err error) {
	home := a.home
	cctx, cancel := home.callCtx(ctx)
	defer cancel()
	resp, err := home.admin.Get(cctx, keyspace.AllocatedEpochKey)
	if err != nil {
		return 0, 0, storeErr(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, nil
	}
	v, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s %q is not an epoch", ErrInternal, keyspace.AllocatedEpochKey, resp.Kvs[0].Value)
	}
	return uint32(v), resp.Kvs[0].ModRevision, nil
}

// allocateEpoch moves the coord cluster's counter to `to`, refusing when it
// is already there or beyond: an epoch is allocated once, to one cluster.
// An advance that then fails leaves `to` allocated and unused, never used
// twice.
func (a *Arbiter) allocateEpoch(ctx context.Context, to uint32) error {
	cur, modRev, err := a.readAllocated(ctx)
	if err != nil {
		return err
	}
	if to <= cur {
		return fmt.Errorf("%w: epoch %d is not above %d, the highest allocated to any cluster; request again (the default target is above it)", ErrEpochMoved, to, cur)
	}
	home := a.home
	cctx, cancel := home.callCtx(ctx)
	defer cancel()
	resp, err := home.admin.Txn(cctx).
		If(clientv3.Compare(clientv3.ModRevision(keyspace.AllocatedEpochKey), "=", modRev)).
		Then(clientv3.OpPut(keyspace.AllocatedEpochKey, strconv.FormatUint(uint64(to), 10))).Commit()
	if err != nil {
		return storeErr(ctx, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: another advance allocated an epoch meanwhile; request again", ErrEpochMoved)
	}
	return nil
}

// EpochStatuses is EpochStatus of every cluster, the home cluster first;
// a cluster that cannot be read has its Err set.
func (a *Arbiter) EpochStatuses(ctx context.Context) []ClusterEpoch {
	allocated, aerr := a.allocatedEpoch(ctx)
	out := make([]ClusterEpoch, 0, len(a.cells))
	for _, c := range a.cells {
		rev, err := c.reloadEpoch(ctx)
		st := c.epochStatus(rev)
		st.Allocated = allocated
		out = append(out, ClusterEpoch{EpochStatus: st, Err: cmp.Or(err, aerr)})
	}
	return out
}

// ClusterEpoch is one cluster's epoch status, or why it could not be read.
type ClusterEpoch struct {
	EpochStatus
	Err error
}

func (c *cell) epochStatus(rev int64) EpochStatus {
	st := c.epoch.Load()
	return EpochStatus{Epoch: st.record, RecordClusterID: st.clusterID, StoreClusterID: st.store,
		Sealed: st.sealed, SealedReason: st.why, RecordMissing: st.missing, Highest: c.highestEpoch(), Revision: rev,
		Cluster: c.name}
}

// highestEpoch is the highest epoch known to this arbiter.
func (c *cell) highestEpoch() uint32 {
	if st := c.epoch.Load(); st != nil {
		return max(st.epoch, c.floor.Epoch)
	}
	return c.floor.Epoch
}

// allocateFirst allocates the first epoch of a cluster other than the
// coord's from the counter: at least atLeast, above every epoch allocated
// or known here, so that no two clusters ever share one.
func (a *Arbiter) allocateFirst(ctx context.Context, atLeast uint32) (uint32, error) {
	for range 3 {
		cur, err := a.allocatedEpoch(ctx)
		if err != nil {
			return 0, err
		}
		to := max(cur, a.highestEpoch(), atLeast-1) + 1
		err = a.allocateEpoch(ctx, to)
		if err == nil {
			return to, nil
		}
		if !errors.Is(err, ErrEpochMoved) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: the epoch counter kept moving", ErrUnavailable)
}

// sealSharedEpochs seals each cluster whose epoch a cluster before it has
// too: clusters bootstrapped apart and then put behind one lockd. Two
// clusters granting in one epoch could repeat a token when keys move
// between them; an advance of the sealed one allocates it an epoch of its
// own from the counter.
func (a *Arbiter) sealSharedEpochs() {
	seen := map[uint32]string{}
	for _, c := range a.cells {
		st := c.epoch.Load()
		if st == nil || st.record == 0 {
			continue
		}
		if other, ok := seen[st.record]; ok && !st.sealed {
			c.seal(fmt.Sprintf("epoch %d is cluster %s's too, and no two clusters may share an epoch: %s (with --cluster %s)",
				st.record, other, advanceHint(st.record, a.highestEpoch()), c.name))
			continue
		}
		seen[st.record] = c.name
	}
}

// seal seals the cell in its current epoch, for why; only a higher epoch
// read from its store unseals it.
func (c *cell) seal(why string) {
	c.epochMu.Lock()
	defer c.epochMu.Unlock()
	st := *c.epoch.Load()
	st.sealed, st.why = true, why
	c.installLocked(&st)
	c.log.Error("cluster sealed", "cluster", c.name, "reason", why)
}

// EpochRequest is a pending request to advance the epoch.
type EpochRequest struct {
	ID string `json:"id"`
	// Cluster is the cluster whose epoch moves; the request is kept there.
	Cluster   string    `json:"cluster,omitempty"`
	From      uint32    `json:"from"`
	To        uint32    `json:"to"`
	Requester string    `json:"requester"`
	Reason    string    `json:"reason"`
	ExpiresAt time.Time `json:"expiresAt"`
}

const epochRequestPrefix = "/sys/epoch-requests/"

// epochRecordRead is what readEpochRecord read.
type epochRecordRead struct {
	epoch  uint32 // 0 when the record is missing
	modRev int64  // the record's mod revision, 0 when missing
	header *pb.ResponseHeader
}

// readEpochRecord reads /sys/epoch through the admin view.
func (c *cell) readEpochRecord(ctx context.Context) (epochRecordRead, error) {
	cur, err := c.admin.Get(ctx, epochKey)
	if err != nil {
		return epochRecordRead{}, err
	}
	if len(cur.Kvs) == 0 {
		return epochRecordRead{header: cur.Header}, nil
	}
	e, _, err := decodeEpoch(cur.Kvs[0])
	return epochRecordRead{epoch: e, modRev: cur.Kvs[0].ModRevision, header: cur.Header}, err
}

// RequestEpochAdvance records an operator's request to move the epoch of
// cluster ("" when the arbiter fronts one) from `from` (0: the store has no
// record) to `to` (0: above both from and every epoch allocated to any
// cluster). Another operator must approve it (ApproveEpochAdvance) within
// ForceRequestTTL. The target must be above every epoch this arbiter knows
// of, on any cluster, and above the coord cluster's allocation counter.
func (a *Arbiter) RequestEpochAdvance(ctx context.Context, caller identity.Caller, cluster string, from, to uint32, reason string) (EpochRequest, error) {
	if !a.IsOperator(caller) {
		return EpochRequest{}, ErrNotOperator
	}
	who := caller.String()
	if strings.TrimSpace(reason) == "" {
		return EpochRequest{}, fmt.Errorf("%w: reason: must not be empty", ErrInvalid)
	}
	c, err := a.cellNamed(cluster)
	if err != nil {
		return EpochRequest{}, err
	}
	allocated, err := a.allocatedEpoch(ctx)
	if err != nil {
		return EpochRequest{}, err
	}
	highest := a.highestEpoch()
	if to == 0 {
		if from == 0 {
			return EpochRequest{}, fmt.Errorf("%w: to_epoch: required when the store has no epoch record (from 0): "+
				"state an epoch above every epoch issued before (at least %d)", ErrInvalid, max(highest, allocated)+1)
		}
		to = max(from, allocated) + 1
	}
	if to <= from {
		return EpochRequest{}, fmt.Errorf("%w: to_epoch: %d must be above from_epoch %d", ErrInvalid, to, from)
	}
	if to <= highest {
		return EpochRequest{}, fmt.Errorf("%w: to_epoch: %d must be above %d, the highest epoch this lockd has seen", ErrInvalid, to, highest)
	}
	if to <= allocated {
		return EpochRequest{}, fmt.Errorf("%w: to_epoch: %d must be above %d, the highest epoch allocated to any cluster", ErrInvalid, to, allocated)
	}
	if to > token.MaxEpoch {
		return EpochRequest{}, fmt.Errorf("%w: epoch %d is past the last one (%d)", ErrEpochExhausted, to, token.MaxEpoch)
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	cur, err := c.readEpochRecord(cctx)
	if err != nil {
		return EpochRequest{}, storeErr(ctx, err)
	}
	if cur.epoch != from {
		return EpochRequest{}, fmt.Errorf("%w: current epoch of cluster %s is %d, not %d", ErrEpochMoved, c.name, cur.epoch, from)
	}
	req := EpochRequest{ID: newForceID(), Cluster: c.name, From: from, To: to, Requester: who, Reason: reason, ExpiresAt: a.now().Add(ForceRequestTTL)}
	lease, err := c.cli.Grant(cctx, int64(ForceRequestTTL/time.Second))
	if err != nil {
		return EpochRequest{}, storeErr(ctx, err)
	}
	b, _ := json.Marshal(req)
	if _, err := c.admin.Put(cctx, epochRequestPrefix+req.ID, string(b), clientv3.WithLease(lease.ID)); err != nil {
		return EpochRequest{}, storeErr(ctx, err)
	}
	a.metrics.epochAdvances.WithLabelValues("requested").Inc()
	a.log.Warn("epoch advance requested", "id", req.ID, "cluster", c.name, "from", from, "to", to, "requester", who, "reason", reason)
	return req, nil
}

// highestEpoch is the highest epoch this arbiter knows of on any cluster.
func (a *Arbiter) highestEpoch() uint32 {
	var h uint32
	for _, c := range a.cells {
		h = max(h, c.highestEpoch())
	}
	return h
}

// EpochAdvance is the outcome of an approved advance.
type EpochAdvance struct {
	Request EpochRequest
	// Status is the epoch afterwards, as this arbiter reads it.
	Status EpochStatus
	// HoldsDeleted counts the holds the advance deleted.
	HoldsDeleted int64
	// Grace is how long grants wait after the advance.
	Grace time.Duration
}

// ApproveEpochAdvance runs a requested epoch advance; the approver must be
// an operator other than the requester. In one transaction it moves the
// epoch to the request's target, bound to the store's current cluster ID,
// and deletes every hold and queue key and the request. Every token granted
// afterwards is greater than every token granted before, whatever revision
// the store restarted from.
func (a *Arbiter) ApproveEpochAdvance(ctx context.Context, caller identity.Caller, id string) (EpochAdvance, error) {
	if !a.IsOperator(caller) {
		return EpochAdvance{}, ErrNotOperator
	}
	who := caller.String()
	if id == "" || strings.ContainsAny(id, "/\x00") {
		return EpochAdvance{}, fmt.Errorf("%w: id: must be a request id from RequestEpochAdvance", ErrInvalid)
	}
	c, got, err := a.findEpochRequest(ctx, id)
	if err != nil {
		return EpochAdvance{}, err
	}
	var req EpochRequest
	if err := json.Unmarshal(got.Kvs[0].Value, &req); err != nil {
		return EpochAdvance{}, fmt.Errorf("%w: epoch request %s: %v", ErrInternal, id, err)
	}
	if req.To == 0 { // a request recorded before targets were stated
		req.To = req.From + 1
	}
	if req.Requester == who {
		a.metrics.epochAdvances.WithLabelValues("refused").Inc()
		a.log.Warn("epoch advance refused: the approver is the requester", "id", id, "requester", who)
		return EpochAdvance{Request: req}, ErrSamePerson
	}
	req.Cluster = c.name // a request recorded before clusters were named
	adv, err := a.advanceEpoch(ctx, c, who, req, got.Kvs[0].ModRevision)
	if err == nil {
		a.metrics.epochAdvances.WithLabelValues("approved").Inc()
	}
	return adv, err
}

// findEpochRequest finds pending request id in the cluster it names.
func (a *Arbiter) findEpochRequest(ctx context.Context, id string) (*cell, *clientv3.GetResponse, error) {
	for _, c := range a.cells {
		cctx, cancel := c.callCtx(ctx)
		got, err := c.admin.Get(cctx, epochRequestPrefix+id)
		cancel()
		if err != nil {
			return nil, nil, storeErr(ctx, err)
		}
		if len(got.Kvs) > 0 {
			return c, got, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: %s", ErrEpochRequestNotFound, id)
}

// advanceEpoch runs an approved advance of cell c's epoch: it allocates the
// target on the coord cluster's counter, then moves c's record in one
// transaction.
func (a *Arbiter) advanceEpoch(ctx context.Context, c *cell, caller string, req EpochRequest, reqRev int64) (EpochAdvance, error) {
	adv := EpochAdvance{Request: req}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	cur, err := c.readEpochRecord(cctx)
	if err != nil {
		return adv, storeErr(ctx, err)
	}
	if cur.epoch != req.From {
		return adv, fmt.Errorf("%w: current epoch of cluster %s is %d, not %d", ErrEpochMoved, c.name, cur.epoch, req.From)
	}
	if h := a.highestEpoch(); req.To <= h {
		return adv, fmt.Errorf("%w: the request moves to epoch %d, not above %d, the highest this lockd has seen; request again", ErrEpochMoved, req.To, h)
	}
	if err := a.allocateEpoch(ctx, req.To); err != nil {
		return adv, err
	}
	newID := cur.header.ClusterId
	// A holder of the old epoch learns that its hold is gone from its next
	// keepalive answer (it carries the epoch, never one read longer than
	// maxEpochAge ago), or is fenced by its own deadline when no answer
	// comes. Either way its last credited keepalive was answered before the
	// advance plus maxEpochAge, so it stops by then plus its TTL. The grace
	// key holds every grant off until then, measured from before the
	// advance's transaction (so the request timeout is added), for the
	// longest TTL of any session that may be live.
	longest, err := a.longestSessionTTL(cctx)
	if err != nil {
		return adv, storeErr(ctx, err)
	}
	adv.Grace = c.maxEpochAge + c.timeout + longest + time.Second
	lease, err := c.cli.Grant(cctx, int64((adv.Grace+time.Second-1)/time.Second))
	if err != nil {
		return adv, storeErr(ctx, err)
	}
	recordCmp := clientv3.Compare(clientv3.ModRevision(epochKey), "=", cur.modRev)
	if req.From == 0 {
		recordCmp = clientv3.Compare(clientv3.CreateRevision(epochKey), "=", 0)
	}
	resp, err := c.admin.Txn(cctx).
		If(recordCmp, clientv3.Compare(clientv3.ModRevision(epochRequestPrefix+req.ID), "=", reqRev)).
		Then(
			clientv3.OpPut(epochKey, encodeEpoch(req.To, newID)),
			clientv3.OpDelete(holdPrefix, clientv3.WithPrefix()),
			clientv3.OpDelete(queuePrefix, clientv3.WithPrefix()),
			clientv3.OpPut(graceKey, req.Reason, clientv3.WithLease(lease.ID)),
			clientv3.OpDelete(epochRequestPrefix+req.ID),
		).Commit()
	if err != nil {
		return adv, storeErr(ctx, err)
	}
	if !resp.Succeeded {
		return adv, fmt.Errorf("%w: the epoch record or the request changed during the advance", ErrEpochMoved)
	}
	adv.HoldsDeleted = resp.Responses[1].GetResponseDeleteRange().Deleted
	a.metrics.graceActive.WithLabelValues(c.name).Set(1) // until the next collection finds the key gone
	a.log.Warn("epoch advanced", "cluster", c.name, "requester", req.Requester, "approver", caller, "from", req.From, "to", req.To,
		"cluster_id", hexID(newID), "holds_deleted", adv.HoldsDeleted, "reason", req.Reason, "grants_resume_in", adv.Grace)
	if resp.Header.ClusterId != newID {
		// Committed, but on a store whose cluster ID is not the one the
		// record names: every arbiter stays sealed. Say so, as a success:
		// the transaction did commit.
		a.log.Error("the epoch advanced on a store whose cluster ID changed during the advance: still sealed; advance again",
			"record_cluster_id", hexID(newID), "store_cluster_id", hexID(resp.Header.ClusterId))
	}
	// The advance committed: report it even if reading the new state back
	// fails; the refresh loop will pick it up.
	adv.Status = c.epochStatus(resp.Header.Revision)
	adv.Status.Epoch, adv.Status.RecordClusterID = req.To, newID
	if rev, err := c.reloadEpoch(ctx); err == nil {
		adv.Status = c.epochStatus(rev)
	} else {
		a.log.Warn("epoch advanced; reading it back failed (the refresh will)", "err", err)
	}
	return adv, nil
}

// longestSessionTTL is the longest TTL a live session may have: the
// loaded classes' longest, every session record in the store, every
// session this arbiter has seen, and the longest its state file recorded
// (sessions of a store since lost).
func (a *Arbiter) longestSessionTTL(ctx context.Context) (time.Duration, error) {
	c := a.home
	longest := max(a.policy.Load().Classes.MaxTTL(), time.Duration(c.floor.MaxSessionTTL)*time.Second, c.seenTTL())
	key, end := sessionPrefix, clientv3.GetPrefixRangeEnd(sessionPrefix)
	for {
		resp, err := c.cli.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(5000))
		if err != nil {
			return 0, err
		}
		for _, kv := range resp.Kvs {
			var r sessionRecord
			if json.Unmarshal(kv.Value, &r) == nil {
				longest = max(longest, time.Duration(r.TTL)*time.Second)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return longest, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// seenTTL is the longest TTL of a session this arbiter has seen.
func (c *cell) seenTTL() time.Duration {
	return time.Duration(c.maxTTLSeen.Load()) * time.Second
}

// Ready reports whether the arbiter can grant: etcd answers and the store is
// not sealed, or it is in its open posture with a class open on quorum loss
// to grant (unprotected).
func (a *Arbiter) Ready(ctx context.Context) error {
	c := a.home
	if a.servesOpen() {
		return nil // without quorum, but serving the classes open on quorum loss
	}
	if _, err := c.reloadEpoch(ctx); err != nil {
		return err
	}
	if st := c.epoch.Load(); st.sealed {
		return sealedErr(st)
	}
	return nil
}
