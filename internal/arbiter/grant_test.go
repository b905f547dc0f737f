package arbiter_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	"github.com/lockd-dev/lockd/pkg/token"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestMain doubles as a lock holder process for the SIGKILL test, and as
// a lockd for the open posture's (open_test.go).
func TestMain(m *testing.M) {
	if addr := os.Getenv("LOCKD_TEST_HOLDER_ADDR"); addr != "" {
		os.Exit(holder(addr, os.Getenv("LOCKD_TEST_HOLDER_KEY")))
	}
	if dir := os.Getenv(childLockdDir); dir != "" {
		os.Exit(runChildLockd(dir))
	}
	os.Exit(m.Run())
}

func holder(addr, key string) int {
	c, err := client.New(client.WithTarget(addr), client.WithInsecureIdentity(lockdtest.Alice))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := c.Acquire(context.Background(), key, "fast", func(*client.Lock) {})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Printf("held %d\n", l.Token())
	select {}
}

func openSession(t *testing.T, lc lockv1.LockServiceClient, ttl time.Duration) int64 {
	t.Helper()
	resp, err := lc.OpenSession(t.Context(), &lockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	return resp.GetSessionId()
}

func acquire(ctx context.Context, lc lockv1.LockServiceClient, sid int64, key, class string, wait time.Duration) (*lockv1.AcquireResponse, error) {
	return lc.Acquire(ctx, &lockv1.AcquireRequest{SessionId: sid, Key: key, Class: class, Wait: durationpb.New(wait)})
}

func TestTokensIncreaseAndEqualEpochAndModRevision(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	lc, _ := env.Raw(t, lockdtest.Alice)
	sid := openSession(t, lc, 15*time.Second)
	var prev uint64
	for i := range 1000 {
		resp, err := acquire(t.Context(), lc, sid, "t/tokens", "std", 0)
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		tok := resp.GetToken()
		if tok.GetValue() <= prev {
			t.Fatalf("grant %d: token %d not greater than previous %d", i, tok.GetValue(), prev)
		}
		prev = tok.GetValue()
		got, err := env.Backend.Client.Get(t.Context(), "/l/t/tokens")
		if err != nil || len(got.Kvs) != 1 {
			t.Fatalf("read hold: %v %v", err, got)
		}
		want, _ := token.Pack(tok.GetEpoch(), got.Kvs[0].ModRevision)
		if tok.GetValue() != want || tok.GetEpoch() != 1 || tok.GetRevision() != got.Kvs[0].ModRevision {
			t.Fatalf("grant %d: token %d (epoch %d rev %d), want epoch 1 | ModRevision %d = %d",
				i, tok.GetValue(), tok.GetEpoch(), tok.GetRevision(), got.Kvs[0].ModRevision, want)
		}
		if i%7 == 0 { // other writes leave gaps; gaps carry no meaning
			if _, err := acquire(t.Context(), lc, sid, fmt.Sprintf("t/other/%d", i), "std", 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := lc.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: "t/tokens", Token: tok.GetValue()}); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
}

func TestContendedKeyNoOverlapArrivalOrder(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	const n = 32
	const key = "t/hot"
	first, _ := env.Raw(t, lockdtest.Alice)
	fsid := openSession(t, first, 15*time.Second)
	held, err := acquire(t.Context(), first, fsid, key, "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	var inside atomic.Int32
	var mu sync.Mutex
	var order []int
	var tokens []uint64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		lc, _ := env.Raw(t, lockdtest.Worker(i))
		sid := openSession(t, lc, 15*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := acquire(t.Context(), lc, sid, key, "std", 60*time.Second)
			if err != nil {
				errs <- fmt.Errorf("worker %d: %w", i, err)
				return
			}
			if v := inside.Add(1); v != 1 {
				errs <- fmt.Errorf("worker %d: %d holders at once", i, v)
			}
			mu.Lock()
			order = append(order, i)
			tokens = append(tokens, resp.GetToken().GetValue())
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			inside.Add(-1)
			if _, err := lc.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: key, Token: resp.GetToken().GetValue()}); err != nil {
				errs <- fmt.Errorf("worker %d release: %w", i, err)
			}
		}()
		// Arrival order: the next worker starts only once this one is queued.
		deadline := time.Now().Add(10 * time.Second)
		for env.Arbiter.QueueLen(key) != i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d never queued (queue %d)", i, env.Arbiter.QueueLen(key))
			}
			time.Sleep(time.Millisecond)
		}
	}
	if _, err := first.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: fsid, Key: key, Token: held.GetToken().GetValue()}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range order {
		if order[i] != i {
			t.Fatalf("grant order %v, want arrival order 0..%d", order, n-1)
		}
		if i > 0 && tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d of grant %d not greater than %d", tokens[i], i, tokens[i-1])
		}
	}
	if len(order) != n {
		t.Fatalf("%d grants, want %d", len(order), n)
	}
}

