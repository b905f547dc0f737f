package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/ci/gate/internal/check"
	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/ci/internal/proc"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmove"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// The entity shards beyond the entity cluster: shard-2 is in the map from
// the start, shard-3 is added by the run's first move.
const (
	Shard2 = "shard-2"
	Shard3 = "shard-3"
	// movedPrefix is the range the moves pin from shard to shard: every
	// key of the entity tier in the gate is in it, so each move drains the
	// keys the workers contend on.
	movedPrefix = Namespace + "/"
	// MoveSlack is what a move may add to its drain's bound (the longest
	// class TTL of the range) before the range is unavailable for too long.
	MoveSlack = 5 * time.Second
	// moveElection is the controller's election TTL in lockd: a SIGKILLed
	// controller's successor takes over after it.
	moveElection = 5 * time.Second
)

// Move fault kinds: each is a move of the workers' range to another shard
// (plan by one operator, approval by another), alone or with a fault
// during it.
const (
	KindShardMove = "shard-move"
	// KindControllerKill SIGKILLs the lockd whose move controller is
	// elected as the plan drains, and restarts it: another lockd resumes
	// the plan from its stored progress.
	KindControllerKill = "controller-kill"
	// KindMapStall stalls one lockd's shard map watch (a failpoint of the
	// gate's lockd build) across the flip: the shard's fence must refuse
	// what it routes by the old map.
	KindMapStall = "map-stall"
	// KindDrainQuorumLoss takes the quorum of the range's old shard while
	// it drains (a quorum-loss fault of that cluster, recorded as one).
	KindDrainQuorumLoss = "drain-quorum-loss"
)

// MoveKinds are the move faults, in "all" when entity shards are moved.
var MoveKinds = []string{KindShardMove, KindControllerKill, KindMapStall, KindDrainQuorumLoss}

func isMove(kind string) bool { return slices.Contains(MoveKinds, kind) }

// sharded reports whether the run moves entity ranges between shards.
func (r *run) sharded() bool { return r.o.Shards > 1 && r.split() }

// shardNames are the entity tier's clusters, the entity cluster first.
func (r *run) shardNames() []string {
	var out []string
	for _, c := range r.clusters[1:] {
		out = append(out, c.name)
	}
	return out
}

