package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Durable waiters in these tests are woken only by their watches: polling
// is set to an hour, so a test that passes did not depend on it.
const noPoll = time.Hour

// twoArbiters is two lockds on one etcd.
func twoArbiters(t *testing.T) (*lockdtest.Env, *lockdtest.Env) {
	t.Helper()
	a := lockdtest.Start(t, lockdtest.Options{PollInterval: noPoll})
	b := lockdtest.Start(t, lockdtest.Options{Backend: a.Backend, PollInterval: noPoll})
	return a, b
}

// lineLen is the number of waiters in key's durable line.
func lineLen(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), keyspace.QueueRange(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// eventually fails the test unless cond holds within d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func noFence(*client.Lock) {}

// within is the first value on ch within d; it fails the test without one.
func within(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("no %s within %s", what, d)
		return nil
	}
}

// putWaiter puts session's waiter key for key in its durable line (on its
// lease) as if an arbiter had: one that then died, or whose caller left.
func putWaiter(t *testing.T, env *lockdtest.Env, key string, session int64, queued, deadline time.Time) {
	t.Helper()
	rec, _ := json.Marshal(keyspace.Waiter{Identity: lockdtest.Bob, Session: session, Class: "t/fifo",
		QueuedAt: queued.UnixNano(), Deadline: deadline.UnixNano()})
	if _, err := env.Backend.Client.Put(t.Context(), keyspace.QueueKey(key, session), string(rec), clientv3.WithLease(clientv3.LeaseID(session))); err != nil {
		t.Fatal(err)
	}
}

// TestDurableWaitersAreGrantedInArrivalOrderAcrossArbiters: waiters that
// joined a durable line through two arbiters, alternating, are granted in
// the order they joined, whichever arbiter serves each.
func TestDurableWaitersAreGrantedInArrivalOrderAcrossArbiters(t *testing.T) {
	a, b := twoArbiters(t)
	const key = "t/fifo/order"
	first, err := a.Client(t, lockdtest.Alice).Acquire(t.Context(), key, "fifo", noFence)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		who string
		tok uint64
	}
	granted := make(chan grant, 4)
	envs := []*lockdtest.Env{b, a, b, a}
	for i, env := range envs {
		who := lockdtest.Worker(i)
		c := env.Client(t, who)
		go func() {
			l, err := c.Acquire(context.Background(), key, "fifo", noFence, client.Wait(30*time.Second))
			if err != nil {
				t.Errorf("%s: %v", who, err)
				granted <- grant{who: who}
				return
			}
			granted <- grant{who, l.Token()}
			time.Sleep(20 * time.Millisecond)
			_ = l.Release(context.Background())
		}()
		eventually(t, 5*time.Second, fmt.Sprintf("%s in line", who), func() bool { return lineLen(t, a.Backend.Client, key) == int64(i+1) })
	}
	if err := first.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	var prev uint64
	for i := range envs {
		g := <-granted
		if want := lockdtest.Worker(i); g.who != want {
			t.Fatalf("grant %d went to %s, want %s (arrival order)", i+1, g.who, want)
		}
		if g.tok <= prev {
			t.Fatalf("grant %d token %d not above %d", i+1, g.tok, prev)
		}
		prev = g.tok
	}
	if n := lineLen(t, a.Backend.Client, key); n != 0 {
		t.Errorf("%d waiter keys left in the line", n)
	}
}