func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func TestLeakIsDistinctFromContention(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := lockdtest.Start(t, lockdtest.Options{Registry: reg})
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	s1 := openSession(t, alice, 15*time.Second)
	s2 := openSession(t, alice, 15*time.Second)
	sb := openSession(t, bob, 15*time.Second)
	if _, err := acquire(t.Context(), alice, s1, "t/leak", "std", 0); err != nil {
		t.Fatal(err)
	}
	_, err := acquire(t.Context(), alice, s2, "t/leak", "std", time.Second)
	if status.Code(err) != codes.AlreadyExists || !errors.Is(client.Decode(err), client.ErrLeak) {
		t.Fatalf("same identity, other session: %v; want AlreadyExists leak", err)
	}
	_, err = acquire(t.Context(), bob, sb, "t/leak", "std", 0)
	if status.Code(err) != codes.Aborted || !errors.Is(client.Decode(err), client.ErrHeld) || errors.Is(client.Decode(err), client.ErrLeak) {
		t.Fatalf("other identity: %v; want Aborted, reason HELD (contention, not a leak)", err)
	}
	if got := metricValue(t, reg, "lockd_leaks_total"); got != 1 {
		t.Fatalf("lockd_leaks_total = %v, want 1", got)
	}
	// The same session re-acquiring gets its own hold back (idempotent).
	a, err := acquire(t.Context(), alice, s1, "t/leak", "std", 0)
	if err != nil {
		t.Fatalf("re-acquire by the holding session: %v", err)
	}
	b, _ := env.Backend.Client.Get(t.Context(), "/l/t/leak")
	if a.GetToken().GetRevision() != b.Kvs[0].ModRevision {
		t.Fatalf("re-acquire token revision %d, hold ModRevision %d", a.GetToken().GetRevision(), b.Kvs[0].ModRevision)
	}
}

func TestReleaseComparesSessionAndToken(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	sa := openSession(t, alice, 15*time.Second)
	sb := openSession(t, bob, 15*time.Second)
	first, err := acquire(t.Context(), alice, sa, "t/stale", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	rel := func(lc lockv1.LockServiceClient, sid int64, tok uint64) (*lockv1.ReleaseResponse, error) {
		return lc.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: "t/stale", Token: tok})
	}
	if r, err := rel(alice, sa, first.GetToken().GetValue()); err != nil || !r.GetReleased() {
		t.Fatalf("release: %v %v", r, err)
	}
	if r, err := rel(alice, sa, first.GetToken().GetValue()); err != nil || r.GetReleased() {
		t.Fatalf("second release must be harmless: %v %v", r, err)
	}
	second, err := acquire(t.Context(), bob, sb, "t/stale", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rel(alice, sa, first.GetToken().GetValue()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale token release: %v, want FailedPrecondition", err)
	}
	if _, err := rel(alice, sa, second.GetToken().GetValue()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("release of another session's hold: %v, want FailedPrecondition", err)
	}
	if _, err := rel(alice, sb, second.GetToken().GetValue()); status.Code(err) != codes.NotFound {
		t.Fatalf("release through a session of another identity: %v, want NotFound", err)
	}
	if got, _ := env.Backend.Client.Get(t.Context(), "/l/t/stale"); len(got.Kvs) != 1 {
		t.Fatal("bob's hold was released by a refused call")
	}
}

