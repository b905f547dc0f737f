package gate

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/check"
	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/ci/internal/cluster"
	"github.com/lockd-dev/lockd/ci/internal/proc"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/client"
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
	KindArbiterStop        = "arbiter-stop"
	KindStoreRebuild       = "store-rebuild"
	KindForceRelease       = "force-release"
	KindClassReload        = "class-reload"
	// KindTailerKill SIGKILLs the elected audit tailer mid-batch and
	// restarts it: the history must still be complete, without duplicates.
	KindTailerKill = "tailer-kill"
	// KindQuorumLoss SIGKILLs two of the three members, keeps them down
	// past the arbiters' --open-after, and restarts them: closed classes
	// must grant nothing meanwhile, open ones only unprotected grants, each
	// in the history afterwards. Not in "all" (see Options.OpenKeys).
	KindQuorumLoss = check.KindQuorumLoss
	// KindLinkDelay slows the link between the workers and one arbiter
	// (the proxy they dial), in turn both ways by tens to hundreds of
	// milliseconds with jitter, then one way: the arbiter's answers alone,
	// keepalive answers among them, by more than the client's fence
	// margin, so a deadline taken from an answer's arrival instead of its
	// request's sending would outlive the lease. Not in the schedule's
	// sequence: with it, a slow link comes every 12-20 s all run long,
	// over whatever other fault is on (linkDelays).
	KindLinkDelay = "link-delay"
	// KindReentrant is not scheduled: with it, workers sometimes acquire
	// the key they hold again from a second goroutine, racing their own
	// release; the count is the re-entries that happened.
	KindReentrant = "reentrant"
	// KindRetriedRelease is not scheduled: with it, workers sometimes take
	// again the key they released last, on the same session, and send the
	// earlier release again, as a client whose release's answer was lost
	// would (etcd#22082's shape); lockd must refuse it. The count is the
	// retried releases that were sent.
	KindRetriedRelease = "retried-release"
)

// Kinds lists every fault kind, in the order "all" means.
var Kinds = append([]string{KindMemberKillLeader, KindMemberKillFollower, KindLeaderIsolate, KindLeaderPause,
	KindWorkerPause, KindArbiterKill, KindRestore, KindArbiterStop, KindStoreRebuild, KindForceRelease,
	KindClassReload, KindTailerKill, KindLinkDelay, KindReentrant, KindRetriedRelease, KindQuorumLoss}, MoveKinds...)

// All is what --faults all means: every kind but quorum-loss, which needs
// the open keys (--open-keys) and runs on its own, and but the move
// kinds, which need a split run (main adds them there).
func All() []string {
	return slices.DeleteFunc(slices.Clone(Kinds), func(k string) bool { return k == KindQuorumLoss || isMove(k) })
}

// scheduled reports whether the schedule injects kind (rather than the
// workers doing it all along).
func scheduled(kind string) bool {
	return kind != KindReentrant && kind != KindRetriedRelease && kind != KindLinkDelay
}

// inject runs the fault schedule until the run's duration is over: kinds
// in a seeded shuffle, round robin so every kind comes up, with quiet gaps.
// The run is lengthened by the time restores and rebuilds close grants by
// design (sealed, then the advance's grace), up to twice its duration, so
// the workers get --duration in which grants are possible.
func (r *run) inject(ctx context.Context) {
	begin := time.Now()
	end := begin.Add(r.o.Duration)
	extend := func() {
		r.mu.Lock()
		closed := grantsClosed(r.faults, r.start, history.Now())
		r.mu.Unlock()
		r.mu.Lock()
		end = begin.Add(min(r.o.Duration+closed, 2*r.o.Duration))
		r.mu.Unlock()
	}
	if slices.Contains(r.o.Faults, KindLinkDelay) {
		go r.linkDelays(ctx, func() time.Time {
			r.mu.Lock()
			defer r.mu.Unlock()
			return end
		})
	}
	order := slices.DeleteFunc(append([]string(nil), r.o.Faults...), func(k string) bool { return !scheduled(k) })
	r.rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	order = rebuildAfterRestore(order)
	if r.split() {
		order = eachClusterOut(order, r.rnd.IntN(len(order)+1))
	}
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
		if !r.fits(kind, begin, end) {
			continue
		}
		if err := r.fault(ctx, kind); err != nil {
			r.logf("fault %s: %v", kind, err)
		}
		extend()
		// Let the cluster settle before the next fault, so no two faults
		// overlap and quorum is never lost by the schedule itself.
		if err := r.waitHealthy(ctx, 20*time.Second); err != nil {
			r.logf("cluster not healthy after %s: %v", kind, err)
		}
	}
}