// TestNotHeadIsNeverGranted: a free key with a live waiter in its durable
// line is granted to nobody else, of any class, with or without a wait,
// until that waiter has had it. A key of a best-effort class has a line
// only when a class change moved it from a durable class while waiters were
// in it; its grants compare the line too.
func TestNotHeadIsNeverGranted(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{PollInterval: noPoll})
	const key = "t/fifo/head"
	// A waiter that joined through an arbiter that then died: its key is in
	// line, on a live session, and nobody is serving it.
	lc, _ := env.Raw(t, lockdtest.Bob)
	bob := openSession(t, lc, 5*time.Second)
	defer keepRenewing(t, lc, bob)()
	putWaiter(t, env, key, bob, time.Now(), time.Now().Add(time.Minute))
	const moved = "t/moved-from-fifo/head" // class std now
	putWaiter(t, env, moved, bob, time.Now(), time.Now().Add(time.Minute))

	alice, _ := env.Raw(t, lockdtest.Alice)
	for _, tc := range []struct {
		key, class string
		ttl        time.Duration
	}{{key, "fifo", 5 * time.Second}, {moved, "std", 15 * time.Second}} {
		sid := openSession(t, alice, tc.ttl)
		if _, err := acquire(t.Context(), alice, sid, tc.key, tc.class, 0); status.Code(err) != codes.Aborted {
			t.Errorf("%s, no wait: granted past a live durable waiter (err %v)", tc.class, err)
		}
		if _, err := acquire(t.Context(), alice, sid, tc.key, tc.class, 700*time.Millisecond); status.Code(err) != codes.Aborted {
			t.Errorf("%s, waiting: granted past a live durable waiter (err %v)", tc.class, err)
		}
	}
	for _, k := range []string{key, moved} {
		if n := lineLen(t, env.Backend.Client, k); n != 1 {
			t.Fatalf("%s: line has %d waiters, want only Bob's (the others left when their waits ended)", k, n)
		}
	}

	// Bob asks again on the same session: he resumes his place, is head,
	// and is granted; his waiter key goes in the same transaction.
	resp, err := acquire(t.Context(), lc, bob, key, "fifo", 0)
	if err != nil {
		t.Fatalf("the head's own acquire: %v", err)
	}
	if n := lineLen(t, env.Backend.Client, key); n != 0 {
		t.Errorf("line has %d waiters after the head's grant", n)
	}
	if _, err := lc.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: bob, Key: key, Token: resp.GetToken().GetValue()}); err != nil {
		t.Fatal(err)
	}
	sid := openSession(t, alice, 5*time.Second)
	if _, err := acquire(t.Context(), alice, sid, key, "", 0); err != nil {
		t.Errorf("grant once the line is empty: %v", err)
	}
}

// TestDurableWaiterKeepsItsPlaceAcrossAnArbiterRestart: a waiter whose
// lockd stops keeps its place; a waiter behind it on another lockd is not
// granted meanwhile; the first asks again (on another lockd, same session)
// and is granted first.
func TestDurableWaiterKeepsItsPlaceAcrossAnArbiterRestart(t *testing.T) {
	a, b := twoArbiters(t)
	const key = "t/fifo/restart"
	alice, _ := a.Raw(t, lockdtest.Alice)
	holder := openSession(t, alice, 5*time.Second)
	defer keepRenewing(t, alice, holder)()
	held, err := acquire(t.Context(), alice, holder, key, "fifo", 0)
	if err != nil {
		t.Fatal(err)
	}

	// W0 waits through b, W1 behind it through a.
	w0b, _ := b.Raw(t, lockdtest.Worker(0))
	w0 := openSession(t, w0b, 5*time.Second)
	w0a, _ := a.Raw(t, lockdtest.Worker(0))
	defer keepRenewing(t, w0a, w0)() // through a: b is about to stop
	w0done := make(chan error, 1)
	go func() { _, err := acquire(context.Background(), w0b, w0, key, "fifo", 30*time.Second); w0done <- err }()
	eventually(t, 5*time.Second, "w0 in line", func() bool { return lineLen(t, a.Backend.Client, key) == 1 })
	w1a, _ := a.Raw(t, lockdtest.Worker(1))
	w1 := openSession(t, w1a, 5*time.Second)
	defer keepRenewing(t, w1a, w1)()
	w1done := make(chan error, 1)
	go func() { _, err := acquire(context.Background(), w1a, w1, key, "fifo", 30*time.Second); w1done <- err }()
	eventually(t, 5*time.Second, "w1 in line", func() bool { return lineLen(t, a.Backend.Client, key) == 2 })

	b.Stop()
	if err := <-w0done; err == nil {
		t.Fatal("w0's wait through the stopped lockd succeeded")
	}
	if _, err := alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: holder, Key: key, Token: held.GetToken().GetValue()}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w1done:
		t.Fatalf("w1 was answered (err %v) while w0, ahead of it, kept its place", err)
	case <-time.After(1500 * time.Millisecond):
	}
	got, err := acquire(t.Context(), w0a, w0, key, "fifo", 5*time.Second)
	if err != nil {
		t.Fatalf("w0 asking again through a: %v", err)
	}
	if _, err := w0a.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: w0, Key: key, Token: got.GetToken().GetValue()}); err != nil {
		t.Fatal(err)
	}
	if err := within(t, w1done, 5*time.Second, "w1's grant after w0 released"); err != nil {
		t.Fatalf("w1 after w0: %v", err)
	}
}