// TestARetriedReleaseNeverFreesTheSameSessionsNewerGrant: a release whose
// answer was lost, sent again after the same session released the key and
// was granted it again (etcd#22082's shape), is refused: the release
// compares the hold's revision, so it never frees the newer grant. With the
// gate's broken build (-tags gate_broken_release, which releases by key) it
// frees it.
func TestARetriedReleaseNeverFreesTheSameSessionsNewerGrant(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	sa := openSession(t, alice, 15*time.Second)
	const key = "t/retried"
	first, err := acquire(t.Context(), alice, sa, key, "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	rel := func(tok uint64) (*lockv1.ReleaseResponse, error) {
		return alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sa, Key: key, Token: tok})
	}
	if r, err := rel(first.GetToken().GetValue()); err != nil || !r.GetReleased() {
		t.Fatalf("release: %v %v", r, err)
	}
	second, err := acquire(t.Context(), alice, sa, key, "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first release, retried: its answer was lost.
	r, err := rel(first.GetToken().GetValue())
	if err == nil && r.GetReleased() {
		t.Fatalf("the retried release of token %d freed the newer grant (token %d)", first.GetToken().GetValue(), second.GetToken().GetValue())
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("retried release: %v %v, want FailedPrecondition (a stale token)", r, err)
	}
	got, err := env.Backend.Client.Get(t.Context(), "/l/"+key)
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != second.GetToken().GetRevision() {
		t.Fatalf("the newer grant is gone after a refused retry: %v %v", got, err)
	}
}

func TestBadInputsAreInvalidArgumentNamingTheRule(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	s15 := openSession(t, alice, 15*time.Second)
	tests := []struct {
		name, key, class string
		code             codes.Code
		want             string
	}{
		{"dot-dot segment", "t/a/../b", "std", codes.InvalidArgument, ".."},
		{"empty segment", "t//b", "std", codes.InvalidArgument, "empty"},
		{"bad character", "t/a b", "std", codes.InvalidArgument, "character"},
		{"no path", "t", "std", codes.InvalidArgument, "segment"},
		{"too long", "t/" + strings.Repeat("x", 600), "std", codes.InvalidArgument, "512"},
		{"unknown class", "t/a", "nope", codes.InvalidArgument, `no class "nope"`},
		{"class of another namespace", "t/a", "other/std", codes.InvalidArgument, "must match the key's namespace"},
		{"session ttl is not the class ttl", "t/fast/a", "fast", codes.FailedPrecondition, "ttl"},
		{"a class that does not own the key", "t/fast/a", "std", codes.FailedPrecondition, `key t/fast/a belongs to class t/fast (its spec.keys has "t/fast/"), not t/std`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := acquire(t.Context(), alice, s15, tt.key, tt.class, 0)
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("Acquire(%q, %q) = %v; want %s naming %q", tt.key, tt.class, err, tt.code, tt.want)
			}
		})
	}
	for _, ttl := range []time.Duration{2 * time.Second, 301 * time.Second, 1500 * time.Millisecond} {
		_, err := alice.OpenSession(t.Context(), &lockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ttl: must be whole seconds between 5s and 5m0s") {
			t.Fatalf("OpenSession(%s) = %v; want InvalidArgument naming the ttl rule", ttl, err)
		}
	}
}