// rebuildAfterRestore moves a store rebuild to right after the restore in
// order, so every round destroys a restored store seconds after its epoch
// advance: the audit history must have read that store life first. (The
// gate once went on before the tailer had, and the advance was missing
// from the history; only a shuffle that put the two together showed it.)
func rebuildAfterRestore(order []string) []string {
	if !slices.Contains(order, KindRestore) || !slices.Contains(order, KindStoreRebuild) {
		return order
	}
	order = slices.DeleteFunc(order, func(k string) bool { return k == KindStoreRebuild })
	i := slices.Index(order, KindRestore)
	return slices.Insert(order, i+1, KindStoreRebuild)
}

// eachClusterOut puts a second restore, and the rebuild right after it,
// at position at of order (a split run's round takes each cluster out:
// target sends the first restore to the entity cluster, the second to the
// coord cluster, and each rebuild where its restore went).
func eachClusterOut(order []string, at int) []string {
	pair := []string{KindRestore}
	if slices.Contains(order, KindStoreRebuild) {
		pair = append(pair, KindStoreRebuild)
	}
	if !slices.Contains(order, KindRestore) {
		if !slices.Contains(order, KindStoreRebuild) {
			return order
		}
		pair = []string{KindStoreRebuild}
	}
	// Not inside the first pair.
	if i := slices.Index(order, pair[0]); at > i && at < i+len(pair) {
		at = i + len(pair)
	}
	return slices.Insert(slices.Clone(order), min(at, len(order)), pair...)
}

// fits reports whether kind fits in what is left of the run (begin to
// end). A quorum loss closes grants for as long as it lasts, which
// lengthens the run by as much (up to twice --duration): it needs only to
// start before the end, and room before that hard end.
func (r *run) fits(kind string, begin, end time.Time) bool {
	if kind == KindQuorumLoss {
		return time.Until(end) >= 5*time.Second && time.Until(begin.Add(2*r.o.Duration)) >= r.needs(kind)
	}
	return time.Until(end) >= r.needs(kind)
}

// needs is about how long a fault takes, so none is cut off by the end.
func (r *run) needs(kind string) time.Duration {
	switch kind {
	case KindWorkerPause:
		return TTL + 4*time.Second
	case KindRestore:
		return 12 * time.Second
	case KindArbiterStop:
		return TTL + 6*time.Second
	case KindStoreRebuild:
		return 10 * time.Second
	case KindClassReload:
		return 7 * time.Second
	case KindQuorumLoss:
		return r.outage() + outageJitter + 6*time.Second // and the restart
	case KindShardMove, KindMapStall, KindControllerKill:
		return 25 * time.Second
	case KindDrainQuorumLoss:
		return r.outage() + outageJitter + 20*time.Second
	default:
		return 5 * time.Second
	}
}

