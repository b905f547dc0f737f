package arbiter_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Regression tests for the arbiter findings of the safety review: each is
// named after the behaviour it holds the arbiter to.

// member is an embedded etcd member with fixed URLs, so that a member
// rebuilt in an empty dir with the same name, URLs and token gets the same
// cluster ID, as a cluster rebuilt from its manifests does.
type member struct {
	name, client, peer string
}

func newMember(t *testing.T) member {
	return member{name: "m", client: "http://" + lockdtest.FreeAddr(t), peer: "http://" + lockdtest.FreeAddr(t)}
}

func (m member) start(t *testing.T, dir string) *store.Backend {
	t.Helper()
	b, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, Name: m.name, ClientURL: m.client, PeerURL: m.peer})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func external(t *testing.T, endpoints ...string) *store.Backend {
	t.Helper()
	b, err := store.ConnectExternal(store.ExternalConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// grantTokens takes key n times as Alice and returns the tokens.
func grantTokens(t *testing.T, env *lockdtest.Env, key string, n int) []uint64 {
	t.Helper()
	alice, _ := env.Raw(t, lockdtest.Alice)
	sid := openSession(t, alice, 15*time.Second)
	var toks []uint64
	for range n {
		g, err := acquire(t.Context(), alice, sid, key, "std", 0)
		if err != nil {
			t.Fatalf("grant: %v", err)
		}
		toks = append(toks, g.GetToken().GetValue())
		if _, err := alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: key, Token: g.GetToken().GetValue()}); err != nil {
			t.Fatal(err)
		}
	}
	return toks
}

// TestRebuiltEmptyStoreIsSealedNotEpochOne: an external store rebuilt
// empty (same cluster ID, revisions from the start) has no epoch record.
// lockd must seal, and issue no token at all (before: it created epoch 1
// and re-issued every earlier token value).
func TestRebuiltEmptyStoreIsSealedNotEpochOne(t *testing.T) {
	m := newMember(t)
	b1 := m.start(t, filepath.Join(t.TempDir(), "before"))
	env1 := lockdtest.Start(t, lockdtest.Options{Backend: b1})
	earlier := map[uint64]bool{}
	for _, tok := range grantTokens(t, env1, "t/rebuilt", 20) {
		earlier[tok] = true
	}
	env1.Stop()
	b1.Close()

	b2 := m.start(t, filepath.Join(t.TempDir(), "rebuilt"))
	t.Cleanup(b2.Close)
	env2 := lockdtest.Start(t, lockdtest.Options{Backend: external(t, m.client)})
	alice, _ := env2.Raw(t, lockdtest.Alice)
	sid := openSession(t, alice, 15*time.Second)
	reused := 0
	for range 20 {
		g, err := acquire(t.Context(), alice, sid, "t/rebuilt", "std", 0)
		if err == nil {
			if earlier[g.GetToken().GetValue()] {
				reused++
			}
			_, _ = alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: "t/rebuilt", Token: g.GetToken().GetValue()})
			continue
		}
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no epoch record") {
			t.Fatalf("grant on a rebuilt store: %v; want FailedPrecondition, sealed, no epoch record", err)
		}
	}
	if reused > 0 || !env2.Arbiter.Sealed() {
		t.Fatalf("a store rebuilt empty was served unsealed: %d of 20 earlier tokens issued again", reused)
	}
}

