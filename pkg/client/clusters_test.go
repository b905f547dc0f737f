package client_test

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// splitEnv is a lockd fronting two etcd clusters: the coord cluster (the
// sessions, and class "leader" of tier coord, keys t/leader/...) and an
// entity cluster serving tier entity (every other class), which lockd
// reaches through a proxy the test can stall.
type splitEnv struct {
	env    *lockdtest.Env
	entity *store.Backend // direct, not through the proxy
	proxy  *tcpproxy.Proxy
}

func startSplit(t *testing.T, audit bool) *splitEnv {
	t.Helper()
	dir := t.TempDir()
	ep := lockdtest.FreeAddr(t)
	entity, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: filepath.Join(dir, "entity"), ClientURL: "http://" + ep,
		PeerURL: "http://" + lockdtest.FreeAddr(t), ClusterToken: "entity"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(entity.Close)
	proxy := proxyTo(t, ep)
	viaProxy, err := store.ConnectExternal(store.ExternalConfig{Endpoints: []string{"http://" + proxy.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaProxy.Close)
	viaProxy.Fresh = true // nothing was ever stored in it: lockd gives it its first epoch
	classes := maps.Clone(lockdtest.Classes)
	classes["t/leader.yaml"] = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: leader, namespace: t}
spec: {keys: ["t/leader/"], nestedIn: [std], purpose: correctness, enforcement: fenced, ttl: 5s, tier: coord, resource: test-db}
`
	env := lockdtest.Start(t, lockdtest.Options{Classes: classes, RequestTimeout: 2 * time.Second, Audit: audit,
		Clusters: []lockd.ClusterConfig{{Name: "entity", Tiers: []string{"entity"}, Backend: viaProxy}}})
	return &splitEnv{env: env, entity: entity, proxy: proxy}
}

// holdGoneAt reports when the hold of key is deleted on the cluster cli
// reaches.
func holdGoneAt(t *testing.T, cli *clientv3.Client, key string) <-chan time.Time {
	t.Helper()
	gone := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	wch := cli.Watch(ctx, "/l/"+key, clientv3.WithFilterPut())
	go func() {
		for resp := range wch {
			if len(resp.Events) > 0 {
				gone <- time.Now()
				return
			}
		}
	}()
	return gone
}

type fenceAt struct {
	at  time.Time
	err error
}

func fencedInto(ch chan fenceAt) func(*client.Lock) {
	return func(l *client.Lock) { ch <- fenceAt{time.Now(), l.Err()} }
}

// TestAPartitionFromTheEntityClusterFencesOnlyTheHoldThere: one session
// holds a coord-tier key (on the coord cluster) and an entity-tier key (on
// its lease on the entity cluster). When lockd loses the entity cluster,
// the entity lock stops being safe at the first unanswered renewal and is
// fenced at its own deadline, before the entity cluster expires the hold;
// the coord lock stays safe and keeps being renewed throughout. When the
// cluster is back, the same session locks entity keys again, on a new
// lease (the old one given up, never reused).
func TestAPartitionFromTheEntityClusterFencesOnlyTheHoldThere(t *testing.T) {
	sp := startSplit(t, false)
	c := sp.env.Client(t, lockdtest.Alice)
	ctx := t.Context()

	leaderFenced, entityFenced := make(chan fenceAt, 1), make(chan fenceAt, 1)
	leader, err := c.Acquire(ctx, "t/leader/a", "", fencedInto(leaderFenced))
	if err != nil {
		t.Fatal(err)
	}
	ent, err := c.Acquire(ctx, "t/fast/b", "", fencedInto(entityFenced))
	if err != nil {
		t.Fatal(err)
	}
	if leader.Epoch() == ent.Epoch() {
		t.Fatalf("both holds have epoch %d; the two clusters must never share an epoch", ent.Epoch())
	}
	if !leader.CanStart() || !ent.CanStart() {
		t.Fatal("fresh locks cannot start")
	}
	// The entity hold is on the entity cluster, not the coord one.
	if !holdExistsOn(t, sp.entity.Client, "t/fast/b") || holdExistsOn(t, sp.env.Backend.Client, "t/fast/b") {
		t.Fatal("t/fast/b is not held on the entity cluster alone")
	}
	// Both renew: after two TTLs both are still safe.
	time.Sleep(6 * time.Second)
	if !leader.CanStart() || !ent.CanStart() {
		t.Fatalf("after a TTL of renewals: leader %v, entity %v; both must be safe", leader.State(), ent.State())
	}

	gone := holdGoneAt(t, sp.entity.Client, "t/fast/b")
	sp.proxy.Stall(tcpproxy.Both)
	stalled := time.Now()
	lockdtest.WaitFor(t, 4*time.Second, "the entity lock to stop being safe", func() bool { return !ent.CanStart() })

	var f fenceAt
	select {
	case f = <-entityFenced:
	case <-time.After(10 * time.Second):
		t.Fatal("the entity lock was not fenced within 10s of losing its cluster")
	}
	if !errors.Is(f.err, client.ErrDeadline) {
		t.Fatalf("entity lock ended with %v, want ErrDeadline", f.err)
	}
	if !leader.CanStart() || leader.RemainingTTL() < 2*time.Second {
		t.Fatalf("the coord lock at the entity fence: state %v, remaining %v; it must stay safe and renewed", leader.State(), leader.RemainingTTL())
	}
	t.Logf("entity lock fenced %v after the stall", f.at.Sub(stalled).Round(time.Millisecond))

	// The store expires the entity hold only after the holder's fence.
	var expired time.Time
	select {
	case expired = <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the entity cluster did not expire the hold within 10s of the fence")
	}
	if !f.at.Before(expired) {
		t.Fatalf("fenced at %v, the entity cluster expired the hold at %v: the holder must stop first", f.at, expired)
	}
	t.Logf("the hold expired on the entity cluster %v after the fence", expired.Sub(f.at).Round(time.Millisecond))
	// Through all of it the coord lock stayed safe.
	time.Sleep(2 * time.Second)
	select {
	case lf := <-leaderFenced:
		t.Fatalf("the coord lock was fenced (%v) by the entity cluster's loss", lf.err)
	default:
	}
	if !leader.CanStart() {
		t.Fatalf("coord lock is %v after the entity cluster's loss", leader.State())
	}

	sp.proxy.Resume()
	again, err := c.Acquire(ctx, "t/fast/b", "", func(*client.Lock) {}, client.Wait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() <= ent.Token() {
		t.Fatalf("re-granted with token %d, not above the first %d", again.Token(), ent.Token())
	}
	time.Sleep(4 * time.Second)
	if !again.CanStart() || !leader.CanStart() {
		t.Fatalf("after the cluster came back: entity %v, coord %v; both must be safe", again.State(), leader.State())
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leader.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func holdExistsOn(t *testing.T, cli *clientv3.Client, key string) bool {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/l/"+key)
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) == 1
}

// TestTheHistoryHasTheGrantsOfEveryCluster: with the tiers split, lockd
// tails each cluster into the one history: a coord-tier and an
// entity-tier lock's grant and release are there, each with its own
// cluster's ID and epoch.
func TestTheHistoryHasTheGrantsOfEveryCluster(t *testing.T) {
	sp := startSplit(t, true)
	c := sp.env.Client(t, lockdtest.Alice)
	ctx := t.Context()
	for _, key := range []string{"t/leader/a", "t/fast/b"} {
		l, err := c.Acquire(ctx, key, "", func(*client.Lock) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clusterID := func(cli *clientv3.Client) uint64 {
		resp, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.ClusterId
	}
	want := map[string]uint64{"t/leader/a": clusterID(sp.env.Backend.Client), "t/fast/b": clusterID(sp.entity.Client)}
	lock, _ := sp.env.Raw(t, lockdtest.Alice)
	var rows []*lockv1.HistoryEvent
	lockdtest.WaitFor(t, 20*time.Second, "both keys' grant and release in the history", func() bool {
		resp, err := lock.History(ctx, &lockv1.HistoryRequest{Key: "t/", Kinds: []string{"grant", "release"}})
		rows = resp.GetEvents()
		return err == nil && len(rows) == 4
	})
	epochs := map[string]uint32{}
	for _, r := range rows {
		if r.GetClusterId() != want[r.GetKey()] {
			t.Fatalf("history row %v: cluster %x; want %x, the cluster %s lives on", r, r.GetClusterId(), want[r.GetKey()], r.GetKey())
		}
		epochs[r.GetKey()] = r.GetEpoch()
	}
	if epochs["t/leader/a"] == epochs["t/fast/b"] {
		t.Fatalf("both clusters' rows are of epoch %d; no two clusters share an epoch", epochs["t/fast/b"])
	}
}

// TestAnUnknownAcquireOnTheEntityClusterLeavesTheCoordHoldsAlone: a
// holder of a coord key (t/leader/, 5s) whose acquire of an entity key of
// the same TTL (t/fast/, one session) times out while the entity cluster
// is unreachable cannot learn whether it left a hold there. It gives up
// the session's lease on the entity cluster, not the session: the coord
// hold stays safe (the release gate found it fenced by an entity outage:
// the whole session used to end, ErrSessionEnded).
func TestAnUnknownAcquireOnTheEntityClusterLeavesTheCoordHoldsAlone(t *testing.T) {
	sp := startSplit(t, false)
	c := sp.env.Client(t, lockdtest.Alice)
	ctx := t.Context()
	leaderFenced := make(chan fenceAt, 1)
	leader, err := c.Acquire(ctx, "t/leader/a", "", fencedInto(leaderFenced))
	if err != nil {
		t.Fatal(err)
	}
	ent, err := c.Acquire(ctx, "t/fast/b", "", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := ent.Release(ctx); err != nil {
		t.Fatal(err)
	}
	sp.proxy.Stall(tcpproxy.Both)
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = c.Acquire(actx, "t/fast/b", "", func(*client.Lock) {})
	cancel()
	if err == nil || client.Definite(err) {
		t.Fatalf("an acquire on an unreachable cluster: %v; want an unknown outcome", err)
	}
	// The client resolves it for a TTL, then gives up; wait past that.
	time.Sleep(10 * time.Second)
	select {
	case f := <-leaderFenced:
		t.Fatalf("the coord hold was fenced (%v) by an unknown acquire on the entity cluster", f.err)
	default:
	}
	if !leader.CanStart() || leader.Err() != nil {
		t.Fatalf("the coord hold is %v (%v); it must stay safe", leader.State(), leader.Err())
	}
	sp.proxy.Resume()
	again, err := c.Acquire(ctx, "t/fast/b", "", func(*client.Lock) {}, client.Wait(15*time.Second))
	if err != nil {
		t.Fatalf("the entity key after the cluster came back: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leader.Release(ctx); err != nil {
		t.Fatalf("the coord hold's release: %v", err)
	}
}
