package arbiter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/childproc"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

const openAfter = 2 * time.Second

// outage is lockd on a three-member etcd cluster whose quorum a test can
// take away (stop two members) and give back.
type outage struct {
	cluster *lockdtest.Cluster
	backend *store.Backend
	env     *lockdtest.Env
}

func startOutage(t *testing.T, o lockdtest.Options) *outage {
	t.Helper()
	c := lockdtest.StartCluster(t, t.TempDir())
	b := external(t, c.Endpoints()...)
	o.Backend, o.FreshStore, o.Classes = b, true, lockdtest.OpenClasses()
	o.OpenAfter, o.RequestTimeout = openAfter, time.Second
	return &outage{cluster: c, backend: b, env: lockdtest.Start(t, o)}
}

// loseQuorum stops two members and waits for the open posture; it returns
// when the members stopped.
func (o *outage) loseQuorum(t *testing.T) time.Time {
	t.Helper()
	stopped := time.Now()
	o.cluster.Stop(1)
	o.cluster.Stop(2)
	lockdtest.WaitFor(t, 30*time.Second, "the open posture", func() bool { return o.env.Arbiter.Posture() == "open" })
	return stopped
}

func (o *outage) regainQuorum(t *testing.T) {
	t.Helper()
	o.cluster.Restart(1, 2)
	lockdtest.WaitFor(t, 60*time.Second, "quorum posture again", func() bool { return o.env.Arbiter.Posture() == "quorum" })
}

func requireCode(t *testing.T, err error, want codes.Code, what string) {
	t.Helper()
	if status.Code(err) != want {
		t.Fatalf("%s: got %v, want %s", what, err, want)
	}
}