func (r *run) clusterNamed(name string) *etcdCluster {
	for _, c := range r.clusters {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Move is one move of the workers' range, as the checks see it.
type Move struct {
	Kind string `json:"kind"`
	Plan string `json:"plan"`
	From string `json:"from"`
	To   string `json:"to"`
	// Drain is from the range marked out to the flip; Settle from the
	// flip to done (stragglers waited out); Bound the drain's bound;
	// Allow what the fault in the move adds to the limit.
	Drain      time.Duration `json:"drain"`
	Settle     time.Duration `json:"settle"`
	Bound      time.Duration `json:"bound"`
	Allow      time.Duration `json:"allow"`
	Stragglers int           `json:"stragglers"`
	Live       int           `json:"live"`
	// Probe says what an arbiter with a stale map answered for a key of
	// the moved range held on its new shard (map-stall only); StaleGrant
	// that it granted it: a double grant.
	Probe      string `json:"probe,omitempty"`
	StaleGrant bool   `json:"staleGrant,omitempty"`
}

// MoveResult is the check of the moves.
type MoveResult struct {
	Moves []Move `json:"moves"`
	// Forced counts the holds the controller ended at a drain's bound.
	Forced  int      `json:"forced"`
	Details []string `json:"details,omitempty"`
}

// initShards initialises the new shards' epochs (two operators each, as
// for any new cluster) and writes the first map: the entity cluster and
// shard-2.
func (r *run) initShards(ctx context.Context) error {
	admin, closeAdmin, err := r.admin()
	if err != nil {
		return err
	}
	defer closeAdmin()
	for _, name := range r.shardNames()[1:] {
		if _, err := admin.waitSealed(ctx, name, func(st *lockv1.EpochStatusResponse) bool { return st.GetRecordMissing() }); err != nil {
			return fmt.Errorf("gate: the arbiters did not seal the new shard %s: %w", name, err)
		}
		next, err := admin.nextEpoch(ctx)
		if err != nil {
			return err
		}
		epoch, _, _, err := admin.advance(ctx, name, 0, next, "release gate: a new entity shard")
		if err != nil {
			return err
		}
		r.records[name] = append(r.records[name], epoch)
	}
	id, err := admin.propose(ctx, &lockv1.ProposeShardPlanRequest{Add: []*lockv1.ShardWeight{{Name: Shard2}}, Reason: "release gate: the first map"})
	if err != nil {
		return err
	}
	if _, err := r.follow(ctx, admin, id, time.Minute, nil); err != nil {
		return err
	}
	in, err := admin.inspect(ctx, gateKeys(r.o.Keys)[0])
	if err != nil {
		return err
	}
	r.home = in.GetCluster()
	r.logf("gate: entity shards %s initialised; map version %d homes %s to %s", strings.Join(r.shardNames()[1:], ", "), in.GetShardMapVersion(), movedPrefix, r.home)
	return nil
}

// propose has the first operator propose a plan and the second approve
// it; it returns the plan's ID.
func (o *operators) propose(ctx context.Context, req *lockv1.ProposeShardPlanRequest) (string, error) {
	cctx, cancel := as(ctx, operator)
	resp, err := o.adminAt(0).ProposeShardPlan(cctx, req)
	cancel()
	if err != nil {
		return "", fmt.Errorf("propose a shard plan: %w", err)
	}
	id := resp.GetPlan().GetId()
	cctx, cancel = as(ctx, operator2)
	_, err = o.adminAt(len(o.conns)-1).ApproveShardPlan(cctx, &lockv1.ApproveShardPlanRequest{Id: id})
	cancel()
	if err != nil {
		return "", fmt.Errorf("approve shard plan %s: %w", id, err)
	}
	return id, nil
}

// follow polls plan id until it is done (up to d), calling during once
// with the plan as first seen draining. A plan blocked on a receiver's
// epoch has it advanced (restores meanwhile may have put another shard
// above it).
func (r *run) follow(ctx context.Context, admin *operators, id string, d time.Duration, during func(*shardmove.Plan)) (*shardmove.Plan, error) {
	deadline := time.Now().Add(d)
	coord := r.coord().Client()
	advanced := ""
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		p, err := shardmove.Get(cctx, coord, id)
		cancel()
		switch {
		case err != nil:
			// The coord cluster may be out (a quorum loss of it is not
			// scheduled inside a move, but reads can time out): look again.
		case p.State == shardmove.StateDone:
			return p, nil
		case p.State == shardmove.StateFailed:
			return p, fmt.Errorf("shard plan %s failed: %s", id, p.Err)
		case p.State == shardmove.StateDraining && during != nil:
			during(p)
			during = nil
		case p.Blocked != "" && advanced != p.Blocked:
			advanced = p.Blocked
			for _, to := range receivers(p) {
				if err := r.aboveAll(ctx, admin, to); err != nil {
					r.logf("gate: plan %s blocked (%s); advancing %s: %v", id, p.Blocked, to, err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("shard plan %s not done within %s", id, d)
}

// receivers are the shards a plan of the gate's gives ranges to: its pins'.
func receivers(p *shardmove.Plan) []string {
	var out []string
	for _, o := range p.To.Overrides {
		out = append(out, o.Shard)
	}
	return out
}

// aboveAll advances shard to's epoch unless it is already above every
// other shard's, so that a range moved to it never sees its tokens go
// backwards (the controller would otherwise block the plan, saying so).
func (r *run) aboveAll(ctx context.Context, admin *operators, to string) error {
	cctx, cancel := as(ctx, operator)
	st, err := admin.adminAt(0).EpochStatus(cctx, &lockv1.EpochStatusRequest{})
	cancel()
	if err != nil {
		return err
	}
	var mine, others uint32
	for _, c := range st.GetClusters() {
		switch {
		case c.GetCluster() == to:
			mine = c.GetEpoch()
		case slices.Contains(r.shardNames(), c.GetCluster()):
			others = max(others, c.GetEpoch())
		}
	}
	if mine > others {
		return nil
	}
	next, err := admin.nextEpoch(ctx)
	if err != nil {
		return err
	}
	epoch, _, _, err := admin.advance(ctx, to, mine, next, "release gate: a shard receiving a range must have the highest epoch")
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.records[to] = append(r.records[to], epoch)
	r.mu.Unlock()
	r.logf("gate: %s advanced from epoch %d to %d to receive %s (the other shards' highest: %d)", to, mine, epoch, movedPrefix, others)
	return nil
}

// nextHome is the shard the next move pins the workers' range to: shard-3
// first (added by that move), then the shards in turn.
func (r *run) nextHome() string {
	if !r.added {
		return Shard3
	}
	names := r.shardNames()
	i := slices.Index(names, r.home)
	return names[(i+1)%len(names)]
}

// stallFile is the failpoint file that stalls arbiter a's map watch.
func (r *run) stallFile(name string) string {
	return filepath.Join(r.dir, "lockd", name+".stall-map-watch")
}

// move moves the workers' range to the next shard, with the fault kind
// names during it.
func (r *run) move(ctx context.Context, f *history.Fault, kind string) error {
	admin, closeAdmin, err := r.admin()
	if err != nil {
		return err
	}
	defer closeAdmin()
	from, to := r.home, r.nextHome()
	f.Cluster = ""
	f.Target = from + "->" + to
	if err := r.aboveAll(ctx, admin, to); err != nil {
		return err
	}
	// The drain has a holder to wait for: the gate's own hold, with a
	// fault to inject while it drains; else any worker's, when one comes.
	release := func() {}
	if kind == KindControllerKill || kind == KindDrainQuorumLoss {
		if release, err = r.holdForDrain(ctx); err != nil {
			return err
		}
	} else {
		r.waitHeld(ctx, admin, 10*time.Second)
	}
	req := &lockv1.ProposeShardPlanRequest{Pin: []*lockv1.ShardPin{{Prefix: movedPrefix, Shard: to}}, Reason: "release gate: " + kind}
	if !r.added {
		req.Add = []*lockv1.ShardWeight{{Name: Shard3}}
	}
	var allow time.Duration
	var stale *proc.Lockd
	if kind == KindMapStall {
		stale = r.arbiters[r.rnd.IntN(len(r.arbiters))]
		if err := os.WriteFile(r.stallFile(stale.Name), nil, 0o644); err != nil {
			return err
		}
		f.Target += ", " + stale.Name + "'s map watch stalled"
		defer func() {
			// Past the flip, for a while: its clients' acquires of the moved
			// keys meet the old shard's fence.
			time.Sleep(3 * time.Second)
			_ = os.Remove(r.stallFile(stale.Name))
		}()
	}
	var injectErr error
	during := func(p *shardmove.Plan) {
		defer release()
		switch kind {
		case KindControllerKill:
			a, err := r.controllerLockd(ctx)
			if err != nil {
				injectErr = err
				return
			}
			f.Target += ", " + a.Name + " (the elected controller) SIGKILLed"
			begin := time.Now()
			a.Kill()
			time.Sleep(time.Duration(1000+r.rnd.IntN(1000)) * time.Millisecond)
			if err := a.Start(); err != nil {
				injectErr = err
				return
			}
			injectErr = a.WaitReady(ctx, 30*time.Second)
			allow = time.Since(begin) + moveElection + time.Second
		case KindDrainQuorumLoss:
			q := history.Fault{Kind: KindQuorumLoss, Cluster: from, Note: "while plan " + p.ID + " drains " + movedPrefix}
			begin := time.Now()
			if err := r.quorumLoss(&q, r.clusterNamed(from)); err != nil {
				q.Err = err.Error()
				injectErr = err
			}
			r.recordFault(q)
			f.Target += ", " + from + " without quorum"
			allow = time.Since(begin) + 5*time.Second
		}
	}
	f.Start = history.Now()
	id, err := admin.propose(ctx, req)
	if err != nil {
		return err
	}
	p, err := r.follow(ctx, admin, id, 2*time.Minute, during)
	release()
	if err != nil {
		return err
	}
	r.added, r.home = true, to
	if injectErr != nil {
		return injectErr
	}
	if (kind == KindControllerKill || kind == KindDrainQuorumLoss) && allow == 0 {
		return fmt.Errorf("plan %s was done before its drain could be faulted", id)
	}
	m := Move{Kind: kind, Plan: id, From: from, To: to, Drain: p.Flipped.Sub(p.DrainStarted), Bound: max(shardmove.Bound(p.Live), TTL),
		Allow: allow, Stragglers: len(p.Stragglers), Live: len(p.Live)}
	if stale != nil {
		// The map watch is still stalled: ask the stale arbiter for a key
		// of the moved range the gate holds on its new shard.
		if m.Probe, m.StaleGrant, err = r.probeStale(ctx, stale, to); err != nil {
			return err
		}
	}
	if m.Stragglers > 0 {
		m.Settle = p.Updated.Sub(p.Flipped)
	}
	r.mu.Lock()
	r.moves = append(r.moves, m)
	r.mu.Unlock()
	f.Note = fmt.Sprintf("plan %s: %d live ranges drained in %s, %d stragglers", id, m.Live, m.Drain.Round(100*time.Millisecond), m.Stragglers)
	return nil
}

// waitHeld waits up to d for a held key of the entity tier, so that the
// move has a holder to drain.
func (r *run) waitHeld(ctx context.Context, admin *operators, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, k := range gateKeys(r.o.Keys) {
			if r.clusterOf(k, 0) == CoordCluster {
				continue
			}
			if in, err := admin.inspect(ctx, k); err == nil && in.GetHeld() {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// controllerLockd is the lockd whose move controller is elected.
func (r *run) controllerLockd(ctx context.Context) (*proc.Lockd, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := r.coord().Client().Get(cctx, shardmove.ElectionPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("no move controller is elected")
	}
	leader := string(resp.Kvs[0].Value)
	for _, a := range r.arbiters {
		b, err := os.ReadFile(filepath.Join(r.dir, "lockd", a.Name, "arbiter-id"))
		if err == nil && strings.TrimSpace(string(b)) == leader {
			return a, nil
		}
	}
	return nil, fmt.Errorf("the elected move controller %q is none of the gate's lockds", leader)
}

// finishMoves waits, after the faults, for every plan to be done, and
// reads the holds the controller ended at a drain's bound.
func (r *run) finishMoves(ctx context.Context, res *MoveResult) {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		plans, err := shardmove.List(cctx, r.coord().Client())
		cancel()
		var open []string
		for _, p := range plans {
			if p.State != shardmove.StateDone {
				open = append(open, fmt.Sprintf("plan %s is %s %s%s", p.ID, p.State, p.Blocked, p.Err))
			}
		}
		if err == nil && len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if err != nil {
				open = append(open, "the plans could not be read: "+err.Error())
			}
			for _, o := range open {
				res.Details = append(res.Details, "a move did not complete after the faults ended: "+o)
			}
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.readMoveForces(ctx)
}

// readMoveForces reads the force records the move controller wrote on
// each shard (before a restore or rebuild loses them, and at the end).
func (r *run) readMoveForces(ctx context.Context) {
	if !r.sharded() {
		return
	}
	for _, name := range r.shardNames() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := r.clusterNamed(name).Client().Get(cctx, keyspace.ForceRecordPrefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			r.logf("gate: reading the force records of %s: %v", name, err)
			continue
		}
		for _, kv := range resp.Kvs {
			var rec moveForce
			if json.Unmarshal(kv.Value, &rec) != nil || !strings.HasPrefix(rec.Reason, "shard move ") {
				continue
			}
			rec.Shard = name
			r.mu.Lock()
			if !slices.ContainsFunc(r.forced, func(x moveForce) bool { return x.ID == rec.ID }) {
				r.forced = append(r.forced, rec)
			}
			r.mu.Unlock()
		}
	}
}

// moveForce is a force record lockd wrote for a hold a move's drain
// ended (the fields the gate reads).
type moveForce struct {
	ID           string    `json:"id"`
	Key          string    `json:"key"`
	HoldRevision int64     `json:"holdRevision"`
	Reason       string    `json:"reason"`
	ApprovedAt   time.Time `json:"approvedAt"`
	Shard        string    `json:"-"`
}

// moveForceOps are the force-releases the move controller made, as the
// gate's own operations: a Force of the hold's token (found among the
// workers' grants on that shard by its revision) in the window lockd
// wrote it in (from just before its approval time to the request timeout
// after it; wall time turned into history.Now's).
func (r *run) moveForceOps(ops []history.Op, clusterOf check.ClusterOf) []history.Op {
	var out []history.Op
	for i, rec := range r.forced {
		var tok uint64
		for _, op := range ops {
			if op.Kind == history.Acquire && op.Outcome == history.Ok && op.Key == rec.Key &&
				int64(op.Token&(1<<48-1)) == rec.HoldRevision && clusterOf(op.Key, op.Token) == rec.Shard {
				tok = op.Token
			}
		}
		if tok == 0 {
			continue // a hold no worker was told it had: nothing to check it against
		}
		at := rec.ApprovedAt.UnixNano() - r.wallOffset
		out = append(out, history.Op{Worker: gateHistory, Seq: int64(1_000_000 + i), Kind: history.Force, Key: rec.Key, Token: tok,
			Call: at - int64(100*time.Millisecond), Return: at + int64(RequestTimeout), Outcome: history.Ok})
	}
	return out
}

// checkMoves holds every move to its limit: the range unavailable for
// new grants (the drain, and the stragglers' wait) at most its bound plus
// MoveSlack, plus what the fault in the move took.
func (r *run) checkMoves(res *MoveResult) {
	res.Moves = r.moves
	res.Forced = len(r.forced)
	for _, m := range r.moves {
		limit := m.Bound + MoveSlack + m.Allow
		if m.Drain > limit {
			res.Details = append(res.Details, fmt.Sprintf("move %s (%s, %s -> %s): the range was closed for its drain for %s, above the limit %s (bound %s + %s + the fault's %s)",
				m.Plan, m.Kind, m.From, m.To, m.Drain.Round(100*time.Millisecond), limit, m.Bound, MoveSlack, m.Allow.Round(100*time.Millisecond)))
		}
		if m.StaleGrant {
			res.Details = append(res.Details, fmt.Sprintf("move %s (%s, %s -> %s): %s", m.Plan, m.Kind, m.From, m.To, m.Probe))
		}
		if m.Settle > limit {
			res.Details = append(res.Details, fmt.Sprintf("move %s (%s, %s -> %s): stragglers kept the range closed on %s for %s, above the limit %s",
				m.Plan, m.Kind, m.From, m.To, m.To, m.Settle.Round(100*time.Millisecond), limit))
		}
	}
}

// epochOwners maps every epoch the gate saw given to a cluster to it.
func (r *run) epochOwners() map[uint32]string {
	out := map[uint32]string{}
	for c, es := range r.records {
		for _, e := range es {
			out[e] = c
		}
	}
	for _, f := range r.faults {
		if f.Err == "" && f.Cluster != "" && f.Epoch != 0 {
			out[f.Epoch] = f.Cluster
		}
	}
	return out
}

// stallEnv is the environment variable naming the file that stalls a
// lockd's map watch in the gate's build (internal/arbiter's
// StallMapWatchEnv, tag gate_failpoints).
const stallEnv = "LOCKD_GATE_STALL_MAP_WATCH"

// missingMoves are the move kinds in faults that were not injected.
func missingMoves(faults []string, injected map[string]int) []string {
	var out []string
	for _, k := range faults {
		if isMove(k) && injected[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// Mover is the gate's own identity when it holds a key for a move's
// drain (granted the gate's keys beside the workers).
const Mover = "spiffe://gate.local/mover"

// holdForDrain takes an entity key of the gate as Mover (through the
// first lockd) and returns the func that releases it, at most once. The
// move drains it: the fault goes in while it does. Its hold is in no
// worker's history; a grant the lock model sees after it carries a higher
// token all the same.
func (r *run) holdForDrain(ctx context.Context) (func(), error) {
	c, err := client.New(client.WithTarget(r.arbiters[0].Addr), client.WithInsecureIdentity(Mover))
	if err != nil {
		return nil, err
	}
	// Any entity key of the workers will do: ask for each in turn, briefly,
	// until one is free (a worker's child may hold one for long).
	var keys []string
	for _, k := range gateKeys(r.o.Keys) {
		if r.clusterOf(k, 0) != CoordCluster {
			keys = append(keys, k)
		}
	}
	var l *client.Lock
	for i, deadline := 0, time.Now().Add(40*time.Second); l == nil; i++ {
		key := keys[i%len(keys)]
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err = c.Acquire(actx, key, "", func(*client.Lock) {}, client.Wait(3*time.Second))
		cancel()
		if err != nil && (ctx.Err() != nil || time.Now().After(deadline)) {
			_ = c.Close()
			return nil, fmt.Errorf("the gate's hold of one of %v for the drain: %w", keys, err)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = l.Release(rctx) // ended by force at the drain's bound, or released
			_ = c.Close()
		})
	}, nil
}

// probeKey is the key of the moved range the map-stall probe takes; no
// worker takes it, so the probe's holds are in no worker's history.
const probeKey = movedPrefix + "stale-map-probe"

// Prober is the gate's identity when it asks an arbiter with a stale map
// for the probe key (granted the gate's keys beside the workers).
const Prober = "spiffe://gate.local/prober"

// probeStale is the map-stall fault's deterministic check. The gate holds
// probeKey as Mover through an arbiter whose map is current (on shard to),
// then asks the arbiter whose map watch is stalled for it as Prober. That
// arbiter routes by the old map, to the old shard, where the key is free:
// only the shard fence stops it granting. Refused (MOVING, then in line
// behind the gate's hold until the wait ends) is right; granted is a
// double grant, reported as granted.
func (r *run) probeStale(ctx context.Context, stale *proc.Lockd, to string) (string, bool, error) {
	var fresh *proc.Lockd
	for _, a := range r.arbiters {
		if a != stale {
			fresh = a
		}
	}
	if fresh == nil {
		return "", false, fmt.Errorf("gate: the map-stall probe needs a second lockd")
	}
	hc, err := client.New(client.WithTarget(fresh.Addr), client.WithInsecureIdentity(Mover))
	if err != nil {
		return "", false, err
	}
	defer func() { _ = hc.Close() }()
	// The receiving shard's epoch was just advanced: its grace (the
	// longest class TTL, the open class's 30 s) may still hold grants.
	var held *client.Lock
	for deadline := time.Now().Add(45 * time.Second); held == nil; {
		actx, cancel := context.WithTimeout(ctx, 12*time.Second)
		l, err := hc.Acquire(actx, probeKey, "", func(*client.Lock) {}, client.Wait(10*time.Second))
		cancel()
		switch {
		case err == nil && r.clusterOf(probeKey, l.Token()) == to:
			held = l
			continue
		case err == nil:
			err = fmt.Errorf("granted on %s, not %s, after the flip", r.clusterOf(probeKey, l.Token()), to)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = l.Release(rctx)
			cancel()
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return "", false, fmt.Errorf("gate: the map-stall probe's hold of %s through %s: %w", probeKey, fresh.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = held.Release(rctx)
	}()
	sc, err := client.New(client.WithTarget(stale.Addr), client.WithInsecureIdentity(Prober))
	if err != nil {
		return "", false, err
	}
	defer func() { _ = sc.Close() }()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := sc.Acquire(actx, probeKey, "", func(*client.Lock) {}, client.Wait(2*time.Second))
	if err == nil {
		on := r.clusterOf(probeKey, l.Token())
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = l.Release(rctx)
		cancel()
		return fmt.Sprintf("%s, its map watch stalled, granted %s on %s (token %s) while the gate held it on %s through %s (token %s)",
			stale.Name, probeKey, on, check.FormatToken(l.Token()), to, fresh.Name, check.FormatToken(held.Token())), true, nil
	}
	r.logf("gate: %s, its map watch stalled, did not grant %s held on %s: %v", stale.Name, probeKey, to, err)
	return fmt.Sprintf("%s with a stale map refused %s (%v)", stale.Name, probeKey, err), false, nil
}