// TestRebuiltStoreServesOnlyAfterOperatorsInitialiseAboveEveryEarlierEpoch:
// a store rebuilt empty is usable again only when two operators initialise
// the epoch at a number they state, above every epoch lockd remembers (its
// state file); its first tokens are above every earlier token.
func TestRebuiltStoreServesOnlyAfterOperatorsInitialiseAboveEveryEarlierEpoch(t *testing.T) {
	t.Parallel() // waits out the grace
	state := filepath.Join(t.TempDir(), "epoch-state.json")
	m := newMember(t)
	b1 := m.start(t, filepath.Join(t.TempDir(), "before"))
	env1 := lockdtest.Start(t, lockdtest.Options{Backend: b1, StateFile: state})
	earlier := grantTokens(t, env1, "t/init", 5)
	env1.Stop()
	b1.Close()

	b2 := m.start(t, filepath.Join(t.TempDir(), "rebuilt"))
	t.Cleanup(b2.Close)
	env2 := lockdtest.Start(t, lockdtest.Options{Backend: external(t, m.client), StateFile: state})
	_, admin := env2.Raw(t, lockdtest.Operator)
	_, admin2 := env2.Raw(t, lockdtest.Operator2)
	st, err := admin.EpochStatus(t.Context(), &lockv1.EpochStatusRequest{})
	if err != nil || !st.GetSealed() || !st.GetRecordMissing() || st.GetHighestEpoch() != 1 {
		t.Fatalf("epoch status of a rebuilt store = %v, %v; want sealed, record missing, highest epoch 1", st, err)
	}
	for _, bad := range []*lockv1.RequestEpochAdvanceRequest{
		{FromEpoch: 0, Reason: "rebuilt"},             // the target must be stated
		{FromEpoch: 0, ToEpoch: 1, Reason: "rebuilt"}, // not above epoch 1, which was served
	} {
		if _, err := admin.RequestEpochAdvance(t.Context(), bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("initialise %v: %v; want InvalidArgument", bad, err)
		}
	}
	req, err := admin.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: 0, ToEpoch: 2, Reason: "rebuilt"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ApproveEpochAdvance(t.Context(), &lockv1.ApproveEpochAdvanceRequest{Id: req.GetId()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("self-approved initialise: %v", err)
	}
	adv, err := admin2.ApproveEpochAdvance(t.Context(), &lockv1.ApproveEpochAdvanceRequest{Id: req.GetId()})
	if err != nil || adv.GetEpoch() != 2 {
		t.Fatalf("approve initialise: %v, %v", adv, err)
	}
	if env2.Arbiter.Sealed() {
		t.Fatal("still sealed after the initialise")
	}
	alice, _ := env2.Raw(t, lockdtest.Alice)
	sid := openSession(t, alice, 15*time.Second)
	stop := keepRenewing(t, alice, sid)
	g, err := acquire(t.Context(), alice, sid, "t/init", "std", 2*time.Minute)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range earlier {
		if g.GetToken().GetValue() <= tok {
			t.Fatalf("first token %d after the rebuild is not above the earlier %d", g.GetToken().GetValue(), tok)
		}
	}
}

// TestEmbeddedCreatesTheFirstEpochOnlyOnAnEmptyDataDir: the embedded
// default creates its first epoch on an empty data dir; the same dir later
// without its record is sealed (before: epoch 1 was created again).
func TestEmbeddedCreatesTheFirstEpochOnlyOnAnEmptyDataDir(t *testing.T) {
	dir := t.TempDir()
	m := newMember(t)
	b1 := m.start(t, dir)
	env1 := lockdtest.Start(t, lockdtest.Options{Backend: b1})
	if env1.Arbiter.Sealed() {
		t.Fatal("a fresh embedded store is sealed")
	}
	grantTokens(t, env1, "t/embedded", 3)
	if _, err := b1.Client.Delete(t.Context(), "/sys/epoch"); err != nil {
		t.Fatal(err)
	}
	env1.Stop()
	b1.Close()
	b2 := m.start(t, dir)
	t.Cleanup(b2.Close)
	env2 := lockdtest.Start(t, lockdtest.Options{Backend: b2})
	if !env2.Arbiter.Sealed() {
		t.Fatal("an embedded store that lost its epoch record was served unsealed")
	}
}

// saveSnapshot writes a snapshot of the embedded store b to path.
func saveSnapshot(t *testing.T, b *store.Backend, path string) {
	t.Helper()
	ext := external(t, b.Embedded.Config().AdvertiseClientUrls[0].String())
	rc, err := ext.Client.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// restoredCopy restores a snapshot of b with a new cluster token: a store
// with another cluster ID and the same keys.
func restoredCopy(t *testing.T, b *store.Backend) member {
	t.Helper()
	dir := t.TempDir()
	snap := filepath.Join(dir, "snap.db")
	saveSnapshot(t, b, snap)
	m := member{name: "copy", client: "http://" + lockdtest.FreeAddr(t), peer: "http://" + lockdtest.FreeAddr(t)}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: snap, Name: m.name, OutputDataDir: filepath.Join(dir, "data"), PeerURLs: []string{m.peer},
		InitialCluster: m.name + "=" + m.peer, InitialClusterToken: "copy-" + t.Name(),
	})
	if err != nil {
		t.Fatal(err)
	}
	b2 := m.start(t, filepath.Join(dir, "data"))
	t.Cleanup(b2.Close)
	return m
}

