package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/identity"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Bounds of one KeepAlive stream's cluster lease renewals: requests queued
// per cluster before further ones are answered uncredited at once, and
// clusters one stream may name.
const (
	leaseQueue       = 64
	maxLeaseClusters = 64
)

// leaseRenewer renews the cluster leases named on one KeepAlive stream
// (requests with cluster set): one worker per cluster, in order per
// cluster, so a cluster slow to answer delays only its own leases and never
// the session's own keepalives. Answers carry the request's seq.
type leaseRenewer struct {
	ctx    context.Context
	cancel context.CancelFunc
	arb    *arbiter.Arbiter
	caller identity.Caller
	send   func(*lockv1.KeepAliveResponse) error
	// failed gets the error that ends the stream: a send that failed, or a
	// request naming no cluster this lockd fronts.
	failed chan error

	mu      sync.Mutex
	workers map[string]chan *lockv1.KeepAliveRequest
}

func newLeaseRenewer(ctx context.Context, arb *arbiter.Arbiter, caller identity.Caller, send func(*lockv1.KeepAliveResponse) error) *leaseRenewer {
	ctx, cancel := context.WithCancel(ctx)
	return &leaseRenewer{ctx: ctx, cancel: cancel, arb: arb, caller: caller, send: send, failed: make(chan error, 1),
		workers: map[string]chan *lockv1.KeepAliveRequest{}}
}

// renew queues req with its cluster's worker. When that cluster is so far
// behind that its queue is full, req is answered uncredited at once: it
// renews nothing as far as the holder can know.
func (r *leaseRenewer) renew(req *lockv1.KeepAliveRequest) {
	r.mu.Lock()
	q, ok := r.workers[req.GetCluster()]
	if !ok {
		if len(r.workers) >= maxLeaseClusters {
			r.mu.Unlock()
			r.fail(toStatus(fmt.Errorf("%w: cluster: one KeepAlive stream renews leases on at most %d clusters", arbiter.ErrInvalid, maxLeaseClusters)))
			return
		}
		q = make(chan *lockv1.KeepAliveRequest, leaseQueue)
		r.workers[req.GetCluster()] = q
		go r.work(q)
	}
	r.mu.Unlock()
	select {
	case q <- req:
	default:
		r.answer(req, arbiter.LeaseRenewal{Cluster: req.GetCluster(), Lease: req.GetLease(), Uncredited: true})
	}
}

func (r *leaseRenewer) work(q chan *lockv1.KeepAliveRequest) {
	for {
		select {
		case <-r.ctx.Done():
			return
		case req := <-q:
			ans, err := r.arb.RenewLease(r.ctx, r.caller, req.GetSessionId(), req.GetCluster(), req.GetLease())
			if errors.Is(err, arbiter.ErrInvalid) {
				r.fail(toStatus(err))
				return
			}
			if err != nil {
				// The cluster could not be asked: not renewed, as far as
				// anyone can know. The stream and other clusters go on.
				ans = arbiter.LeaseRenewal{Cluster: req.GetCluster(), Lease: req.GetLease(), Uncredited: true}
			}
			r.answer(req, ans)
		}
	}
}

func (r *leaseRenewer) answer(req *lockv1.KeepAliveRequest, a arbiter.LeaseRenewal) {
	if r.ctx.Err() != nil {
		return // the stream is ending
	}
	err := r.send(&lockv1.KeepAliveResponse{SessionId: req.GetSessionId(), Cluster: a.Cluster, Lease: a.Lease, Seq: req.GetSeq(),
		Ttl: durationpb.New(a.TTL), Epoch: a.Epoch, Uncredited: a.Uncredited, Removed: removedProto(a.Removed)})
	if err != nil {
		r.fail(err)
	}
}

func (r *leaseRenewer) fail(err error) {
	select {
	case r.failed <- err:
	default:
	}
}

// stop ends the workers; they send nothing more.
func (r *leaseRenewer) stop() { r.cancel() }

// removedProto is removed on the wire.
func removedProto(removed []arbiter.RemovedHold) []*lockv1.RemovedHold {
	var out []*lockv1.RemovedHold
	for _, h := range removed {
		out = append(out, &lockv1.RemovedHold{Key: h.Key, HoldRevision: h.HoldRevision,
			Requester: h.Requester, Approver: h.Approver, Reason: h.Reason})
	}
	return out
}