func (r *run) fault(ctx context.Context, kind string) error {
	f := history.Fault{Kind: kind}
	var c *etcdCluster
	switch kind {
	case KindMemberKillLeader, KindMemberKillFollower, KindLeaderIsolate, KindLeaderPause, KindRestore, KindStoreRebuild, KindQuorumLoss:
		c = r.target(kind)
		f.Cluster = c.name
	}
	r.settle(ctx, c)
	var err error
	switch kind {
	case KindMemberKillLeader, KindMemberKillFollower:
		m, lerr := c.Leader(ctx)
		if lerr != nil {
			return lerr
		}
		if kind == KindMemberKillFollower {
			m = c.Members[(m.Index+1+r.rnd.IntN(len(c.Members)-1))%len(c.Members)]
		}
		f.Target, f.Start = c.label(m.Name), history.Now()
		if err = c.Kill(m); err == nil {
			time.Sleep(time.Duration(1500+r.rnd.IntN(1500)) * time.Millisecond)
			err = c.Restart(m)
		}
	case KindLeaderIsolate:
		m, lerr := c.Leader(ctx)
		if lerr != nil {
			return lerr
		}
		f.Target, f.Start = c.label(m.Name), history.Now()
		if err = c.Isolate(m); err == nil {
			time.Sleep(time.Duration(3000+r.rnd.IntN(2000)) * time.Millisecond)
			err = c.Heal(m)
		}
	case KindLeaderPause:
		m, lerr := c.Leader(ctx)
		if lerr != nil {
			return lerr
		}
		f.Target, f.Start = c.label(m.Name), history.Now()
		// Past the election timeout (1 s): the others elect a new leader
		// while this one still believes it leads.
		if err = c.Pause(m); err == nil {
			time.Sleep(time.Duration(2500+r.rnd.IntN(1500)) * time.Millisecond)
			err = c.Resume(m)
		}
	case KindWorkerPause:
		w, werr := r.nextAnnouncer(ctx, 15*time.Second) // after a restore nothing is held for the grace
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
		f.Target = c.label("cluster")
		err = r.restore(ctx, &f, c)
	case KindArbiterStop:
		err = r.arbiterStop(ctx, &f)
	case KindStoreRebuild:
		f.Target = c.label("cluster")
		err = r.storeRebuild(ctx, &f, c)
	case KindTailerKill:
		err = r.tailerKill(ctx, &f)
	case KindForceRelease:
		err = r.forceRelease(ctx, &f)
	case KindClassReload:
		err = r.classReload(ctx, &f)
	case KindQuorumLoss:
		err = r.quorumLoss(&f, c)
	case KindShardMove, KindControllerKill, KindMapStall, KindDrainQuorumLoss:
		err = r.move(ctx, &f, kind)
	default:
		return fmt.Errorf("%w: unknown fault kind %q", ErrUsage, kind)
	}
	if f.End == 0 {
		f.End = history.Now()
	}
	if err != nil {
		f.Err = err.Error()
	}
	r.recordFault(f)
	return err
}

// How long quorumLoss keeps two members down: outageMin plus up to
// outageJitter. Long enough for the arbiters to open (their epoch reads
// time out after RequestTimeout, and the posture opens OpenAfter after the
// first failure), for the workers' calls in flight when quorum went to time
// out and their next acquires to be granted unprotected (outageSettle),
// and then for two of the open class's keepalive intervals (OpenTTL/3
// each): an unprotected lock must still be usable that late in the outage.
const (
	outageSettle = 8 * time.Second
	outageMin    = OpenAfter + RequestTimeout + outageSettle + 2*OpenTTL/3
	outageJitter = 4 * time.Second
	// outageClosed is how long a quorum loss lasts in a run without open
	// keys (a split run's quorum loss of the entity cluster): past the
	// arbiters' request timeout and --open-after, long enough for the
	// workers' calls to time out.
	outageClosed = 8 * time.Second
)

// outage is the shortest quorum loss of this run (outageMin with open
// keys; outageClosed without).
func (r *run) outage() time.Duration {
	if len(r.openKeys) == 0 {
		return outageClosed
	}
	return outageMin
}

