package arbiter

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// Group commit. Grant and release transactions of one cell for different
// keys that arrive while another batch is in flight leave together, in the
// next one: one etcd Txn whose only compare is the epoch record's, and in
// it one nested Txn per key with that key's own compares, writes and
// reads, so one key's refusal never touches another's grant. A nested Txn
// that puts on a session's lease is wrapped in one more that compares the
// session's record on that lease: a put on a lease that is gone would fail
// the whole batch, so such a part is refused alone (its session is gone).
//
// One batch is in flight per cell; the parts that arrive meanwhile wait for
// it and leave in the next one as soon as it is back. A part that arrives
// when nothing is in flight leaves at once, alone: an idle arbiter waits on
// no timer. A key has at most one part in a batch (etcd refuses a Txn that
// writes a key twice), so a second part for it waits for the next.
//
// etcd applies a Txn at one revision: keys granted in one batch share a
// commit revision and so a token value. Per key, tokens still strictly
// increase and are never reused, which is all a fence relies on.
//
// A batch whose RPC fails is an unknown outcome for every part in it, as a
// single transaction's failure is: each caller resolves it as it would
// its own (a retried grant finds its own hold).

// Defaults of Config.MaxBatch and Config.MaxTxnOps, and the least
// MaxTxnOps a lockd runs with: a grant's own transaction, nested in a
// batch, needs about a dozen.
const (
	DefaultMaxBatch  = 64
	DefaultMaxTxnOps = 128 // etcd's own --max-txn-ops default
	MinMaxTxnOps     = 32
)

const (
	// batchBytes bounds the size of one batch's parts, well under etcd's
	// default request limit of 1.5 MiB.
	batchBytes = 1 << 20
)

// part is one key's transaction in a batch.
type part struct {
	// key is the lock key the part writes under (its hold and waiter
	// keys): one part per key in a batch.
	key string
	// epochRev is the epoch record's mod revision the part was made
	// against: the batch compares it, so every part of a batch has the same.
	epochRev int64
	// guard, when set, is the key of the session's record on lease, the
	// lease the part puts on; the part commits only while the record is
	// there, on that lease.
	guard string
	lease int64
	// alone: the part puts on a lease whose record is not known, so it
	// goes in a batch of its own (a gone lease then fails it alone).
	alone     bool
	cmps      []*pb.Compare
	then, els []*pb.RequestOp
	// timeout bounds the batch's call (the longest of its parts').
	timeout time.Duration
	// ctx is the caller's: the first part's carries the batch's call in
	// its trace (never its cancellation).
	ctx context.Context
	// nested is the part as the batch sends it (op); need is its depth in
	// etcd's --max-txn-ops budget, size its bytes in the request.
	nested     *pb.RequestOp
	need, size int
	done       chan partResult
}

// partResult is how a part's transaction ended.
type partResult struct {
	// resp is the part's own Txn's answer with the batch's header, when it
	// ran.
	resp *clientv3.TxnResponse
	// moved: the epoch record had moved, so nothing in the batch ran;
	// epoch is the record the batch read instead, at header's revision.
	moved  bool
	epoch  []*mvccpb.KeyValue
	header *pb.ResponseHeader
	// gone: the session record on the part's lease was gone (guard).
	gone bool
	// err: the batch's call failed; its outcome is unknown.
	err error
}

// committer group-commits one cell's grant and release transactions.
type committer struct {
	kv       etcdop.KV
	maxBatch int
	maxOps   int
	sizes    prometheus.Observer

	mu      sync.Mutex
	sending bool
	pending []*part
}

func newCommitter(kv etcdop.KV, maxBatch, maxOps int, sizes prometheus.Observer) *committer {
	return &committer{kv: kv, maxBatch: maxBatch, maxOps: maxOps, sizes: sizes}
}

// commit runs p in the next batch and returns how it ended. When ctx ends
// before p has been sent, p is withdrawn (ctx's error); once sent, commit
// waits for the answer, so the arbiter always learns whether it granted.
func (m *committer) commit(ctx context.Context, p *part) partResult {
	p.done, p.ctx = make(chan partResult, 1), ctx
	p.need = txnNeed(p.cmps, p.then, p.els)
	if p.guard != "" {
		p.need++
	}
	p.nested = p.op()
	p.size = p.nested.Size()
	if m.maxBatch <= 1 {
		// Group commit is off: every part is a batch of its own, sent at
		// once, concurrently with the others.
		m.run([]*part{p})
		return <-p.done
	}
	m.mu.Lock()
	if m.sending {
		m.pending = append(m.pending, p)
		m.mu.Unlock()
		select {
		case r := <-p.done:
			return r
		case <-ctx.Done():
		}
		m.mu.Lock()
		if i := slices.Index(m.pending, p); i >= 0 {
			m.pending = slices.Delete(m.pending, i, i+1)
			m.mu.Unlock()
			return partResult{err: ctx.Err()}
		}
		m.mu.Unlock()
		return <-p.done
	}
	m.sending = true
	m.mu.Unlock()
	m.send([]*part{p}, true)
	return <-p.done
}