// shipped reads the unprotected grants shipped to etcd, by sequence number.
func shipped(t *testing.T, b *store.Backend) map[uint64]keyspace.Unprotected {
	t.Helper()
	resp, err := b.Client.Get(t.Context(), keyspace.UnprotectedPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]keyspace.Unprotected{}
	for _, kv := range resp.Kvs {
		u, err := keyspace.DecodeUnprotected(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(kv.Key) != keyspace.UnprotectedKey(u.Arbiter, u.Seq) {
			t.Fatalf("record %s names arbiter %s seq %d", kv.Key, u.Arbiter, u.Seq)
		}
		got[u.Seq] = u
	}
	return got
}

// TestOpenPostureGrantsOnlyOpenClassesUnprotectedAndShipsThemWhenQuorumReturns
// takes the quorum away from a real three-member cluster: a closed class
// is refused, an open class is granted from memory with token 0 on a
// session opened without quorum, one holder per key; when quorum returns
// the local session ends, saying so, every answered grant is shipped once
// under /sys/unprotected/, and the open class is granted by etcd again.
func TestOpenPostureGrantsOnlyOpenClassesUnprotectedAndShipsThemWhenQuorumReturns(t *testing.T) {
	o := startOutage(t, lockdtest.Options{})
	alice, _ := o.env.Raw(t, lockdtest.Alice)
	bob, _ := o.env.Raw(t, lockdtest.Bob)
	etcdSession := openSession(t, alice, 15*time.Second)
	before, err := acquire(t.Context(), alice, etcdSession, "t/protected", "std", 0)
	if err != nil || before.GetToken().GetValue() == 0 || before.GetUnprotected() {
		t.Fatalf("grant with quorum: %v %v", before, err)
	}

	stopped := o.loseQuorum(t)
	if waited := time.Since(stopped); waited < openAfter {
		t.Fatalf("open posture %s after the quorum was lost, before OpenAfter %s", waited, openAfter)
	}

	ready := func() (int, string) {
		resp, err := http.Get("http://" + o.env.MetricsAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := ready(); code != http.StatusOK || !strings.Contains(body, "open posture") {
		t.Fatalf("/readyz in the open posture with an open class: %d %q; want 200 saying open posture (a load balancer must keep sending traffic)", code, body)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err = acquire(ctx, alice, etcdSession, "t/closed", "std", 0)
	requireCode(t, err, codes.Unavailable, "a closed class without quorum")
	_, err = acquire(ctx, alice, etcdSession, "t/cache/c1", "cache", 0)
	requireCode(t, err, codes.FailedPrecondition, "an open class on a session opened in etcd")
	if r := client.Reason(err); r != "NO_QUORUM_SESSION" {
		t.Fatalf("an open class on a session opened in etcd: reason %q, want NO_QUORUM_SESSION", r)
	}

	as := openSession(t, alice, 30*time.Second)
	bs := openSession(t, bob, 30*time.Second)
	if as >= 0 || bs >= 0 {
		t.Fatalf("sessions opened without quorum got etcd-like IDs %d, %d", as, bs)
	}
	_, err = acquire(ctx, alice, as, "t/closed", "std", 0)
	requireCode(t, err, codes.Unavailable, "a closed class on a local session")

	grant := func(lc lockv1.LockServiceClient, sid int64, key string, seq uint64) {
		t.Helper()
		g, err := acquire(ctx, lc, sid, key, "cache", 0)
		if err != nil {
			t.Fatalf("open grant of %s: %v", key, err)
		}
		if !g.GetUnprotected() || g.GetToken().GetValue() != 0 || g.GetArbiterId() == "" || g.GetSpoolSeq() != seq {
			t.Fatalf("open grant of %s: %v, want unprotected, token 0, an arbiter ID and spool seq %d", key, g, seq)
		}
	}
	grant(alice, as, "t/cache/c1", 1)
	grant(alice, as, "t/cache/c1", 1) // the holder asking again gets its grant, not another
	_, err = acquire(ctx, bob, bs, "t/cache/c1", "cache", 0)
	requireCode(t, err, codes.Aborted, "a key held open by another session")
	grant(bob, bs, "t/cache/c2", 2)
	if _, err := alice.Release(ctx, &lockv1.ReleaseRequest{SessionId: as, Key: "t/cache/c1"}); err != nil {
		t.Fatalf("release of an open hold: %v", err)
	}
	grant(bob, bs, "t/cache/c1", 3)

	ka, err := keepAliveOnce(t, alice, as)
	if err != nil || ka.GetTtl().AsDuration() != 30*time.Second {
		t.Fatalf("keepalive of a local session without quorum: %v %v", ka, err)
	}

	o.regainQuorum(t)
	if code, body := ready(); code != http.StatusOK || !strings.HasPrefix(body, "ok\n") {
		t.Fatalf("/readyz with quorum back: %d %q", code, body)
	}
	ka, err = keepAliveOnce(t, alice, as)
	if err != nil || ka.GetTtl().AsDuration() != 0 || !ka.GetUnprotectedEnded() {
		t.Fatalf("keepalive of a local session after quorum returned: %v %v; want ttl 0 and unprotected_ended", ka, err)
	}
	_, err = acquire(t.Context(), bob, bs, "t/cache/c3", "cache", 0)
	requireCode(t, err, codes.NotFound, "a local session after quorum returned")

	got := shipped(t, o.backend)
	want := map[uint64]struct{ key, id string }{1: {"t/cache/c1", lockdtest.Alice}, 2: {"t/cache/c2", lockdtest.Bob}, 3: {"t/cache/c1", lockdtest.Bob}}
	if len(got) != len(want) {
		t.Fatalf("shipped %d unprotected grants, want %d: %v", len(got), len(want), got)
	}
	for seq, w := range want {
		u := got[seq]
		if u.Key != w.key || u.Identity != w.id || u.Class != "t/cache" || u.TTL != 30 || u.AcquiredAt == 0 {
			t.Errorf("shipped grant %d = %+v, want key %s holder %s class t/cache", seq, u, w.key, w.id)
		}
	}

	// Stats (lockctl top) counts them among the class's grants.
	var unprotected, grants uint64
	for _, st := range o.env.Arbiter.Stats(identity.Workload(lockdtest.Operator)) {
		if st.Namespace == "t" && st.Class == "cache" {
			unprotected, grants = st.Unprotected, st.Grants
		}
	}
	if unprotected != 3 || grants < 3 {
		t.Errorf("Stats for t/cache: %d unprotected of %d grants, want 3 unprotected", unprotected, grants)
	}

	// Granted by etcd again once every unprotected holder's deadline has
	// passed (the open grace, recovery_test.go).
	fresh := openSession(t, alice, 30*time.Second)
	defer keepRenewing(t, alice, fresh)() // through the wait
	g, err := acquire(t.Context(), alice, fresh, "t/cache/c1", "cache", 90*time.Second)
	if err != nil || g.GetUnprotected() || g.GetToken().GetValue() == 0 {
		t.Fatalf("the open class with quorum back: %v %v; want a protected grant", g, err)
	}
}

// The test binary runs as a lockd on the cluster when childLockdDir is set
// (see TestMain): the lockd the kill test SIGKILLs in the open posture.
const (
	childLockdDir     = "LOCKD_TEST_LOCKD_DIR"
	childLockdClasses = "LOCKD_TEST_LOCKD_CLASSES"
	childLockdAddr    = "LOCKD_TEST_LOCKD_ADDR"
	childLockdEtcd    = "LOCKD_TEST_LOCKD_ETCD"
)

func runChildLockd(dir string) int {
	cfg := lockd.DefaultConfig()
	cfg.DataDir, cfg.ClassesDir, cfg.Listen = dir, os.Getenv(childLockdClasses), os.Getenv(childLockdAddr)
	cfg.MetricsListen, cfg.InsecureLoopback = "127.0.0.1:0", true
	cfg.EtcdEndpoints = strings.Split(os.Getenv(childLockdEtcd), ",")
	cfg.OpenAfter, cfg.RequestTimeout = openAfter, time.Second
	cfg.Audit.Mode = lockd.AuditOff
	cfg.LogOutput, cfg.LogLevel, cfg.LogFormat = os.Stderr, "info", "text"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	d, err := lockd.New(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child lockd:", err)
		return 1
	}
	d.Serve()
	select {}
}

// startChildLockd runs lockd in a child process with its data in dir.
func startChildLockd(t *testing.T, dir, classes, addr string, etcd []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childLockdDir+"="+dir, childLockdClasses+"="+classes, childLockdAddr+"="+addr,
		childLockdEtcd+"="+strings.Join(etcd, ","))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("child lockd's log:\n%s", logs.String())
		}
	})
	return cmd
}