// TestDurableWaiterWhoseSessionDiesLeavesTheLine: a waiter's session that
// is no longer renewed takes its place in line with it at the TTL, and the
// waiter behind it moves up, woken by the delete (no polling).
func TestDurableWaiterWhoseSessionDiesLeavesTheLine(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{PollInterval: noPoll})
	const key = "t/fifo/lapse"
	holder, err := env.Client(t, lockdtest.Alice).Acquire(t.Context(), key, "fifo", noFence)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := env.Raw(t, lockdtest.Worker(0))
	dying := openSession(t, raw, 5*time.Second) // never renewed
	dyingDone := make(chan error, 1)
	go func() {
		_, err := acquire(context.Background(), raw, dying, key, "fifo", 30*time.Second)
		dyingDone <- err
	}()
	eventually(t, 5*time.Second, "the dying waiter in line", func() bool { return lineLen(t, env.Backend.Client, key) == 1 })
	behind := env.Client(t, lockdtest.Worker(1))
	granted := make(chan error, 1)
	go func() {
		l, err := behind.Acquire(context.Background(), key, "fifo", noFence, client.Wait(30*time.Second))
		if err == nil {
			err = l.Release(context.Background())
		}
		granted <- err
	}()
	eventually(t, 5*time.Second, "the second waiter in line", func() bool { return lineLen(t, env.Backend.Client, key) == 2 })

	// The holder lets go while the dying waiter is still head: nobody else
	// may have it until that waiter is gone.
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Its own arbiter may have granted it (head, free) before its session
	// lapsed: also fine, as long as the one behind comes next.
	if err := within(t, dyingDone, 10*time.Second, "the end of the dying waiter's wait"); err != nil && !errors.Is(client.Decode(err), client.ErrSessionNotFound) {
		t.Fatalf("the dying waiter: %v", err)
	}
	if err := within(t, granted, 10*time.Second, "the grant of the waiter behind"); err != nil {
		t.Fatalf("the waiter behind: %v", err)
	}
}

// TestAbandonedDurableWaiterIsRemoved: a waiter whose caller is alive but
// gave up long ago (its deadline far behind) does not block the line.
func TestAbandonedDurableWaiterIsRemoved(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{PollInterval: noPoll})
	const key = "t/fifo/abandoned"
	lc, _ := env.Raw(t, lockdtest.Bob)
	bob := openSession(t, lc, 5*time.Second)
	defer keepRenewing(t, lc, bob)()
	past := time.Now().Add(-time.Hour)
	putWaiter(t, env, key, bob, past, past.Add(time.Minute))
	l, err := env.Client(t, lockdtest.Alice).Acquire(t.Context(), key, "fifo", noFence, client.Wait(5*time.Second))
	if err != nil {
		t.Fatalf("behind an abandoned waiter: %v", err)
	}
	_ = l.Release(t.Context())
	if n := lineLen(t, env.Backend.Client, key); n != 0 {
		t.Errorf("%d waiter keys left", n)
	}
}