// TestSealSticksUntilAHigherEpochBoundToTheStore: lockd's endpoint list
// names the original cluster and a restored copy of it (a DNS flip during a
// restore). Once a response from the copy sealed the arbiter, no later
// read from the original may unseal it (before: the next refresh that
// happened to match cleared the seal).
func TestSealSticksUntilAHigherEpochBoundToTheStore(t *testing.T) {
	orig := lockdtest.StartEmbedded(t, t.TempDir())
	t.Cleanup(orig.Close)
	env1 := lockdtest.Start(t, lockdtest.Options{Backend: orig})
	grantTokens(t, env1, "t/mixed", 2)
	cp := restoredCopy(t, orig)

	mixed := external(t, orig.Embedded.Config().AdvertiseClientUrls[0].String(), cp.client)
	env := lockdtest.Start(t, lockdtest.Options{Backend: mixed})
	lockdtest.WaitFor(t, 15*time.Second, "a response from the restored copy sealed the arbiter", env.Arbiter.Sealed)
	deadline := time.Now().Add(8 * time.Second) // several epoch refreshes, from both clusters
	for time.Now().Before(deadline) {
		if !env.Arbiter.Sealed() {
			t.Fatal("the seal was cleared by a later read, without an epoch advance")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKeepAliveNotCreditedWithAStaleEpoch: an arbiter whose epoch reads
// fail while keepalives still reach etcd must not keep crediting holders
// of an epoch that has since advanced (before: their keepalive answers
// carried the old epoch for as long as the reads failed, and they held on
// past the advance's grace). The holder must lose the lock within its TTL
// plus the epoch-age bound.
func TestKeepAliveNotCreditedWithAStaleEpoch(t *testing.T) {
	b := lockdtest.StartEmbedded(t, t.TempDir())
	t.Cleanup(b.Close)
	direct := lockdtest.Start(t, lockdtest.Options{Backend: b}) // the other arbiter
	proxy, err := tcpproxy.Start(strings.TrimPrefix(b.Embedded.Config().AdvertiseClientUrls[0].String(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	kv := external(t, "http://"+proxy.Addr())
	// This arbiter reads etcd through the proxy; its keepalives go straight
	// to etcd's lease server.
	slow := lockdtest.Start(t, lockdtest.Options{Backend: &store.Backend{Client: kv.Client, Leases: b.Leases}})
	c := lockdtest.ClientAt(t, slow.Addr, lockdtest.Alice)
	l, err := c.Acquire(t.Context(), "t/fast/stale-epoch", "fast", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stall(tcpproxy.Both) // its epoch reads now fail
	time.Sleep(500 * time.Millisecond)
	direct.AdvanceEpoch(t, l.Epoch(), "test: advance while an arbiter cannot read the epoch")
	advanced := time.Now()
	select {
	case <-l.Done():
		t.Logf("lost with %v %s after the advance", l.Err(), time.Since(advanced).Round(time.Millisecond))
	case <-time.After(5*time.Second + 3*time.Second + 2*time.Second): // TTL + epoch-age bound + slack
		t.Fatalf("the holder still holds %s after the epoch advanced (CanStart %v): its keepalives were credited with a stale epoch",
			time.Since(advanced).Round(time.Millisecond), l.CanStart())
	}
}

// TestHolderRetryIsAnsweredWhileOthersQueue: the holder's own idempotent
// re-acquire (same session) returns its hold even while other waiters are
// queued for the key (before: it was refused as held by another session).
func TestHolderRetryIsAnsweredWhileOthersQueue(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	sa := openSession(t, alice, 15*time.Second)
	sb := openSession(t, bob, 15*time.Second)
	first, err := acquire(t.Context(), alice, sa, "t/retry", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _ = acquire(ctx, bob, sb, "t/retry", "std", 10*time.Second) }()
	lockdtest.WaitFor(t, 5*time.Second, "bob queued", func() bool { return env.Arbiter.QueueLen("t/retry") == 1 })
	again, err := acquire(t.Context(), alice, sa, "t/retry", "std", 0)
	if err != nil {
		t.Fatalf("the holder's retry while bob waits: %v; want its own hold", err)
	}
	if again.GetToken().GetValue() != first.GetToken().GetValue() {
		t.Fatalf("retry token %d, hold token %d", again.GetToken().GetValue(), first.GetToken().GetValue())
	}
}

// TestReleaseIsNotAnExistenceOracle: an identity without a grant for a key
// gets the one denial from Release whether the key is held or not, before
// anything is read (before: held answered FailedPrecondition, free answered
// OK).
func TestReleaseIsNotAnExistenceOracle(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	carol, _ := env.Raw(t, lockdtest.Carol) // granted t/carol/ only
	sa := openSession(t, alice, 15*time.Second)
	if _, err := acquire(t.Context(), alice, sa, "t/secret", "std", 0); err != nil {
		t.Fatal(err)
	}
	sc := openSession(t, carol, 15*time.Second)
	var msgs []string
	for _, key := range []string{"t/secret", "t/nothing-here"} {
		_, err := carol.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sc, Key: key, Token: 1<<48 | 7})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("release of %s without a grant: %v; want PermissionDenied", key, err)
		}
		msgs = append(msgs, status.Convert(err).Message())
	}
	if msgs[0] != msgs[1] {
		t.Fatalf("denials differ for a held and a free key: %q vs %q", msgs[0], msgs[1])
	}
}

// TestListHoldsRevealsNothingOutsideTheCallersGrants: ListHolds authorizes
// the prefix before reading, and its truncated flag counts only holds the
// caller may see (before: it read first, and truncated revealed holds the
// caller could not see).
func TestListHoldsRevealsNothingOutsideTheCallersGrants(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	carol, _ := env.Raw(t, lockdtest.Carol) // granted t/carol/ only
	sa := openSession(t, alice, 15*time.Second)
	for _, k := range []string{"t/a", "t/b", "t/c"} {
		if _, err := acquire(t.Context(), alice, sa, k, "std", 0); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := carol.ListHolds(t.Context(), &lockv1.ListHoldsRequest{Prefix: "t/", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetHolds()) != 0 || resp.GetTruncated() {
		t.Fatalf("carol listing t/ sees %d holds, truncated %v; want none and false", len(resp.GetHolds()), resp.GetTruncated())
	}
	var msgs []string
	for _, prefix := range []string{"other/", "no-such-namespace/"} {
		_, err := carol.ListHolds(t.Context(), &lockv1.ListHoldsRequest{Prefix: prefix})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("carol listing %s: %v; want PermissionDenied", prefix, err)
		}
		msgs = append(msgs, status.Convert(err).Message())
	}
	if msgs[0] != msgs[1] {
		t.Fatalf("denials differ for an existing and a missing namespace: %q vs %q", msgs[0], msgs[1])
	}
}

// TestQueuedWaiterIsNotGrantedAfterItsGrantIsRevoked: a class reload that
// removes a waiting identity's grant means it is refused, not handed the
// key when the holder releases (before: the queued waiter was granted).
func TestQueuedWaiterIsNotGrantedAfterItsGrantIsRevoked(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	sa := openSession(t, alice, 15*time.Second)
	sb := openSession(t, bob, 15*time.Second)
	held, err := acquire(t.Context(), alice, sa, "t/revoked", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	bobErr := make(chan error, 1)
	go func() {
		_, err := acquire(t.Context(), bob, sb, "t/revoked", "std", 10*time.Second)
		bobErr <- err
	}()
	lockdtest.WaitFor(t, 5*time.Second, "bob queued", func() bool { return env.Arbiter.QueueLen("t/revoked") == 1 })
	env.Arbiter.SetPolicy(arbiter.NewPolicy(classesWithout(t, "name: bob, namespace: t")))
	if _, err := alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sa, Key: "t/revoked", Token: held.GetToken().GetValue()}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-bobErr:
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("bob, whose grant was revoked while he waited: %v; want PermissionDenied", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bob's acquire did not end")
	}
	if got, _ := env.Backend.Client.Get(t.Context(), "/l/t/revoked"); len(got.Kvs) != 0 {
		t.Fatal("the key was handed to a waiter whose grant was revoked")
	}
}

// classesWithout is lockdtest's class set minus the LockGrant whose
// metadata contains meta (e.g. "name: bob, namespace: t").
func classesWithout(t *testing.T, meta string) *class.Set {
	t.Helper()
	dir := t.TempDir()
	lockdtest.WriteClasses(t, dir)
	p := filepath.Join(dir, "t", "classes.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "---\n")
	kept := docs[:0]
	for _, d := range docs {
		if !strings.Contains(d, meta) {
			kept = append(kept, d)
		}
	}
	if len(kept) == len(docs) {
		t.Fatalf("no document with %q", meta)
	}
	if err := os.WriteFile(p, []byte(strings.Join(kept, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := class.LoadDir(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestFollowersListAgainWhenTheStoreIsSwapped: lockd's endpoint moves to
// a restored copy whose revisions are lower than the ones lockd was
// watching from. After the epoch advance its watches of force-release
// records must start over on the new store: a holder renewing through it
// is told of a force-release another arbiter approved (without re-listing,
// the watch waited for revisions the new store had not reached).
func TestFollowersListAgainWhenTheStoreIsSwapped(t *testing.T) {
	t.Parallel() // waits out the grace
	orig := lockdtest.StartEmbedded(t, t.TempDir())
	t.Cleanup(orig.Close)
	origAddr := strings.TrimPrefix(orig.Embedded.Config().AdvertiseClientUrls[0].String(), "http://")
	env1 := lockdtest.Start(t, lockdtest.Options{Backend: orig})
	cp := restoredCopy(t, orig)         // taken now, at a low revision
	grantTokens(t, env1, "t/busy", 100) // the original moves far ahead

	proxy, err := tcpproxy.Start(origAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	flipping := lockdtest.Start(t, lockdtest.Options{Backend: external(t, "http://"+proxy.Addr())})
	time.Sleep(2 * time.Second) // its watches run on the original, from its high revision
	proxy.Retarget(strings.TrimPrefix(cp.client, "http://"))
	proxy.Reset()
	lockdtest.WaitFor(t, 15*time.Second, "sealed on the restored copy", flipping.Arbiter.Sealed)
	flipping.AdvanceEpoch(t, 1, "test: restored")

	direct := lockdtest.Start(t, lockdtest.Options{Backend: external(t, cp.client)}) // approves the force
	c := lockdtest.ClientAt(t, flipping.Addr, lockdtest.Alice)
	fenced := make(chan error, 1)
	var l *client.Lock
	lockdtest.WaitFor(t, 60*time.Second, "a grant after the advance's grace", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		l, err = c.Acquire(ctx, "t/swapped", "std", func(l *client.Lock) { fenced <- l.Err() })
		return err == nil
	})
	_, op1 := direct.Raw(t, lockdtest.Operator)
	_, op2 := direct.Raw(t, lockdtest.Operator2)
	req, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/swapped", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-fenced:
		if !errors.Is(err, client.ErrForced) {
			t.Fatalf("lost with %v, want a force-release", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the holder renewing through the arbiter that moved stores was never told of the force-release (CanStart %v)", l.CanStart())
	}
}