// TestKilledLockdLosesNoAcknowledgedUnprotectedGrant SIGKILLs a lockd
// process while holders take open grants from it without a quorum, then
// restores the quorum and starts lockd again on the same data dir: every
// grant a holder was answered is shipped, with its key and holder.
func TestKilledLockdLosesNoAcknowledgedUnprotectedGrant(t *testing.T) {
	o := startOutage(t, lockdtest.Options{}) // creates the epoch record
	o.env.Stop()
	dir, classes, addr := t.TempDir(), t.TempDir(), lockdtest.FreeAddr(t)
	for name, body := range lockdtest.OpenClasses() {
		path := filepath.Join(classes, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	child := startChildLockd(t, dir, classes, addr, o.cluster.Endpoints())
	raw := &lockdtest.Env{Addr: addr}
	holders := []string{lockdtest.Alice, lockdtest.Bob}
	var lcs []lockv1.LockServiceClient
	for _, id := range holders {
		lc, _ := raw.Raw(t, id)
		lcs = append(lcs, lc)
	}
	lockdtest.WaitFor(t, 30*time.Second, "the child lockd", func() bool {
		_, err := lcs[0].ListClasses(t.Context(), &lockv1.ListClassesRequest{})
		return err == nil
	})

	o.cluster.Stop(1)
	o.cluster.Stop(2)
	var sessions []int64
	lockdtest.WaitFor(t, 30*time.Second, "a session opened without quorum", func() bool {
		resp, err := lcs[0].OpenSession(t.Context(), &lockv1.OpenSessionRequest{Ttl: durationpb.New(30 * time.Second)})
		return err == nil && resp.GetSessionId() < 0
	})
	for _, lc := range lcs {
		for range 4 {
			sessions = append(sessions, openSession(t, lc, 30*time.Second))
		}
	}

	type ack struct{ key, holder string }
	var (
		mu    sync.Mutex
		acked = map[uint64]ack{}
		wg    sync.WaitGroup
	)
	ctx, stop := context.WithCancel(t.Context())
	for i, sid := range sessions {
		lc, holder := lcs[i/4], holders[i/4]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Sprintf("t/cache/kill/%d/%d", i, n)
				g, err := acquire(ctx, lc, sid, key, "cache", 0)
				if err != nil {
					return // the kill
				}
				mu.Lock()
				acked[g.GetSpoolSeq()] = ack{key, holder}
				mu.Unlock()
			}
		}()
	}
	lockdtest.WaitFor(t, 30*time.Second, "some open grants", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 200
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	stop()
	wg.Wait()

	o.cluster.Restart(1, 2)
	startChildLockd(t, dir, classes, addr, o.cluster.Endpoints())
	var got map[uint64]keyspace.Unprotected
	lockdtest.WaitFor(t, 60*time.Second, "the spool shipped after the restart", func() bool {
		got = shipped(t, o.backend)
		return len(got) >= len(acked)
	})
	for seq, a := range acked {
		u, ok := got[seq]
		if !ok || u.Key != a.key || u.Identity != a.holder {
			t.Errorf("acknowledged unprotected grant %d (%s to %s) shipped as %+v (found %v)", seq, a.key, a.holder, u, ok)
		}
	}
	t.Logf("%d grants acknowledged before the kill, %d shipped after the restart", len(acked), len(got))
}

// TestClientSeesAnUnprotectedLockAndWhyItEnded: the Go client, asked for an
// open class without a quorum while its session of that TTL (opened in etcd,
// holding a protected lock) waits for the store, opens a session without
// quorum and gets a lock that says it is unprotected (token 0, CanStart
// false), kept alive by lockd alone; when quorum returns, that lock ends
// with ErrUnprotectedEnded and its onFence runs, the protected lock is safe
// again, and the next Acquire is protected.
func TestClientSeesAnUnprotectedLockAndWhyItEnded(t *testing.T) {
	o := startOutage(t, lockdtest.Options{})
	c := o.env.Client(t, lockdtest.Alice)
	// Waits out the hold-off of a lockd just started (recovery.go).
	pre, err := c.Acquire(t.Context(), "t/cache/client-pre", "cache", func(*client.Lock) {}, client.Wait(30*time.Second))
	if err != nil || pre.Unprotected() {
		t.Fatalf("acquire with quorum: %v", err)
	}
	o.loseQuorum(t)

	fenced := make(chan struct{})
	l, err := c.Acquire(t.Context(), "t/cache/client", "cache", func(*client.Lock) { close(fenced) })
	if err != nil {
		t.Fatalf("acquire without quorum: %v", err)
	}
	if arbiter, seq := l.Spooled(); arbiter == "" || seq != 1 {
		t.Fatalf("unprotected lock's grant: arbiter %q spool seq %d, want an arbiter and seq 1", arbiter, seq)
	}
	if !l.Unprotected() || l.Token() != 0 || l.CanStart() || l.State() != client.Safe {
		t.Fatalf("lock without quorum: unprotected %v token %d CanStart %v state %s; want unprotected, token 0, CanStart false, safe",
			l.Unprotected(), l.Token(), l.CanStart(), l.State())
	}

	o.regainQuorum(t)
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the unprotected lock did not end after quorum returned")
	}
	if !errors.Is(l.Err(), client.ErrUnprotectedEnded) {
		t.Fatalf("unprotected lock ended with %v, want ErrUnprotectedEnded", l.Err())
	}
	select {
	case <-fenced:
	case <-time.After(5 * time.Second):
		t.Fatal("onFence did not run for the unprotected lock")
	}
	lockdtest.WaitFor(t, 30*time.Second, "the protected lock safe again", func() bool { return pre.CanStart() })

	l, err = c.Acquire(t.Context(), "t/cache/client", "cache", func(*client.Lock) {}, client.Wait(90*time.Second))
	if err != nil || l.Unprotected() || l.Token() == 0 || !l.CanStart() {
		t.Fatalf("acquire with quorum back: %v (unprotected %v); want a protected lock", err, l != nil && l.Unprotected())
	}
}

