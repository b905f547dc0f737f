package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Regression tests for the client findings of the safety review: each is
// named after the behaviour it holds the client to.

func proxyTo(t *testing.T, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// watchHoldGone reports when the hold key's deletion commits, seen from
// the server side (not through the proxy).
func watchHoldGone(t *testing.T, env *lockdtest.Env, key string) <-chan time.Time {
	t.Helper()
	return holdGoneAt(t, env.Backend.Client, key)
}

func holdExists(t *testing.T, env *lockdtest.Env, key string) bool {
	t.Helper()
	return holdExistsOn(t, env.Backend.Client, key)
}

// TestFenceFiresAtDeadlineWhileReconnectHangs: the keepalive stream breaks
// and every reconnect reaches something that accepts TCP and never answers.
// onFence must still run at the local deadline, before the store expires
// the hold, and other calls on the client must honour their contexts.
// (Before: the session loop blocked in the reconnect under the client
// mutex for gRPC's ~20 s connect timeout.)
func TestFenceFiresAtDeadlineWhileReconnectHangs(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy := proxyTo(t, env.Addr)
	c := lockdtest.ClientAt(t, proxy.Addr(), lockdtest.Alice)
	fenced := make(chan time.Time, 1)
	l, err := c.Acquire(t.Context(), "t/fast/hang", "fast", func(*client.Lock) { fenced <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	gone := watchHoldGone(t, env, "t/fast/hang")

	broke := time.Now()
	proxy.Hang()
	proxy.Reset() // the stream breaks; reconnects hang
	var fenceAt, goneAt time.Time
	select {
	case fenceAt = <-fenced:
	case <-time.After(15 * time.Second):
		t.Fatal("onFence did not run within 15s of the break (TTL 5s)")
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after onFence")
	}
	// Another call on the client honours its context while reconnects hang.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	began := time.Now()
	_, err = c.Acquire(ctx, "t/fast/other", "fast", func(*client.Lock) {})
	cancel()
	if took := time.Since(began); err == nil || took > 3*time.Second {
		t.Fatalf("Acquire with a 1s context while reconnects hang: %v after %s", err, took)
	}
	select {
	case goneAt = <-gone:
	case <-time.After(15 * time.Second):
		t.Fatal("the store never expired the hold")
	}
	t.Logf("after the break: onFence at +%s, store expiry at +%s", fenceAt.Sub(broke).Round(time.Millisecond), goneAt.Sub(broke).Round(time.Millisecond))
	if !fenceAt.Before(goneAt) {
		t.Fatalf("onFence at %s ran after the store expired the hold at %s", fenceAt, goneAt)
	}
	if l.Err() != client.ErrDeadline {
		t.Fatalf("lost reason %v, want ErrDeadline", l.Err())
	}
}

// TestAcquireDuringFinalReleaseStartsANewGrant: while the last Release's
// RPC is in flight, an Acquire of the same key must not be handed the hold
// being released (before: it re-entered it and held a lock lockd was
// releasing); it waits and then gets a new grant.
func TestAcquireDuringFinalReleaseStartsANewGrant(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy := proxyTo(t, env.Addr)
	c := lockdtest.ClientAt(t, proxy.Addr(), lockdtest.Alice)
	l, err := c.Acquire(t.Context(), "t/rerelease", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	old := l.Token()
	proxy.Stall(tcpproxy.Both) // the release stays in flight
	released := make(chan error, 1)
	go func() { released <- l.Release(context.Background()) }()
	time.Sleep(200 * time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	l2, err := c.Acquire(ctx, "t/rerelease", "std", func(*client.Lock) {})
	cancel()
	if err == nil {
		t.Fatalf("Acquire during the final release returned a lock (same hold %v, CanStart %v)", l2.Token() == old, l2.CanStart())
	}
	proxy.Resume()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release never finished")
	}
	l3, err := c.Acquire(t.Context(), "t/rerelease", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	if l3.Token() <= old {
		t.Fatalf("acquire after the release got token %d, not above the released %d", l3.Token(), old)
	}
}

// TestEveryReentrantAcquirerIsFenced: two nested acquirers of one hold each
// pass their own onFence; when the hold is lost, both run (before: only the
// first one's did).
func TestEveryReentrantAcquirerIsFenced(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice)
	var mu sync.Mutex
	ran := map[string]bool{}
	fence := func(name string) func(*client.Lock) {
		return func(*client.Lock) { mu.Lock(); ran[name] = true; mu.Unlock() }
	}
	outer, err := c.Acquire(t.Context(), "t/fast/nested", "fast", fence("outer"))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Acquire(t.Context(), "t/fast/nested", "fast", fence("inner"))
	if err != nil {
		t.Fatal(err)
	}
	env.AdvanceEpoch(t, outer.Epoch(), "test: lose the hold") // both Locks lose it
	lockdtest.WaitFor(t, 10*time.Second, "both onFence callbacks ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran["outer"] && ran["inner"]
	})
	if outer.CanStart() || inner.CanStart() {
		t.Fatal("CanStart after the hold was lost")
	}
}

// TestReleaseAfterContextCancelledStillReleasesTheHold: `defer
// l.Release(ctx)` with ctx already cancelled. The client must still end the
// hold at lockd (before: it forgot the lock, kept renewing the session and
// nobody else could ever take the key).
func TestReleaseAfterContextCancelledStillReleasesTheHold(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice := env.Client(t, lockdtest.Alice)
	ctx, cancel := context.WithCancel(t.Context())
	l, err := alice.Acquire(ctx, "t/fast/leaky", "fast", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = l.Release(ctx) // the caller's context is gone
	bob := env.Client(t, lockdtest.Bob)
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	lb, err := bob.Acquire(wctx, "t/fast/leaky", "fast", func(*client.Lock) {}, client.Wait(8*time.Second))
	if err != nil {
		t.Fatalf("another holder could not take the key after the release: %v (hold still there: %v)", err, holdExists(t, env, "t/fast/leaky"))
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the released lock's Done is still open")
	}
	if l.CanStart() {
		t.Fatal("the released lock still says it may start work")
	}
	_ = lb.Release(t.Context())
}

// TestAcquireWithUnknownOutcomeDoesNotLeakTheHold: lockd grants, and the
// answer never reaches the client (its context ends first). The client
// must find the hold and release it (before: the hold stayed on the
// renewed session for the life of the process).
func TestAcquireWithUnknownOutcomeDoesNotLeakTheHold(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy := proxyTo(t, env.Addr)
	alice := lockdtest.ClientAt(t, proxy.Addr(), lockdtest.Alice)
	// Open the session first, so the stall only hides the grant's answer.
	warm, err := alice.Acquire(t.Context(), "t/fast/warm", "fast", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Release(t.Context())

	proxy.Stall(tcpproxy.ToClient)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err = alice.Acquire(ctx, "t/fast/lost-answer", "fast", func(*client.Lock) {})
	cancel()
	if err == nil {
		t.Fatal("Acquire succeeded although its answer was stalled")
	}
	if !holdExists(t, env, "t/fast/lost-answer") {
		t.Fatal("setup: lockd did not grant the hold whose answer was lost")
	}
	proxy.Resume()
	bob := env.Client(t, lockdtest.Bob)
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	lb, err := bob.Acquire(wctx, "t/fast/lost-answer", "fast", func(*client.Lock) {}, client.Wait(8*time.Second))
	if err != nil {
		t.Fatalf("the hold of the unknown acquire was never released: %v (hold still there: %v)", err, holdExists(t, env, "t/fast/lost-answer"))
	}
	_ = lb.Release(t.Context())
	if !warm.CanStart() {
		t.Fatal("resolving the unknown acquire cost the session's other hold")
	}
}

// TestForceReleasedHolderIsToldWithinAKeepaliveInterval: operators release
// a hold by force. The holder must learn it from its next keepalive answer:
// its lock ends with ErrForced, onFence runs, and a new Acquire is a new
// grant (before: CanStart stayed true for ever and re-entry handed the
// stale lock out again).
func TestForceReleasedHolderIsToldWithinAKeepaliveInterval(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice)
	fenced := make(chan error, 1)
	l, err := c.Acquire(t.Context(), "t/forced", "std", func(l *client.Lock) { fenced <- l.Err() })
	if err != nil {
		t.Fatal(err)
	}
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	req, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/forced", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()}); err != nil {
		t.Fatal(err)
	}
	forcedAt := time.Now()
	interval := 15 * time.Second / 3 // the class TTL / 3
	select {
	case err := <-fenced:
		if !errors.Is(err, client.ErrForced) {
			t.Fatalf("lost with %v, want ErrForced", err)
		}
		var fe *client.ForcedError
		if !errors.As(err, &fe) || fe.Requester != lockdtest.Operator || fe.Approver != lockdtest.Operator2 || fe.Reason != "test" {
			t.Fatalf("lost with %#v, want the requester, the approver and the reason", err)
		}
	case <-time.After(interval + 2*time.Second):
		t.Fatalf("the holder was not told within one keepalive interval (%s) of the force-release", interval)
	}
	t.Logf("told %s after the force-release", time.Since(forcedAt).Round(time.Millisecond))
	if l.CanStart() {
		t.Fatal("CanStart after the force-release")
	}
	l2, err := c.Acquire(t.Context(), "t/forced", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() == l.Token() || !holdExists(t, env, "t/forced") {
		t.Fatal("re-acquire after the force-release returned the stale lock instead of a new grant")
	}
}

// TestForceReleaseRevokingTheSessionSaysWhoAndWhy: a force-release that
// also revokes the holder's session ends the forced lock with who and why,
// not only "session expired"; the session's other locks expire.
func TestForceReleaseRevokingTheSessionSaysWhoAndWhy(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice)
	lost := make(chan error, 2)
	onFence := func(l *client.Lock) { lost <- l.Err() }
	forced, err := c.Acquire(t.Context(), "t/revoked/a", "std", onFence)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Acquire(t.Context(), "t/revoked/b", "std", onFence)
	if err != nil {
		t.Fatal(err)
	}
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	req, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/revoked/a", Reason: "stuck migration", RevokeSession: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatal("the locks were not lost within a keepalive interval")
		}
	}
	var fe *client.ForcedError
	if err := forced.Err(); !errors.As(err, &fe) || fe.Approver != lockdtest.Operator2 || fe.Reason != "stuck migration" {
		t.Errorf("the forced lock ended with %v, want who forced it and why", err)
	}
	if err := other.Err(); !errors.Is(err, client.ErrExpired) {
		t.Errorf("the session's other lock ended with %v, want ErrExpired", err)
	}
}

// TestReentryAfterTheDeadlinePassedIsNotTheOldHold: once the local
// deadline has passed, an Acquire must not hand out the hold, even if the
// fence timer has not run yet (a process resumed after a pause, a clock
// step). Found by the release gate: a paused re-entrant worker's second
// goroutine re-entered its dead hold as it resumed.
func TestReentryAfterTheDeadlinePassedIsNotTheOldHold(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	var step atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
	c := env.Client(t, lockdtest.Alice, client.WithClock(clock))
	l, err := c.Acquire(t.Context(), "t/late-reentry", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	step.Store(int64(15 * time.Second)) // past the deadline; the fence timer (real time) has not fired
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	l2, err := c.Acquire(ctx, "t/late-reentry", "std", func(*client.Lock) {})
	if err == nil && l2.Token() == l.Token() {
		t.Fatal("Acquire re-entered a hold whose local deadline had passed")
	}
	if l.Err() != client.ErrDeadline {
		t.Fatalf("the old lock ended with %v, want ErrDeadline", l.Err())
	}
}

// TestAnUncreditedKeepAliveDoesNotShiftLaterAnswers: when lockd cannot
// confirm the epoch for a while, it answers the keepalives of that time
// uncredited, one answer per request, so that later answers still match
// their own requests. (Skipping them instead left every later answer
// credited to the previous request: CanStart stayed false for good, and a
// second skip fenced the lock although everything had recovered.)
func TestAnUncreditedKeepAliveDoesNotShiftLaterAnswers(t *testing.T) {
	b := lockdtest.StartEmbedded(t, t.TempDir())
	t.Cleanup(b.Close)
	proxy := proxyTo(t, strings.TrimPrefix(b.Embedded.Config().AdvertiseClientUrls[0].String(), "http://"))
	kv, err := store.ConnectExternal(store.ExternalConfig{Endpoints: []string{"http://" + proxy.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kv.Close)
	reg := prometheus.NewRegistry()
	// lockd reads the epoch through the proxy; keepalives go straight to etcd.
	env := lockdtest.Start(t, lockdtest.Options{Backend: &store.Backend{Client: kv.Client, Leases: b.Leases}, Registry: reg, FreshStore: true})
	c := env.Client(t, lockdtest.Alice)
	l, err := c.Acquire(t.Context(), "t/uncredited", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	// lockd cannot confirm the epoch: a keepalive (every 5s) answered more
	// than 3s into the stall goes uncredited; the stall ends before the
	// deadline (14s after the last credited send).
	proxy.Stall(tcpproxy.Both)
	time.Sleep(9 * time.Second)
	proxy.Resume()
	if n := counter(t, reg, "lockd_keepalives_not_credited_total"); n == 0 {
		t.Fatal("setup: no keepalive was answered uncredited during the stall")
	}
	time.Sleep(12 * time.Second) // two keepalive intervals after the epoch reads recovered
	if l.Err() != nil || !l.CanStart() {
		t.Fatalf("after the epoch reads recovered: Err %v, CanStart %v; want the lock held and usable", l.Err(), l.CanStart())
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestShutdownInAnOutageFreesTheKeysOnceTheStoreIsBack: a holder that shuts
// down while etcd has no quorum keeps asking lockd to end its session, so
// its key is free within moments of quorum's return. Without that its hold
// lasts until the session's lease expires, and etcd renews every lease to a
// whole TTL when it elects a leader: the key would stay held for a TTL
// (15 s here) after the outage, so a hold gone sooner was ended by lockd.
func TestShutdownInAnOutageFreesTheKeysOnceTheStoreIsBack(t *testing.T) {
	cluster := lockdtest.StartCluster(t, t.TempDir())
	b, err := store.ConnectExternal(store.ExternalConfig{Endpoints: cluster.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	env := lockdtest.Start(t, lockdtest.Options{Backend: b, FreshStore: true, RequestTimeout: time.Second})
	c := env.Client(t, lockdtest.Alice)
	if _, err := c.Acquire(t.Context(), "t/shutdown", "", func(*client.Lock) {}); err != nil {
		t.Fatal(err)
	}
	cluster.Stop(1)
	cluster.Stop(2)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shut <- c.Shutdown(ctx)
	}()
	time.Sleep(4 * time.Second) // past Close's own bound: every attempt so far failed
	cluster.Restart(1, 2)
	back := time.Now()
	const ttl = 15 * time.Second // class t/std
	lockdtest.WaitFor(t, ttl-time.Second, "the hold to be ended before its lease could expire", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		resp, err := b.Client.Get(ctx, "/l/t/shutdown")
		return err == nil && len(resp.Kvs) == 0
	})
	t.Logf("hold ended %s after the members restarted", time.Since(back).Round(100*time.Millisecond))
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return once the session was ended")
	}
}