// TestInspectShowsTheDurableLineInOrder: Inspect lists the durable line,
// the same from every arbiter, in grant order.
func TestInspectShowsTheDurableLineInOrder(t *testing.T) {
	a, b := twoArbiters(t)
	const key = "t/fifo/inspect"
	first, err := a.Client(t, lockdtest.Alice).Acquire(t.Context(), key, "fifo", noFence)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Release(context.Background()) }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, env := range []*lockdtest.Env{b, a} {
		c := env.Client(t, lockdtest.Worker(i))
		go func() { _, _ = c.Acquire(ctx, key, "fifo", noFence, client.Wait(30*time.Second)) }()
		eventually(t, 5*time.Second, "in line", func() bool { return lineLen(t, a.Backend.Client, key) == int64(i+1) })
	}
	// Each lockd counts the waiter it serves (ListHolds and top's hot keys).
	eventually(t, 5*time.Second, "one waiter served on each lockd", func() bool {
		return a.Arbiter.QueueLen(key) == 1 && b.Arbiter.QueueLen(key) == 1
	})
	for _, env := range []*lockdtest.Env{a, b} {
		lc, _ := env.Raw(t, lockdtest.Alice)
		in, err := lc.Inspect(t.Context(), &lockv1.InspectRequest{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if in.GetWaiters() != 2 || len(in.GetQueue()) != 2 {
			t.Fatalf("inspect: %d waiters, queue %v", in.GetWaiters(), in.GetQueue())
		}
		for i, w := range in.GetQueue() {
			if w.GetIdentity() != lockdtest.Worker(i) || w.GetPosition() != int32(i+1) || !w.GetDurable() {
				t.Errorf("queue[%d] = %v, want %s at %d, durable", i, w, lockdtest.Worker(i), i+1)
			}
		}
	}
}

// TestGoClientKeepsItsDurablePlaceAcrossALockdRestart: a Go client waiting
// in a durable line through a lockd that restarts asks again on the same
// session and is granted before a waiter that joined after it through
// another lockd.
func TestGoClientKeepsItsDurablePlaceAcrossALockdRestart(t *testing.T) {
	addr := lockdtest.FreeAddr(t)
	a := lockdtest.Start(t, lockdtest.Options{Addr: addr, PollInterval: noPoll})
	b := lockdtest.Start(t, lockdtest.Options{Backend: a.Backend, PollInterval: noPoll})
	const key = "t/fifo/client-restart"
	holder, err := b.Client(t, lockdtest.Alice).Acquire(t.Context(), key, "fifo", noFence)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	wait := func(env *lockdtest.Env, who string) {
		c := env.Client(t, who)
		go func() {
			l, err := c.Acquire(context.Background(), key, "fifo", noFence, client.Wait(30*time.Second))
			if err != nil {
				t.Errorf("%s: %v", who, err)
				order <- who + " failed"
				return
			}
			order <- who
			_ = l.Release(context.Background())
		}()
	}
	wait(a, lockdtest.Worker(0)) // through the lockd that restarts
	eventually(t, 5*time.Second, "w0 in line", func() bool { return lineLen(t, a.Backend.Client, key) == 1 })
	wait(b, lockdtest.Worker(1))
	eventually(t, 5*time.Second, "w1 in line", func() bool { return lineLen(t, a.Backend.Client, key) == 2 })

	a.Stop()
	lockdtest.Start(t, lockdtest.Options{Addr: addr, Backend: a.Backend, PollInterval: noPoll})
	time.Sleep(500 * time.Millisecond) // w0's client asks again meanwhile
	if n := lineLen(t, a.Backend.Client, key); n != 2 {
		t.Fatalf("line has %d waiters across the restart, want 2", n)
	}
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{lockdtest.Worker(0), lockdtest.Worker(1)} {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("granted %s, want %s (w0 joined first and kept its place)", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not granted", want)
		}
	}
}
