package gate

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/internal/identity"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// operators is the gate acting as its two operators, straight to the
// arbiters (not through the workers' proxies).
type operators struct {
	r     *run
	conns []*grpc.ClientConn
}

// admin connects to every arbiter as the operators; call the func to
// close.
func (r *run) admin() (*operators, func(), error) {
	o := &operators{r: r}
	for _, a := range r.arbiters {
		conn, err := grpc.NewClient(a.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			o.close()
			return nil, nil, err
		}
		o.conns = append(o.conns, conn)
	}
	return o, o.close, nil
}

func (o *operators) close() {
	for _, c := range o.conns {
		_ = c.Close()
	}
}

func as(ctx context.Context, id string) (context.Context, context.CancelFunc) {
	return context.WithTimeout(metadata.AppendToOutgoingContext(ctx, identity.InsecureIdentityHeader, id), 3*time.Second)
}

func (o *operators) adminAt(i int) lockv1.AdminServiceClient {
	return lockv1.NewAdminServiceClient(o.conns[i])
}

// nextEpoch is the epoch an advance of any cluster must move to: above
// every epoch any arbiter has seen on any cluster, and above the coord
// cluster's allocation counter (a restore or a rebuild of the coord
// cluster moves the counter back; the arbiters' memory does not).
func (o *operators) nextEpoch(ctx context.Context) (uint32, error) {
	var highest uint32
	for i := range o.conns {
		cctx, cancel := as(ctx, operator)
		st, err := o.adminAt(i).EpochStatus(cctx, &lockv1.EpochStatusRequest{})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("epoch status of %s: %w", o.r.arbiters[i].Name, err)
		}
		highest = max(highest, st.GetEpoch(), st.GetHighestEpoch(), st.GetAllocatedEpoch())
		for _, c := range st.GetClusters() {
			highest = max(highest, c.GetEpoch(), c.GetHighestEpoch())
		}
	}
	return highest + 1, nil
}

// waitSealed waits, up to 20s, until every arbiter reports cluster ("" in
// a run on one) sealed and cond holds for its status; it returns the
// first arbiter's.
func (o *operators) waitSealed(ctx context.Context, cluster string, cond func(*lockv1.EpochStatusResponse) bool) (*lockv1.EpochStatusResponse, error) {
	deadline := time.Now().Add(20 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		var first *lockv1.EpochStatusResponse
		all := true
		for i := range o.conns {
			cctx, cancel := as(ctx, operator)
			st, err := o.adminAt(i).EpochStatus(cctx, &lockv1.EpochStatusRequest{Cluster: cluster})
			cancel()
			if err != nil || !st.GetSealed() || !cond(st) {
				all, last = false, err
				if err == nil {
					last = fmt.Errorf("%s: sealed %v: %s", o.r.arbiters[i].Name, st.GetSealed(), st.GetSealedReason())
				}
				break
			}
			if first == nil {
				first = st
			}
		}
		if all {
			return first, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("not within 20s (last: %v)", last)
}

// advance has the two operators advance the epoch of cluster ("" in a run
// on one) from `from` to `to` (0: lockd's default, above every epoch
// allocated), the only way lockd allows: one requests, the other
// approves. It returns the new epoch, the holds deleted and when grants
// resume (the end of the advance's grace, on history.Now's clock).
func (o *operators) advance(ctx context.Context, cluster string, from, to uint32, reason string) (uint32, int64, int64, error) {
	cctx, cancel := as(ctx, operator)
	req, err := o.adminAt(0).RequestEpochAdvance(cctx, &lockv1.RequestEpochAdvanceRequest{FromEpoch: from, ToEpoch: to, Reason: reason, Cluster: cluster})
	cancel()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("request epoch advance: %w", err)
	}
	cctx, cancel = as(ctx, operator2)
	resp, err := o.adminAt(0).ApproveEpochAdvance(cctx, &lockv1.ApproveEpochAdvanceRequest{Id: req.GetId()})
	cancel()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("approve epoch advance: %w", err)
	}
	resume := history.Now() + resp.GetGrantsResumeIn().AsDuration().Nanoseconds()
	return resp.GetEpoch(), resp.GetHoldsDeleted(), resume, nil
}

// inspect reads key's hold as an operator (who sees its token).
func (o *operators) inspect(ctx context.Context, key string) (*lockv1.InspectResponse, error) {
	cctx, cancel := as(ctx, operator)
	defer cancel()
	return lockv1.NewLockServiceClient(o.conns[0]).Inspect(cctx, &lockv1.InspectRequest{Key: key})
}

// requestForce asks for key's hold to be released by force; with revoke,
// the holder's session is revoked too, ending its other holds.
func (o *operators) requestForce(ctx context.Context, key string, revoke bool) (*lockv1.RequestForceReleaseResponse, error) {
	cctx, cancel := as(ctx, operator)
	defer cancel()
	return o.adminAt(0).RequestForceRelease(cctx, &lockv1.RequestForceReleaseRequest{Key: key, Reason: "release gate: force-release fault",
		RevokeSession: revoke})
}

func (o *operators) approveForce(ctx context.Context, id string) error {
	cctx, cancel := as(ctx, operator2)
	defer cancel()
	_, err := o.adminAt(0).ApproveForceRelease(cctx, &lockv1.ApproveForceReleaseRequest{Id: id})
	return err
}