func TestDenialsAreIdentical(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	carol, _ := env.Raw(t, lockdtest.Carol)
	sa := openSession(t, alice, 15*time.Second)
	sc := openSession(t, carol, 15*time.Second)
	if _, err := acquire(t.Context(), alice, sa, "t/held", "std", 0); err != nil {
		t.Fatal(err)
	}
	var first []byte
	for _, key := range []string{"t/held", "t/not-held", "absent/x", "other/x", "t/carol-not/x"} {
		_, err := acquire(t.Context(), carol, sc, key, "std", 0)
		st := status.Convert(err)
		if st.Code() != codes.PermissionDenied {
			t.Fatalf("%s: %v, want PermissionDenied", key, err)
		}
		b, _ := proto.Marshal(st.Proto())
		if first == nil {
			first = b
		} else if string(b) != string(first) {
			t.Fatalf("%s: denial %q differs from the first denial", key, st.Message())
		}
	}
	if _, err := acquire(t.Context(), carol, sc, "t/carol/x", "std", 0); err != nil {
		t.Fatalf("inside carol's grant: %v", err)
	}
}

func TestKilledClientFreesHoldsAfterTTL(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	const key = "t/fast/killed"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCKD_TEST_HOLDER_ADDR="+env.Addr, "LOCKD_TEST_HOLDER_KEY="+key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("holder: %q %v", line, err)
	}
	heldTok, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "held ")), 10, 64)
	time.Sleep(2 * time.Second) // a few keepalives go through
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	bob := env.Client(t, lockdtest.Bob) // keeps its own session alive while it waits
	l, err := bob.Acquire(t.Context(), key, "fast", func(*client.Lock) {}, client.Wait(20*time.Second))
	if err != nil {
		t.Fatalf("acquire after the holder was killed: %v", err)
	}
	waited := time.Since(killed)
	if l.Token() <= heldTok {
		t.Fatalf("new token %d not greater than the killed holder's %d", l.Token(), heldTok)
	}
	// The last keepalive was at most TTL/3 before the kill, so the hold
	// must have outlived the kill by at least TTL − TTL/3.
	if waited < 5*time.Second-5*time.Second/3 {
		t.Fatalf("hold freed %s after the kill: before its TTL", waited)
	}
	t.Logf("hold freed %s after SIGKILL (TTL 5s)", waited.Round(time.Millisecond))
}

func openReq(ttl time.Duration) *lockv1.OpenSessionRequest {
	return &lockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)}
}