// reasonOf is lockd's wire reason on err.
func reasonOf(err error) string { return client.Reason(err) }

// TestWithoutQuorumAKeyOfAClosedClassIsNotGrantedByNamingAnOpenClass: Alice
// holds t/ledger/42 under std (fenced, closed on quorum loss). Without a
// quorum, Bob names the open class cache for the same key: the key's class
// is std's, decided in review, so the request is refused as a class
// mismatch naming std, and not granted from memory while Alice's lock is
// still live. Asked without a class, it is std's, closed: refused.
func TestWithoutQuorumAKeyOfAClosedClassIsNotGrantedByNamingAnOpenClass(t *testing.T) {
	o := startOutage(t, lockdtest.Options{})
	const key = "t/ledger/42"
	alice := o.env.Client(t, lockdtest.Alice)
	held, err := alice.Acquire(t.Context(), key, "std", func(*client.Lock) {})
	if err != nil {
		t.Fatalf("Alice's protected lock: %v", err)
	}
	o.loseQuorum(t)

	bob, _ := o.env.Raw(t, lockdtest.Bob)
	local := openSession(t, bob, 30*time.Second)
	g, err := acquire(t.Context(), bob, local, key, "cache", 0)
	if err == nil {
		t.Fatalf("granted %s to Bob under the open class (unprotected %v) while Alice holds it under std (%s)", key, g.GetUnprotected(), held.State())
	}
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "CLASS_MISMATCH" || !strings.Contains(status.Convert(err).Message(), "t/std") {
		t.Fatalf("Bob naming cache for %s: %v; want FAILED_PRECONDITION, CLASS_MISMATCH naming t/std", key, err)
	}
	_, err = acquire(t.Context(), bob, local, key, "", 0)
	requireCode(t, err, codes.Unavailable, "the key's own class (closed) without a quorum")
	if held.State() == client.Ended {
		t.Fatalf("Alice's lock ended: %v", held.Err())
	}
}