// send commits batch, answers its parts, and commits the parts that
// arrived meanwhile, if any, in the next batch. A caller's goroutine
// (caller) sends only its own batch and leaves the rest to a goroutine of
// the committer's, which goes on while parts keep arriving: under load one
// goroutine, its stack grown once, sends every batch.
func (m *committer) send(batch []*part, caller bool) {
	for {
		m.run(batch)
		m.mu.Lock()
		batch = m.takeLocked()
		if len(batch) == 0 {
			m.sending = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		if caller {
			go m.send(batch, false)
			return
		}
	}
}

// takeLocked removes the next batch from pending: parts in arrival order
// against the first part's epoch record, one per key, within the batch
// size, etcd's operation budget and the byte budget. A part left out keeps
// its place.
func (m *committer) takeLocked() []*part {
	if len(m.pending) == 0 {
		return nil
	}
	first := m.pending[0]
	batch := []*part{first}
	keys := map[string]bool{first.key: true}
	need, size := first.need, first.size
	rest := m.pending[:0:0]
	for _, p := range m.pending[1:] {
		fits := !first.alone && !p.alone && len(batch) < m.maxBatch &&
			p.epochRev == first.epochRev && !keys[p.key] &&
			len(batch)+1+max(need, p.need) <= m.maxOps && size+p.size <= batchBytes
		if !fits {
			rest = append(rest, p)
			continue
		}
		batch = append(batch, p)
		keys[p.key] = true
		need, size = max(need, p.need), size+p.size
	}
	m.pending = rest
	return batch
}

// op is the part's nested Txn, inside its guard's when it has one.
func (p *part) op() *pb.RequestOp {
	op := etcdop.Txn(p.cmps, p.then, p.els)
	if p.guard != "" {
		op = etcdop.Txn([]*pb.Compare{etcdop.Lease(p.guard, p.lease)}, []*pb.RequestOp{op}, nil)
	}
	return op
}

// run commits batch as one Txn and answers every part.
func (m *committer) run(batch []*part) {
	timeout := time.Duration(0)
	ops := make([]*pb.RequestOp, len(batch))
	for i, p := range batch {
		timeout = max(timeout, p.timeout)
		ops[i] = p.nested
		if batchDropsCompares && i > 0 {
			p.cmps = nil
			ops[i] = p.op()
		}
	}
	m.sizes.Observe(float64(len(batch)))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), timeout)
	resp, err := m.kv.Txn(ctx, etcdop.Request([]*pb.Compare{etcdop.Modified(epochKey, batch[0].epochRev)}, ops, []*pb.RequestOp{etcdop.Get(epochKey)}))
	cancel()
	for i, p := range batch {
		p.done <- partOf(resp, err, i, p.guard != "")
	}
}

// partOf is part i's result in a batch's answer.
func partOf(resp *clientv3.TxnResponse, err error, i int, guarded bool) partResult {
	switch {
	case err != nil:
		return partResult{err: err}
	case !resp.Succeeded:
		return partResult{moved: true, epoch: resp.Responses[0].GetResponseRange().GetKvs(), header: resp.Header}
	}
	r := resp.Responses[i].GetResponseTxn()
	if guarded {
		if !r.GetSucceeded() {
			return partResult{gone: true, header: resp.Header}
		}
		r = r.Responses[0].GetResponseTxn()
	}
	return partResult{resp: (*clientv3.TxnResponse)(&pb.TxnResponse{Header: resp.Header, Succeeded: r.GetSucceeded(), Responses: r.GetResponses()})}
}

// txnNeed is how much of etcd's --max-txn-ops budget a nested Txn of cmps,
// then and els takes: etcd allows a Txn max(compares, then, else) ops and
// each nested Txn what is left of the budget.
func txnNeed(cmps []*pb.Compare, then, els []*pb.RequestOp) int {
	deepest := 0
	for _, ops := range [2][]*pb.RequestOp{then, els} {
		for _, op := range ops {
			if t := op.GetRequestTxn(); t != nil {
				deepest = max(deepest, txnNeed(t.Compare, t.Success, t.Failure))
			}
		}
	}
	return max(len(cmps), len(then), len(els)) + deepest
}

// guardOf is the guard of a part that puts on lease: the key of the
// session's record on it (the session's own in the home cell, its cluster
// lease's elsewhere). alone when the cell does not know the lease's
// session: such a part is sent in a batch of its own.
func (c *cell) guardOf(lease int64) (guard string, alone bool) {
	if c.home {
		return sessionKey(lease), false
	}
	if s, ok := c.sessionLeases.byLease.load(lease); ok {
		return keyspace.ClusterSessionKey(s.session), false
	}
	return "", true
}

// committed turns a part's result into its Txn's answer. retry: the epoch
// record had moved, so nothing ran; the new record is applied and the
// caller tries again against it. A failed call is the store's error (its
// outcome unknown), a part whose session record was gone is
// ErrSessionNotFound, and an answer from another cluster or a record that
// seals the cell is refused.
func (c *cell) committed(ctx context.Context, r partResult, start time.Time) (resp *clientv3.TxnResponse, retry bool, err error) {
	if r.err != nil {
		return nil, false, storeErr(ctx, r.err)
	}
	h := r.header
	if r.resp != nil {
		h = r.resp.Header
	}
	if _, err := c.checkHeader(h); err != nil {
		return nil, false, err
	}
	switch {
	case r.gone:
		return nil, false, ErrSessionNotFound
	case r.moved:
		o, err := observe(r.epoch, r.header, start)
		if err != nil {
			return nil, false, err
		}
		if next := c.apply(o); next.sealed {
			return nil, false, sealedErr(next)
		}
		return nil, true, nil
	}
	return r.resp, false, nil
}