// TestWaitDeadlinesRacingHandoffsLeaveNoOrphan: waiters give up while
// releases hand the key over; every hold granted must reach a caller, so
// once every caller released what it got, the key is free.
func TestWaitDeadlinesRacingHandoffsLeaveNoOrphan(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	const key = "t/race"
	var wg sync.WaitGroup
	for i := range 16 {
		lc, _ := env.Raw(t, lockdtest.Worker(i))
		sid := openSession(t, lc, 15*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 30 {
				wait := time.Duration(1+(i*7+j*3)%20) * time.Millisecond
				resp, err := acquire(t.Context(), lc, sid, key, "std", wait)
				if err != nil {
					if c := status.Code(err); c != codes.Aborted || !errors.Is(client.Decode(err), client.ErrWaitTimeout) {
						t.Errorf("worker %d: %v", i, err)
					}
					continue
				}
				time.Sleep(time.Millisecond)
				if _, err := lc.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: key, Token: resp.GetToken().GetValue()}); err != nil {
					t.Errorf("worker %d release: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	if got, _ := env.Backend.Client.Get(t.Context(), "/l/"+key); len(got.Kvs) != 0 {
		t.Fatalf("orphan hold left after every caller released: %s", got.Kvs[0].Value)
	}
}

func TestInspectShowsTokensOnlyToOperators(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	op, _ := env.Raw(t, lockdtest.Operator)
	carol, _ := env.Raw(t, lockdtest.Carol)
	sid := openSession(t, alice, 15*time.Second)
	g, err := acquire(t.Context(), alice, sid, "t/seen", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	own, err := alice.Inspect(t.Context(), &lockv1.InspectRequest{Key: "t/seen"})
	if err != nil || !own.GetHeld() || own.GetHold().GetHolder() != lockdtest.Alice || own.GetHold().GetSessionId() != sid ||
		own.GetHold().GetClass() != "t/std" || own.GetHold().GetToken() != nil {
		t.Fatalf("holder's inspect: %v %v (token must not be shown)", own, err)
	}
	ops, err := op.Inspect(t.Context(), &lockv1.InspectRequest{Key: "t/seen"})
	if err != nil || ops.GetHold().GetToken().GetValue() != g.GetToken().GetValue() {
		t.Fatalf("operator's inspect: %v %v", ops, err)
	}
	if _, err := carol.Inspect(t.Context(), &lockv1.InspectRequest{Key: "t/seen"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("inspect outside the grants: %v", err)
	}
	list, err := alice.ListHolds(t.Context(), &lockv1.ListHoldsRequest{Prefix: "t/"})
	if err != nil || len(list.GetHolds()) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	ss, err := alice.ListSessions(t.Context(), &lockv1.ListSessionsRequest{})
	if err != nil || len(ss.GetSessions()) != 1 || ss.GetSessions()[0].GetHolds() != 1 || ss.GetSessions()[0].GetRemaining().AsDuration() <= 0 {
		t.Fatalf("sessions: %v %v", ss, err)
	}
}

// TestPerIdentityQuotasRefuseClearly: an identity may open at most
// MaxSessionsPerIdentity sessions and queue at most MaxWaitersPerIdentity
// waiters on one arbiter; beyond, it is refused with RESOURCE_EXHAUSTED
// naming the limit, and closing a session gives its place back.
func TestPerIdentityQuotasRefuseClearly(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := lockdtest.Start(t, lockdtest.Options{MaxSessionsPerIdentity: 2, MaxWaitersPerIdentity: 1, Registry: reg})
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	s1 := openSession(t, alice, 15*time.Second)
	openSession(t, alice, 15*time.Second)
	_, err := alice.OpenSession(t.Context(), &lockv1.OpenSessionRequest{Ttl: durationpb.New(15 * time.Second)})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-sessions-per-identity") {
		t.Fatalf("third session: %v; want ResourceExhausted naming the limit", err)
	}
	openSession(t, bob, 15*time.Second) // another identity has its own quota
	if _, err := alice.CloseSession(t.Context(), &lockv1.CloseSessionRequest{SessionId: s1}); err != nil {
		t.Fatal(err)
	}
	sa := openSession(t, alice, 15*time.Second) // the closed one's place

	for _, k := range []string{"t/q1", "t/q2"} {
		if _, err := acquire(t.Context(), alice, sa, k, "std", 0); err != nil {
			t.Fatal(err)
		}
	}
	sb := openSession(t, bob, 15*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _ = acquire(ctx, bob, sb, "t/q1", "std", 10*time.Second) }()
	lockdtest.WaitFor(t, 5*time.Second, "bob queued", func() bool { return env.Arbiter.QueueLen("t/q1") == 1 })
	_, err = acquire(t.Context(), bob, sb, "t/q2", "std", 5*time.Second)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-waiters-per-identity") {
		t.Fatalf("second waiter: %v; want ResourceExhausted naming the limit", err)
	}
	if got := metricValue(t, reg, "lockd_quota_refusals_total"); got != 2 {
		t.Fatalf("lockd_quota_refusals_total = %v, want 2", got)
	}
}

// TestCloseEndsWaiters: closing the arbiter answers every queued waiter
// (Unavailable, acquire again) instead of leaving it until its deadline.
func TestCloseEndsWaiters(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	sa := openSession(t, alice, 15*time.Second)
	sb := openSession(t, bob, 15*time.Second)
	if _, err := acquire(t.Context(), alice, sa, "t/closing", "std", 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := acquire(t.Context(), bob, sb, "t/closing", "std", time.Minute)
		done <- err
	}()
	lockdtest.WaitFor(t, 5*time.Second, "bob queued", func() bool { return env.Arbiter.QueueLen("t/closing") == 1 })
	env.Arbiter.Close()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("waiter at close: %v; want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not answered when the arbiter closed")
	}
}