// TestUnprotectedLockStaysUsableWhileItsKeepalivesAreAnswered: without a
// quorum, an unprotected lock (token 0, epoch 0) is kept alive by lockd's
// answers for as long as the outage lasts: two keepalive intervals on, it
// is still safe and not ended, and a second unprotected lock taken on the
// same session after those answers is not handed out already ended.
func TestUnprotectedLockStaysUsableWhileItsKeepalivesAreAnswered(t *testing.T) {
	o := startOutage(t, lockdtest.Options{})
	c := o.env.Client(t, lockdtest.Alice)
	o.loseQuorum(t)
	first, err := c.Acquire(t.Context(), "t/cache/first", "", func(*client.Lock) {})
	if err != nil || !first.Unprotected() {
		t.Fatalf("unprotected lock: %v", err)
	}
	const ttl = 30 * time.Second // class cache
	time.Sleep(2*ttl/3 + 2*time.Second)
	if first.Err() != nil || first.State() != client.Safe {
		t.Fatalf("two keepalive intervals into the outage the unprotected lock is %s (%v); want safe", first.State(), first.Err())
	}
	second, err := c.Acquire(t.Context(), "t/cache/second", "", func(*client.Lock) {})
	if err != nil || !second.Unprotected() {
		t.Fatalf("second unprotected lock: %v", err)
	}
	if second.Err() != nil || second.State() != client.Safe {
		t.Fatalf("the second unprotected lock is %s (%v) as it is handed out; want safe", second.State(), second.Err())
	}
	if got := o.env.Arbiter.Posture(); got != "open" {
		t.Fatalf("posture %s: the outage ended early, the test proves nothing", got)
	}
}
