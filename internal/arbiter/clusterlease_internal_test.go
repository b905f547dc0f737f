package arbiter

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
)

// twoTierClasses: namespace t's t/leader/ keys are coord-tier, the rest
// entity-tier (t/fifo/ with durable fairness); alice and bob may lock t/.
const twoTierClasses = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: leader, namespace: t}
spec: {keys: ["t/leader/"], nestedIn: [std], purpose: correctness, enforcement: fenced, ttl: 15s, tier: coord, resource: db}
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: std, namespace: t}
spec: {keys: ["t/"], purpose: correctness, enforcement: fenced, ttl: 15s, tier: entity, resource: db}
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: fifo, namespace: t}
spec: {keys: ["t/fifo/"], nestedIn: [std], purpose: correctness, enforcement: fenced, ttl: 15s, tier: entity, fairness: durable, resource: db}
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: alice, namespace: t}
spec: {spiffeID: "spiffe://t/alice", prefixes: ["t/"]}
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: bob, namespace: t}
spec: {spiffeID: "spiffe://t/bob", prefixes: ["t/"]}
`

var (
	alice = identity.Caller{Kind: identity.KindWorkload, ID: "spiffe://t/alice"}
	bob   = identity.Caller{Kind: identity.KindWorkload, ID: "spiffe://t/bob"}
	op1   = identity.Caller{Kind: identity.KindWorkload, ID: "spiffe://t/ops/1"}
	op2   = identity.Caller{Kind: identity.KindWorkload, ID: "spiffe://t/ops/2"}
)

// twoClusters is an arbiter in front of two embedded etcd clusters: "coord"
// (the coord tier, the sessions) and "entity", reached through a proxy the
// test can stall.
type twoClusters struct {
	a              *Arbiter
	coord, entity  *store.Backend
	entityCli      *clientv3.Client // through proxy
	proxy          *tcpproxy.Proxy
	coordC, entC   *cell
	entityEndpoint string
}

func startTwoClusters(t *testing.T) *twoClusters {
	t.Helper()
	return startTwoClustersWith(t, nil)
}

// startTwoClustersWith is startTwoClusters, calling prepare on the two
// stores before the arbiter starts. Its operators are op1 and op2.
func startTwoClustersWith(t *testing.T, prepare func(coord, entity *store.Backend)) *twoClusters {
	t.Helper()
	dir := t.TempDir()
	coord, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: filepath.Join(dir, "coord")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coord.Close)
	entity := startOnFreePorts(t, filepath.Join(dir, "entity"))
	t.Cleanup(entity.Close)
	ep := entity.Embedded.Clients[0].Addr().String()
	proxy, err := tcpproxy.Start(ep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	entityCli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = entityCli.Close() })
	if prepare != nil {
		prepare(coord, entity)
	}
	classes, grants, problems := class.ParseFile("t/classes.yaml", []byte(twoTierClasses), "t", time.Now())
	if len(problems) > 0 {
		t.Fatalf("classes: %v", problems)
	}
	a, err := New(Config{
		Client: coord.Client, Leases: coord.Leases, KV: coord.KV, Cluster: "coord", Bootstrap: Bootstrap{FreshStore: true},
		Operators:      []string{op1.ID, op2.ID},
		RequestTimeout: 2 * time.Second, EpochRefresh: 200 * time.Millisecond, MaxEpochAge: time.Second,
		Clusters: []Cluster{{Name: "entity", Client: entityCli, Tiers: []class.Tier{class.TierEntity}, Bootstrap: Bootstrap{FreshStore: true}}},
	}, NewPolicy(class.NewSet(classes, grants)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return &twoClusters{a: a, coord: coord, entity: entity, entityCli: entityCli, proxy: proxy, coordC: a.cells[0], entC: a.cells[1], entityEndpoint: ep}
}

// TestASessionHoldsKeysOnTwoClustersWithALeaseOnEach: one session locks a
// coord-tier key on the coord cluster and entity-tier keys on the entity
// cluster, where its holds are on a lease of its own there, made once and
// shared by every arbiter through its record. Within that cluster the lease
// stands for the session: re-acquiring is idempotent, another session of
// the same identity is refused as a leak, a durable line hands the key
// over; the lease is renewed on its own, only for its session's owner,
// and closing the session revokes it with its holds. The entity cluster's
// first epoch comes from the coord cluster's counter, so the two never
// share one.
func TestASessionHoldsKeysOnTwoClustersWithALeaseOnEach(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()

	sts := a.EpochStatuses(ctx)
	if len(sts) != 2 || sts[0].Cluster != "coord" || sts[1].Cluster != "entity" || sts[0].Epoch != 1 || sts[1].Epoch != 2 || sts[1].Allocated != 2 {
		t.Fatalf("epoch statuses = %+v; want coord at 1, entity at 2 (allocated from the counter)", sts)
	}

	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/leader/x"})
	if err != nil || leader.Cluster != "coord" || leader.ClusterLease != 0 || leader.Epoch != 1 {
		t.Fatalf("coord-tier grant = %+v, %v; want cluster coord, epoch 1, no cluster lease", leader, err)
	}
	job1, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/1"})
	if err != nil || job1.Cluster != "entity" || job1.ClusterLease == 0 || job1.ClusterLease == s || job1.ClusterTTL != 15*time.Second || job1.Epoch != 2 {
		t.Fatalf("entity-tier grant = %+v, %v; want cluster entity, epoch 2, a lease of its own made for it (ttl 15s)", job1, err)
	}
	if kv := getKV(t, tc.entity.Client, keyspace.HoldKey("t/job/1")); kv == nil || kv.Lease != job1.ClusterLease {
		t.Fatalf("entity hold = %v; want it on the session's entity lease %x", kv, job1.ClusterLease)
	}
	if kv := getKV(t, tc.coord.Client, keyspace.HoldKey("t/job/1")); kv != nil {
		t.Fatalf("the entity-tier key is held on the coord cluster too: %v", kv)
	}

	job2, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/2", ClusterLeases: map[string]int64{"entity": job1.ClusterLease}})
	if err != nil || job2.ClusterLease != job1.ClusterLease || job2.ClusterTTL != 0 {
		t.Fatalf("second entity grant naming the lease = %+v, %v; want the same lease, no ttl (the caller renews it)", job2, err)
	}
	job2b, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/2"})
	if err != nil || job2b.Token != job2.Token || job2b.ClusterLease != job1.ClusterLease || job2b.ClusterTTL <= 0 {
		t.Fatalf("re-acquire not naming the lease = %+v, %v; want the same hold, and the lease renewed for it", job2b, err)
	}

	s2, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s2, Key: "t/job/1"}); !errors.Is(err, ErrLeak) {
		t.Fatalf("alice's other session acquiring her entity key: %v; want ErrLeak", err)
	}

	// A durable line on the entity cluster: bob waits, alice releases.
	fa, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/fifo/a"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := a.OpenSession(ctx, bob, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Grant, 1)
	errc := make(chan error, 1)
	go func() {
		g, err := a.Acquire(ctx, AcquireRequest{Caller: bob, Session: sb, Key: "t/fifo/a", Wait: 10 * time.Second})
		got <- g
		errc <- err
	}()
	waitUntil(t, "bob in the entity cluster's durable line", func() bool {
		resp, err := tc.entity.Client.Get(ctx, keyspace.QueueRange("t/fifo/a"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 1
	})
	if ok, err := a.Release(ctx, alice, s, "t/fifo/a", fa.Token); !ok || err != nil {
		t.Fatalf("release = %v, %v", ok, err)
	}
	gb := <-got
	if err := <-errc; err != nil || gb.Cluster != "entity" || gb.ClusterLease == job1.ClusterLease || gb.Token <= fa.Token {
		t.Fatalf("bob's grant after the hand-over = %+v, %v; want his own entity lease and a higher token", gb, err)
	}

	r, err := a.RenewLease(ctx, alice, s, "entity", job1.ClusterLease)
	if err != nil || r.TTL <= 0 || r.Epoch != 2 || r.Uncredited {
		t.Fatalf("renew alice's entity lease = %+v, %v; want renewed in epoch 2", r, err)
	}
	if r, err := a.RenewLease(ctx, bob, sb, "entity", job1.ClusterLease); err != nil || r.TTL != 0 {
		t.Fatalf("bob renewing alice's entity lease = %+v, %v; want TTL 0 (not his)", r, err)
	}
	if _, err := a.RenewLease(ctx, alice, s, "coord", s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("renew on the coord cluster: %v; want ErrInvalid (the session's keepalive renews it)", err)
	}

	// Bob's session ends (its coord lease revoked behind lockd's back, as
	// an expiry would): his entity lease is no longer renewed, though it
	// is still there.
	if _, err := tc.coord.Client.Revoke(ctx, clientv3.LeaseID(sb)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "bob's entity lease refused once his session is gone", func() bool {
		r, err := a.RenewLease(ctx, bob, sb, "entity", gb.ClusterLease)
		return err == nil && r.TTL == 0
	})

	if err := a.CloseSession(ctx, alice, s); err != nil {
		t.Fatal(err)
	}
	if kv := getKV(t, tc.entity.Client, keyspace.HoldKey("t/job/1")); kv != nil {
		t.Fatalf("alice's entity hold outlived her closed session: %v", kv)
	}
	if kv := getKV(t, tc.entity.Client, keyspace.ClusterSessionKey(s)); kv != nil {
		t.Fatalf("alice's entity lease record outlived her closed session: %v", kv)
	}
	if r, err := a.RenewLease(ctx, alice, s, "entity", job1.ClusterLease); err != nil || r.TTL != 0 {
		t.Fatalf("renewing a closed session's entity lease = %+v, %v; want TTL 0", r, err)
	}
}

// TestClustersBootstrappedApartDoNotShareAnEpoch: an entity cluster that
// got epoch 1 on its own (a lockd ran on it alone) and is then put behind
// one lockd with a coord cluster also at epoch 1 is sealed, saying which
// cluster has its epoch and how to advance it, and grants nothing; the
// two-person advance gives it an epoch from the counter, no other
// cluster's, and it grants again.
func TestClustersBootstrappedApartDoNotShareAnEpoch(t *testing.T) {
	tc := startTwoClustersWith(t, func(coord, entity *store.Backend) {
		for _, b := range []*store.Backend{coord, entity} {
			alone, err := New(Config{Client: b.Client, Leases: b.Leases, KV: b.KV, Bootstrap: Bootstrap{FreshStore: true}}, NewPolicy(class.NewSet(nil, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if err := alone.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			alone.Close()
		}
	})
	a, ctx := tc.a, t.Context()
	sts := a.EpochStatuses(ctx)
	if sts[0].Epoch != 1 || sts[0].Sealed || sts[1].Epoch != 1 || !sts[1].Sealed ||
		!strings.Contains(sts[1].SealedReason, "epoch 1 is cluster coord's too") || !strings.Contains(sts[1].SealedReason, "--cluster entity") {
		t.Fatalf("epoch statuses = %+v; want coord at 1, entity at 1 sealed, naming coord and how to advance entity", sts)
	}
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/1"}); !errors.Is(err, ErrSealed) {
		t.Fatalf("entity-tier acquire on the shared epoch: %v; want ErrSealed", err)
	}
	if g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/leader/1"}); err != nil || g.Epoch != 1 {
		t.Fatalf("coord-tier acquire = %+v, %v; want granted in epoch 1 (coord is not sealed)", g, err)
	}

	req, err := a.RequestEpochAdvance(ctx, op1, "entity", 1, 0, "the entity cluster was bootstrapped on its own")
	if err != nil {
		t.Fatal(err)
	}
	adv, err := a.ApproveEpochAdvance(ctx, op2, req.ID)
	if err != nil {
		t.Fatal(err)
	}
	if adv.Status.Epoch == 1 || adv.Status.Sealed || adv.Request.Cluster != "entity" {
		t.Fatalf("advance = %+v; want entity moved off epoch 1", adv)
	}
	// Grants resume after the advance's grace (every old holder fenced).
	for deadline := time.Now().Add(adv.Grace + 10*time.Second); ; time.Sleep(100 * time.Millisecond) {
		g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/1"})
		if err == nil && g.Epoch == adv.Status.Epoch {
			break
		}
		if errors.Is(err, ErrSessionNotFound) { // it lapsed meanwhile, unrenewed
			if s, err = a.OpenSession(ctx, alice, 15*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("entity-tier acquire %v after the advance's grace (%v): %+v, %v; want granted in epoch %d", adv.Grace+10*time.Second, adv.Grace, g, err, adv.Status.Epoch)
		}
	}
}

// TestARetiredLeaseIsRevokedNotReused: a holder whose deadline on a
// cluster passed counts every hold on its lease there lost; when it names
// the lease as retired, lockd revokes it (with the holds its holder no
// longer believes in) and grants on a new one, which another Acquire naming
// nothing then shares.
func TestARetiredLeaseIsRevokedNotReused(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/1"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/2",
		RetiredLeases: map[string]int64{"entity": old.ClusterLease}})
	if err != nil || g.ClusterLease == old.ClusterLease || g.ClusterTTL != 15*time.Second {
		t.Fatalf("grant naming the lease retired = %+v, %v; want a new lease, made for it", g, err)
	}
	if kv := getKV(t, tc.entity.Client, keyspace.HoldKey("t/job/1")); kv != nil {
		t.Fatalf("the hold on the retired lease outlived it: %v", kv)
	}
	if ttl, err := tc.entity.Client.TimeToLive(ctx, clientv3.LeaseID(old.ClusterLease)); err != nil || ttl.TTL != -1 {
		t.Fatalf("the retired lease on the entity cluster: %+v, %v; want it revoked (TTL -1)", ttl, err)
	}
	if r, err := a.RenewLease(ctx, alice, s, "entity", old.ClusterLease); err != nil || r.TTL != 0 {
		t.Fatalf("renewing the retired lease = %+v, %v; want TTL 0 (revoked)", r, err)
	}
	g3, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/3"})
	if err != nil || g3.ClusterLease != g.ClusterLease {
		t.Fatalf("a grant naming no lease = %+v, %v; want the new lease %x shared", g3, err, g.ClusterLease)
	}
}

// TestLosingTheEntityClusterFailsOnlyItsLeaseRenewal: with the entity
// cluster cut off from lockd, renewing a session's entity lease fails (its
// holder's deadline there runs out), while the session itself is renewed
// by its keepalive and coord-tier keys are still granted.
func TestLosingTheEntityClusterFailsOnlyItsLeaseRenewal(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	job, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/1"})
	if err != nil {
		t.Fatal(err)
	}

	tc.proxy.Stall(tcpproxy.Both)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r, err := a.RenewLease(rctx, alice, s, "entity", job.ClusterLease); err == nil && !r.Uncredited {
		t.Fatalf("renewing the entity lease with the entity cluster cut off = %+v; want an error or uncredited", r)
	}
	ka, err := a.OpenKeepAlive(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.Close()
	if local, err := ka.Send(ctx, s); err != nil || local != nil {
		t.Fatalf("keepalive send: %v, %v", local, err)
	}
	if ans, err := ka.Recv(); err != nil || ans.TTL <= 0 || ans.Uncredited {
		t.Fatalf("session keepalive with the entity cluster cut off = %+v, %v; want renewed", ans, err)
	}
	if g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/leader/x"}); err != nil || g.Cluster != "coord" {
		t.Fatalf("coord-tier acquire with the entity cluster cut off = %+v, %v; want granted", g, err)
	}
	if _, err := a.Acquire(rctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/2"}); !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("entity-tier acquire with the entity cluster cut off: %v; want ErrUnavailable", err)
	}

	tc.proxy.Resume()
	waitUntil(t, "the entity lease renewed again", func() bool {
		r, err := a.RenewLease(ctx, alice, s, "entity", job.ClusterLease)
		return err == nil && r.TTL > 0 && !r.Uncredited
	})
}

func getKV(t *testing.T, cli *clientv3.Client, key string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestForceReleaseRevokeSessionOfAnEntityHoldEndsTheSessionOnEveryCluster:
// an operator who force-releases a hold on the entity cluster with
// --revoke-session ends the holder's session, not only the lease that
// stands for it there: its coord-tier holds go too, and its lease on the
// entity cluster with every hold on it. Inspect names the session the
// entity lease stands for, and the holder is told which hold was forced,
// by whom, at its next renewal of the lease.
func TestForceReleaseRevokeSessionOfAnEntityHoldEndsTheSessionOnEveryCluster(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"t/leader/x", "t/job/1", "t/job/2"} {
		if _, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	in, err := a.Inspect(ctx, op1, "t/job/1")
	if err != nil {
		t.Fatal(err)
	}
	lease := in.Hold.Session
	if in.Cluster != "entity" || lease == s || in.Hold.HomeSession != s {
		t.Fatalf("inspect of the entity hold = cluster %q, session %d, home %d; want cluster entity, the entity lease, home session %d", in.Cluster, lease, in.Hold.HomeSession, s)
	}
	// Another arbiter (or this one after a restart) knows the lease only
	// from its record on the entity cluster.
	tc.entC.forgetLease(lease)
	if in, err := a.Inspect(ctx, op1, "t/job/1"); err != nil || in.Hold.HomeSession != s {
		t.Fatalf("inspect with the lease not in memory: home %d, %v; want %d, read from its record", in.Hold.HomeSession, err, s)
	}

	fr, err := a.RequestForceRelease(ctx, op1, "t/job/1", "INC-9: wedged", true)
	if err != nil {
		t.Fatal(err)
	}
	tc.entC.forgetLease(lease)
	if _, err := a.ApproveForceRelease(ctx, op2, fr.ID); err != nil {
		t.Fatal(err)
	}

	for _, l := range []struct {
		cli  *clientv3.Client
		id   int64
		what string
	}{{tc.coord.Client, s, "the session (its coord lease)"}, {tc.entity.Client, lease, "its entity lease"}} {
		if ttl, err := l.cli.TimeToLive(ctx, clientv3.LeaseID(l.id)); err != nil || ttl.TTL != -1 {
			t.Fatalf("%s after --revoke-session: %+v, %v; want revoked (TTL -1)", l.what, ttl, err)
		}
	}
	for _, h := range []struct {
		cli *clientv3.Client
		key string
	}{{tc.coord.Client, "t/leader/x"}, {tc.entity.Client, "t/job/1"}, {tc.entity.Client, "t/job/2"}} {
		if kv := getKV(t, h.cli, keyspace.HoldKey(h.key)); kv != nil {
			t.Fatalf("hold %s outlived --revoke-session: %v", h.key, kv)
		}
	}
	r, err := a.RenewLease(ctx, alice, s, "entity", lease)
	if err != nil || r.TTL != 0 || len(r.Removed) != 1 || r.Removed[0].Key != "t/job/1" || r.Removed[0].Approver != op2.String() {
		t.Fatalf("renewing the entity lease after the force-release = %+v, %v; want TTL 0 and the forced hold named with its approver", r, err)
	}
	// The coord cluster holds a record of the revoke, so its history
	// records t/leader/x forced by the operators, not expired.
	kv := getKV(t, tc.coord.Client, keyspace.ForceRecordPrefix+fr.ID)
	if kv == nil {
		t.Fatal("no record of the revoke on the coord cluster")
	}
	f, err := keyspace.DecodeForce(kv.Value)
	if err != nil || !f.RevokeOnly || !f.RevokeSession || f.Session != s || f.Approver != op2.String() || f.Reason != "INC-9: wedged" {
		t.Fatalf("the coord cluster's record of the revoke = %+v, %v; want revoke-only, of session %d, approved by op2 with the reason", f, err, s)
	}
}

// TestClosingASessionMarksItsLeaseRecordsClosing: closing a session marks
// its lease record on every other cluster closing before revoking the
// lease, so the history records the holds there closed, not expired.
func TestClosingASessionMarksItsLeaseRecordsClosing(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: "t/job/1"})
	if err != nil {
		t.Fatal(err)
	}
	sk := keyspace.ClusterSessionKey(s)
	from := getKV(t, tc.entity.Client, sk).ModRevision
	if err := a.CloseSession(ctx, alice, s); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for resp := range tc.entity.Client.Watch(wctx, sk, clientv3.WithRev(from+1), clientv3.WithPrevKV()) {
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypeDelete {
				continue
			}
			rec, err := keyspace.DecodeSession(ev.PrevKv.Value)
			if err != nil || !rec.Closing || ev.PrevKv.Lease != g.ClusterLease {
				t.Fatalf("the entity lease record as it was deleted = %+v (lease %x), %v; want it marked closing, on lease %x", rec, ev.PrevKv.Lease, err, g.ClusterLease)
			}
			return
		}
	}
	t.Fatal("the entity lease record was not deleted within 5s of the close")
}