// quorumLoss kills two members and restarts them after the arbiters have
// been open long enough for an unprotected lock to outlive two keepalive
// intervals (outageMin). The fault's window, Start to End, is from the
// second kill to the first restart: no write can commit in it.
func (r *run) quorumLoss(f *history.Fault, c *etcdCluster) error {
	i := r.rnd.IntN(len(c.Members))
	down := []*cluster.Member{c.Members[i], c.Members[(i+1)%len(c.Members)]}
	f.Target = c.label(down[0].Name) + "," + c.label(down[1].Name)
	for _, m := range down {
		if err := c.Kill(m); err != nil {
			return err
		}
	}
	f.Start = history.Now()
	time.Sleep(r.outage() + time.Duration(r.rnd.Int64N(int64(outageJitter))))
	f.End = history.Now()
	// Grants of every class are closed by design until the arbiters have
	// read the epoch again after the restart.
	f.GrantsClosedUntil = f.End + int64(4*time.Second)
	for _, m := range down {
		if err := c.Restart(m); err != nil {
			return err
		}
	}
	return nil
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
func (r *run) restore(ctx context.Context, f *history.Fault, c *etcdCluster) error {
	r.readMoveForces(ctx) // before the store's life ends
	snap := filepath.Join(r.dir, "etcd", "snapshot-"+cmp.Or(c.name, "main")+".db")
	if err := c.Snapshot(ctx, snap); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	f.HistoryBehind = !r.historyCaughtUp(ctx, 15*time.Second, c)
	if c == r.lineCluster() {
		r.readLine(ctx) // the store's life ends here
	}
	f.Start = history.Now()
	if err := c.Restore(ctx, snap); err != nil {
		return err
	}
	admin, closeAdmin, err := r.admin()
	if err != nil {
		return err
	}
	defer closeAdmin()
	st, err := admin.waitSealed(ctx, c.name, func(*lockv1.EpochStatusResponse) bool { return true })
	if err != nil {
		return fmt.Errorf("lockd did not report the restored store as sealed: %w", err)
	}
	next, err := admin.nextEpoch(ctx)
	if err != nil {
		return err
	}
	epoch, deleted, resume, err := admin.advance(ctx, c.name, st.GetEpoch(), next, "release gate: restore fault")
	if err != nil {
		return err
	}
	f.GrantsClosedUntil, f.Epoch = resume, epoch
	f.Note = fmt.Sprintf("epoch %d -> %d, %d holds deleted; grants closed %s", st.GetEpoch(), epoch, deleted,
		time.Duration(resume-f.Start).Round(100*time.Millisecond))
	for _, a := range r.arbiters {
		if err := a.WaitReady(ctx, 20*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// arbiterStop SIGSTOPs a lockd past the TTL and resets every connection
// to it, so its clients' reconnects reach a listener that accepts and
// never answers (the stopped process's backlog, through its proxy), then
// SIGCONTs it. It picks the lockd of a worker whose supervised child has
// just started a unit longer than the TTL, when one comes within 10s (40s
// in the late-fence control): that child must be dead before anyone else
// writes its key.
func (r *run) arbiterStop(ctx context.Context, f *history.Fault) error {
	i := r.rnd.IntN(len(r.arbiters))
	for drained := false; !drained; { // only a child that starts from now on
		select {
		case <-r.childRun:
		default:
			drained = true
		}
	}
	// The late-fence control exists for this case: give a long unit more
	// time to come (a third of the child units outlast the TTL).
	wait := 10 * time.Second
	if r.o.LateFence {
		wait = 40 * time.Second
	}
	select {
	case w := <-r.childRun:
		i = w % len(r.arbiters)
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	a := r.arbiters[i]
	f.Target, f.Start = a.Name, history.Now()
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	r.proxies[i].Reset()
	time.Sleep(TTL + 3*time.Second)
	if err := a.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	return a.WaitReady(ctx, 20*time.Second)
}

// storeRebuild wipes the cluster and starts it empty with the same
// cluster ID: lockd must seal (no epoch record) and the run goes on only
// after two operators initialise the epoch above every earlier one.
func (r *run) storeRebuild(ctx context.Context, f *history.Fault, c *etcdCluster) error {
	admin, closeAdmin, err := r.admin()
	if err != nil {
		return err
	}
	defer closeAdmin()
	next, err := admin.nextEpoch(ctx)
	if err != nil {
		return fmt.Errorf("epoch status before the rebuild: %w", err)
	}
	highest := next - 1
	r.readMoveForces(ctx) // before the store's life ends
	f.HistoryBehind = !r.historyCaughtUp(ctx, 15*time.Second, c)
	if c == r.lineCluster() {
		r.readLine(ctx) // the store's life ends here
	}
	f.Start = history.Now()
	if err := c.Rebuild(ctx); err != nil {
		return err
	}
	if _, err := admin.waitSealed(ctx, c.name, func(st *lockv1.EpochStatusResponse) bool { return st.GetRecordMissing() }); err != nil {
		return fmt.Errorf("lockd did not seal the rebuilt store for its missing epoch record: %w", err)
	}
	epoch, _, resume, err := admin.advance(ctx, c.name, 0, next, "release gate: store rebuilt empty")
	if err != nil {
		return err
	}
	f.GrantsClosedUntil, f.Epoch = resume, epoch
	f.Note = fmt.Sprintf("rebuilt empty; epoch initialised at %d (highest before: %d); grants closed %s", epoch, highest,
		time.Duration(resume-f.Start).Round(100*time.Millisecond))
	for _, a := range r.arbiters {
		if err := a.WaitReady(ctx, 20*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// forceRelease has the two operators release a key a worker holds. The
// forced holder may go on believing it holds only until it is told (its
// lost operation); the model fails it if it acts after that.
//
// Half the time the force-release also revokes the holder's session. It
// then looks, for up to pairWait, for a session holding two keys (workers
// sometimes hold a pair), so that the revoke ends a hold other than the
// forced one, which the audit check wants recorded as forced, not expired.
// It forces the session's oldest hold: a worker works under the first key
// of its round and only holds the second, so the hold the revoke ends
// unannounced is one nobody checks (the lock model knows only the forced
// one's holder may still act until told).
func (r *run) forceRelease(ctx context.Context, f *history.Fault) error {
	admin, closeAdmin, err := r.admin()
	if err != nil {
		return err
	}
	defer closeAdmin()
	revoke := r.rnd.IntN(2) == 0
	f.Start = history.Now()
	// Up to 20s: after a restore or a rebuild nothing is held until the
	// advance's grace has passed.
	deadline := time.Now().Add(20 * time.Second)
	pairUntil := time.Now().Add(pairWait)
	for time.Now().Before(deadline) {
		key, held, others := r.pickHeld(ctx, admin, revoke, revoke && time.Now().Before(pairUntil))
		if held == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		req, err := admin.requestForce(ctx, key, revoke)
		if err != nil {
			continue // released meanwhile
		}
		fr := req.GetForceRelease()
		tok := uint64(held.GetHold().GetToken().GetEpoch())<<48 | uint64(fr.GetHoldRevision())
		f.Target, f.Start = key, history.Now()
		op := r.rec.Begin(history.Force, key, tok, 0)
		op.Session, op.Revoke = fr.GetSessionId(), revoke
		if revoke {
			op.Others = others
		}
		if err := admin.approveForce(ctx, fr.GetId()); err != nil {
			err = client.Decode(err)
			op.Err, op.Reason = err.Error(), client.Reason(err)
			if client.Definite(err) {
				r.rec.End(op, history.Fail) // refused (the hold changed): nothing was released
				continue
			}
			// The release may have committed, and the revoke may not have
			// happened: nothing is known.
			r.rec.End(op, history.Unknown)
			return fmt.Errorf("the force-release of %s: %w", key, err)
		}
		r.rec.End(op, history.Ok)
		f.Note = fmt.Sprintf("forced %s's hold (session %d)", fr.GetHolder(), fr.GetSessionId())
		if revoke {
			f.Note += fmt.Sprintf(" and revoked the session, which also held %v", others)
		}
		return nil
	}
	return fmt.Errorf("no held key could be released by force within 20s")
}

// pairWait is how long a revoking force-release looks for a session
// holding two keys before it takes any held key.
const pairWait = 15 * time.Second

// pickHeld inspects the gate's keys and picks a held one at random (with
// pair, only one whose session holds another key too, on any cluster; with
// revoke, the oldest hold of the session picked). It returns the key, its
// hold, and the session's other holds; a nil hold when none fits.
func (r *run) pickHeld(ctx context.Context, admin *operators, revoke, pair bool) (string, *lockv1.InspectResponse, []history.Held) {
	bySession := map[int64][]string{}
	holds := map[string]*lockv1.InspectResponse{}
	var keys []string
	// A hold on a cluster other than the coord's is on the session's lease
	// there; the session is its home session.
	sessionOf := func(k string) int64 {
		if h := holds[k].GetHold(); h.GetHomeSessionId() != 0 {
			return h.GetHomeSessionId()
		}
		return holds[k].GetHold().GetSessionId()
	}
	for _, key := range gateKeys(r.o.Keys) {
		held, err := admin.inspect(ctx, key)
		if err != nil || !held.GetHeld() {
			continue
		}
		holds[key] = held
		s := sessionOf(key)
		bySession[s] = append(bySession[s], key)
		keys = append(keys, key)
	}
	session := func(k string) []string { return bySession[sessionOf(k)] }
	if pair {
		keys = slices.DeleteFunc(keys, func(k string) bool { return len(session(k)) < 2 })
	}
	if len(keys) == 0 {
		return "", nil, nil
	}
	key := keys[r.rnd.IntN(len(keys))]
	if revoke {
		key = slices.MinFunc(session(key), func(a, b string) int {
			return cmp.Compare(holds[a].GetHold().GetToken().GetValue(), holds[b].GetHold().GetToken().GetValue())
		})
	}
	var others []history.Held
	for _, k := range session(key) {
		if k != key {
			others = append(others, history.Held{Key: k, Token: holds[k].GetHold().GetToken().GetValue()})
		}
	}
	return key, holds[key], others
}

// classReload lowers the class TTL and removes one worker's grant for a
// few seconds, then restores both: holders keep their sessions, new
// sessions take the new TTL, and the worker without a grant is refused
// (its hold ends with its session, since it may not release it).
func (r *run) classReload(ctx context.Context, f *history.Fault) error {
	drop := r.rnd.IntN(len(r.workers))
	f.Target, f.Start = r.workers[drop].Name, history.Now()
	if err := r.writeClasses(LowTTL, drop); err != nil {
		return err
	}
	select {
	case <-time.After(time.Duration(4000+r.rnd.IntN(2000)) * time.Millisecond):
	case <-ctx.Done():
	}
	f.Note = fmt.Sprintf("ttl %s -> %s and the grant of %s removed, then restored", TTL, LowTTL, r.workers[drop].Name)
	return r.writeClasses(TTL, -1)
}

// linkDelayFor is how long a link-delay lasts: several keepalive rounds of
// the gate's classes (TTL/3 apart).
const linkDelayFor = 8 * time.Second

// linkDelays injects a link-delay every 12 to 20 s until the run's end
// (which the schedule may move), with a random source of its own (the
// schedule's is not shared between goroutines).
func (r *run) linkDelays(ctx context.Context, end func() time.Time) {
	rnd := rand.New(rand.NewPCG(r.o.Seed, 0x11d))
	for n := 1; ; n++ {
		gap := time.Duration(12000+rnd.IntN(8000)) * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		if time.Until(end()) < linkDelayFor {
			return
		}
		f := history.Fault{Kind: KindLinkDelay}
		r.linkDelay(&f, rnd, n)
		f.End = history.Now()
		r.recordFault(f)
	}
}

// linkDelay slows the link to one arbiter for linkDelayFor: odd
// injections both ways by 50 to 300 ms plus up to 100 ms of jitter (a
// congested path), even ones the answers alone by 1.2 to 1.8 s plus up to
// 300 ms (over the client's one-second fence margin, under a keepalive
// interval: every answer comes late, and the next request is sent before
// it arrives).
func (r *run) linkDelay(f *history.Fault, rnd *rand.Rand, n int) {
	i := rnd.IntN(len(r.proxies))
	p := r.proxies[i]
	dir, d, jitter := tcpproxy.Both, time.Duration(50+rnd.IntN(250))*time.Millisecond, 100*time.Millisecond
	f.Note = fmt.Sprintf("both ways %s + up to %s", d, jitter)
	if n%2 == 0 {
		dir, d, jitter = tcpproxy.ToClient, time.Duration(1200+rnd.IntN(600))*time.Millisecond, 300*time.Millisecond
		f.Note = fmt.Sprintf("answers only %s + up to %s", d, jitter)
	}
	f.Target, f.Start = r.arbiters[i%len(r.arbiters)].Name, history.Now()
	p.Delay(dir, d, jitter)
	time.Sleep(linkDelayFor)
	p.Delay(tcpproxy.Both, 0, 0)
}
