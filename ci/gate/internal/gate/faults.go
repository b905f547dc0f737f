package gate

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/ci/internal/proc"
	"github.com/lockd-dev/lockd/pkg/identity"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Fault kinds.
const (
	KindMemberKillLeader   = "member-kill-leader"
	KindMemberKillFollower = "member-kill-follower"
	KindLeaderIsolate      = "leader-isolate"
	KindLeaderPause        = "leader-pause"
	KindWorkerPause        = "worker-pause"
	KindArbiterKill        = "arbiter-kill"
	KindRestore            = "restore"
)

// Kinds lists every fault kind, in the order "all" means.
var Kinds = []string{KindMemberKillLeader, KindMemberKillFollower, KindLeaderIsolate, KindLeaderPause,
	KindWorkerPause, KindArbiterKill, KindRestore}

// inject runs the fault schedule until the run's duration is over: kinds
// in a seeded shuffle, round robin so every kind comes up, with quiet gaps.
func (r *run) inject(ctx context.Context) {
	end := time.Now().Add(r.o.Duration)
	order := append([]string(nil), r.o.Faults...)
	r.rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	quiet := func() bool {
		d := time.Duration(1000+r.rnd.IntN(2000)) * time.Millisecond
		if time.Until(end) < d {
			d = time.Until(end)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
		return time.Now().Before(end)
	}
	for i := 0; quiet(); i++ {
		if len(order) == 0 {
			continue
		}
		kind := order[i%len(order)]
		if time.Until(end) < r.needs(kind) {
			continue
		}
		if err := r.fault(ctx, kind); err != nil {
			r.logf("fault %s: %v", kind, err)
		}
		// Let the cluster settle before the next fault, so no two faults
		// overlap and quorum is never lost by the schedule itself.
		hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if err := r.cl.WaitHealthy(hctx); err != nil {
			r.logf("cluster not healthy after %s: %v", kind, err)
		}
		cancel()
	}
}

// needs is about how long a fault takes, so none is cut off by the end.
func (r *run) needs(kind string) time.Duration {
	switch kind {
	case KindWorkerPause:
		return TTL + 4*time.Second
	case KindRestore:
		return 12 * time.Second
	default:
		return 5 * time.Second
	}
}

func (r *run) fault(ctx context.Context, kind string) error {
	f := history.Fault{Kind: kind}
	var err error
	switch kind {
	case KindMemberKillLeader, KindMemberKillFollower:
		m, lerr := r.cl.Leader(ctx)
		if lerr != nil {
			return lerr
		}
		if kind == KindMemberKillFollower {
			m = r.cl.Members[(m.Index+1+r.rnd.IntN(len(r.cl.Members)-1))%len(r.cl.Members)]
		}
		f.Target, f.Start = m.Name, history.Now()
		if err = r.cl.Kill(m); err == nil {
			time.Sleep(time.Duration(1500+r.rnd.IntN(1500)) * time.Millisecond)
			err = r.cl.Restart(m)
		}
	case KindLeaderIsolate:
		m, lerr := r.cl.Leader(ctx)
		if lerr != nil {
			return lerr
		}
		f.Target, f.Start = m.Name, history.Now()
		if err = r.cl.Isolate(m); err == nil {
			time.Sleep(time.Duration(3000+r.rnd.IntN(2000)) * time.Millisecond)
			err = r.cl.Heal(m)
		}
	case KindLeaderPause:
		m, lerr := r.cl.Leader(ctx)
		if lerr != nil {
			return lerr
		}
		f.Target, f.Start = m.Name, history.Now()
		// Past the election timeout (1 s): the others elect a new leader
		// while this one still believes it leads.
		if err = r.cl.Pause(m); err == nil {
			time.Sleep(time.Duration(2500+r.rnd.IntN(1500)) * time.Millisecond)
			err = r.cl.Resume(m)
		}
	case KindWorkerPause:
		w, werr := r.nextAnnouncer(ctx, 5*time.Second)
		if werr != nil {
			return werr
		}
		f.Target, f.Start = w.Name, history.Now()
		// Stopped after its CanStart() said yes and before its write: past
		// the TTL, so another worker is granted the key meanwhile.
		if err = w.Signal(syscall.SIGSTOP); err == nil {
			time.Sleep(TTL + 2*time.Second)
			err = w.Signal(syscall.SIGCONT)
		}
	case KindArbiterKill:
		a := r.arbiters[r.rnd.IntN(len(r.arbiters))]
		f.Target, f.Start = a.Name, history.Now()
		a.Kill()
		time.Sleep(time.Duration(500+r.rnd.IntN(1000)) * time.Millisecond)
		if err = a.Start(); err == nil {
			err = a.WaitReady(ctx, 30*time.Second)
		}
	case KindRestore:
		f.Target = "cluster"
		err = r.restore(ctx, &f)
	default:
		return fmt.Errorf("%w: unknown fault kind %q", ErrUsage, kind)
	}
	f.End = history.Now()
	if err != nil {
		f.Note = "error: " + err.Error()
	}
	r.recordFault(f)
	return err
}

// nextAnnouncer waits for a worker that has just passed its CanStart check.
func (r *run) nextAnnouncer(ctx context.Context, d time.Duration) (*proc.Proc, error) {
	// Drop stale announcements.
	for {
		select {
		case <-r.announce:
			continue
		default:
		}
		break
	}
	select {
	case i := <-r.announce:
		return r.workers[i], nil
	case <-time.After(d):
		return nil, fmt.Errorf("no worker was about to write within %s", d)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// restore snapshots the cluster, lets the workers go on (their grants are
// then rolled back by the restore), restores every member from the snapshot
// with a new cluster token, and has an operator advance the epoch. Until
// the advance the arbiters must refuse every grant.
func (r *run) restore(ctx context.Context, f *history.Fault) error {
	snap := filepath.Join(r.dir, "etcd", "snapshot.db")
	if err := r.cl.Snapshot(ctx, snap); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	f.Start = history.Now()
	if err := r.cl.Restore(ctx, snap); err != nil {
		return err
	}
	conn, err := grpc.NewClient(r.arbiters[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	admin := lockv1.NewAdminServiceClient(conn)
	as := func(id string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, identity.InsecureIdentityHeader, id)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(as(operator), 3*time.Second)
		st, err := admin.EpochStatus(cctx, &lockv1.EpochStatusRequest{})
		cancel()
		if err == nil && st.GetSealed() {
			// Two operators: one requests, the other approves.
			cctx, cancel := context.WithTimeout(as(operator), 3*time.Second)
			req, rerr := admin.RequestEpochAdvance(cctx, &lockv1.RequestEpochAdvanceRequest{FromEpoch: st.GetEpoch(), Reason: "release gate: restore fault"})
			cancel()
			if rerr != nil {
				return fmt.Errorf("request epoch advance: %w", rerr)
			}
			cctx, cancel = context.WithTimeout(as(operator2), 3*time.Second)
			resp, aerr := admin.ApproveEpochAdvance(cctx, &lockv1.ApproveEpochAdvanceRequest{Id: req.GetId()})
			cancel()
			if aerr != nil {
				return fmt.Errorf("approve epoch advance: %w", aerr)
			}
			f.Note = fmt.Sprintf("epoch %d -> %d, %d holds deleted", st.GetEpoch(), resp.GetEpoch(), resp.GetHoldsDeleted())
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lockd did not report the restored store as sealed within 20s (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, a := range r.arbiters {
		if err := a.WaitReady(ctx, 20*time.Second); err != nil {
			return err
		}
	}
	return nil
}
