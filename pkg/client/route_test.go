package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// fleet is three lockds in front of one etcd, as behind a balancer.
type fleet struct {
	envs []*lockdtest.Env
	raw  []lockv1.LockServiceClient
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	first := lockdtest.Start(t, lockdtest.Options{})
	f := &fleet{envs: []*lockdtest.Env{first}}
	for range 2 {
		f.envs = append(f.envs, lockdtest.Start(t, lockdtest.Options{Backend: first.Backend}))
	}
	for _, e := range f.envs {
		raw, _ := e.Raw(t, lockdtest.Operator)
		f.raw = append(f.raw, raw)
	}
	return f
}

// targets is the client target naming every lockd of the fleet.
func (f *fleet) targets() string {
	var addrs []string
	for _, e := range f.envs {
		addrs = append(addrs, e.Addr)
	}
	return strings.Join(addrs, ",")
}

// waiters is how many waiters each lockd (by index) has queued for key;
// -1 for a lockd that is stopped.
func (f *fleet) waiters(t *testing.T, key string, stopped map[int]bool) []int {
	t.Helper()
	out := make([]int, len(f.raw))
	for i, raw := range f.raw {
		if stopped[i] {
			out[i] = -1
			continue
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		r, err := raw.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		cancel()
		if err != nil {
			t.Fatalf("inspect on lockd %d: %v", i, err)
		}
		out[i] = int(r.GetWaiters())
	}
	return out
}

func sum(ns []int) int {
	n := 0
	for _, v := range ns {
		n += max(v, 0)
	}
	return n
}

// inversions counts the pairs granted in the other order than they queued:
// order[i] is the arrival index of the i-th grant.
func inversions(order []int) int {
	n := 0
	for i := range order {
		for j := i + 1; j < len(order); j++ {
			if order[j] < order[i] {
				n++
			}
		}
	}
	return n
}

// queueAndRelease has 64 clients wait, one after another, for key while
// holder holds it, each made by dial(i); then the holder releases, and each
// waiter releases as soon as it is granted. It returns the arrival index of
// each grant in grant order, and the waiters per lockd once all queued.
func queueAndRelease(t *testing.T, f *fleet, key string, holder *client.Client, dial func(i int) *client.Client) (order, perLockd []int) {
	t.Helper()
	ctx := t.Context()
	held, err := holder.Acquire(ctx, key, "", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	var (
		mu      sync.Mutex
		granted []int
		wg      sync.WaitGroup
	)
	errs := make(chan error, n)
	for i := range n {
		c := dial(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, key, "", func(*client.Lock) {}, client.Wait(60*time.Second))
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			mu.Lock()
			granted = append(granted, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				errs <- fmt.Errorf("waiter %d release: %w", i, err)
			}
		}()
		// The next waiter comes once this one is in a line.
		deadline := time.Now().Add(10 * time.Second)
		for sum(f.waiters(t, key, nil)) < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued: %v", i, f.waiters(t, key, nil))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	perLockd = f.waiters(t, key, nil)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return granted, perLockd
}

// TestWaitersForAKeyQueueInOneLockdsLine: with several lockds, a client
// routes every call about a key to the lockd the key hashes to, so 64
// waiters from 64 clients queue in one line and are granted in the order
// they came; without that routing (each client on one lockd, as behind a
// plain balancer) the lines are three and the order is not kept.
func TestWaitersForAKeyQueueInOneLockdsLine(t *testing.T) {
	f := startFleet(t)
	t.Run("routed by key", func(t *testing.T) {
		const key = "t/route/affine"
		holder := f.client(t, lockdtest.Alice, f.targets())
		order, perLockd := queueAndRelease(t, f, key, holder, func(i int) *client.Client {
			return f.client(t, lockdtest.Worker(i), f.targets())
		})
		lines := 0
		for _, n := range perLockd {
			if n > 0 {
				lines++
			}
		}
		if lines != 1 || sum(perLockd) != 64 {
			t.Fatalf("waiters per lockd %v: want all 64 in one lockd's line", perLockd)
		}
		if inv := inversions(order); inv != 0 || len(order) != 64 {
			t.Fatalf("%d grants with %d inversions (grant order by arrival: %v); want 64 in arrival order", len(order), inv, order)
		}
		t.Logf("waiters per lockd %v; 64 grants, 0 inversions", perLockd)
	})
	t.Run("one lockd per client", func(t *testing.T) {
		const key = "t/route/spread"
		holder := f.client(t, lockdtest.Alice, f.envs[0].Addr)
		order, perLockd := queueAndRelease(t, f, key, holder, func(i int) *client.Client {
			return f.client(t, lockdtest.Worker(i), f.envs[i%3].Addr)
		})
		if perLockd[0] == 0 || perLockd[1] == 0 || perLockd[2] == 0 {
			t.Fatalf("waiters per lockd %v: want them spread over the three", perLockd)
		}
		inv := inversions(order)
		if inv == 0 || len(order) != 64 {
			t.Fatalf("%d grants with %d inversions; want 64 grants out of arrival order", len(order), inv)
		}
		t.Logf("waiters per lockd %v; 64 grants, %d inversions (of %d pairs)", perLockd, inv, 64*63/2)
	})
}

// TestAStoppedLockdsWaitersMoveToOneOtherLockd: when the lockd a key hashes
// to stops, its waiters' calls go to the next lockd on the ring, the same
// one for every client, where they queue again and are granted.
func TestAStoppedLockdsWaitersMoveToOneOtherLockd(t *testing.T) {
	f := startFleet(t)
	const key, n = "t/route/moved", 16
	ctx := t.Context()
	holder := f.client(t, lockdtest.Alice, f.targets())
	held, err := holder.Acquire(ctx, key, "", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		c := f.client(t, lockdtest.Worker(i), f.targets())
		wg.Go(func() {
			l, err := c.Acquire(ctx, key, "", func(*client.Lock) {}, client.Wait(60*time.Second))
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			if err := l.Release(ctx); err != nil {
				errs <- fmt.Errorf("waiter %d release: %w", i, err)
			}
		})
	}
	// lineOf is the lockd whose line holds all n waiters, once one does.
	lineOf := func(stopped map[int]bool, d time.Duration, what string) int {
		line := -1
		waitFor(t, d, func() bool {
			for i, w := range f.waiters(t, key, stopped) {
				if w == n {
					line = i
				}
			}
			return line >= 0
		}, what)
		return line
	}
	line := lineOf(nil, 10*time.Second, "all waiters in one lockd's line")
	f.envs[line].Stop()
	stopped := map[int]bool{line: true}
	next := lineOf(stopped, 20*time.Second, "the waiters in one other lockd's line")
	t.Logf("waiters moved from lockd %d to lockd %d: %v", line, next, f.waiters(t, key, stopped))
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// client is a client of the fleet (target: one address, or several) for
// identity id, closed when the test ends.
func (f *fleet) client(t *testing.T, id, target string) *client.Client {
	t.Helper()
	c, err := client.New(client.WithTarget(target), client.WithInsecureIdentity(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAnUnprotectedLockIsRenewedByTheLockdThatGrantedIt: without an etcd
// quorum a lockd grants an open class's keys from its own memory, on a
// session only it knows. A client routing over several lockds opens that
// session, and renews it, through the key it was opened for: two keepalive
// intervals into the outage the lock is still safe, whichever lockd the
// client's other keepalives go to.
func TestAnUnprotectedLockIsRenewedByTheLockdThatGrantedIt(t *testing.T) {
	cluster := lockdtest.StartCluster(t, t.TempDir())
	var envs []*lockdtest.Env
	var addrs []string
	for i := range 3 {
		b, err := store.ConnectExternal(store.ExternalConfig{Endpoints: cluster.Endpoints()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		env := lockdtest.Start(t, lockdtest.Options{Backend: b, FreshStore: i == 0, Classes: lockdtest.OpenClasses(),
			OpenAfter: 2 * time.Second, RequestTimeout: time.Second})
		envs = append(envs, env)
		addrs = append(addrs, env.Addr)
	}
	c, err := client.New(client.WithTarget(strings.Join(addrs, ",")), client.WithInsecureIdentity(lockdtest.Alice))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// A protected lock first, so the client's shared keepalive stream is
	// open on some lockd before the outage.
	if _, err := c.Acquire(t.Context(), "t/before", "", func(*client.Lock) {}); err != nil {
		t.Fatal(err)
	}
	cluster.Stop(1)
	cluster.Stop(2)
	for _, env := range envs {
		lockdtest.WaitFor(t, 30*time.Second, "the open posture", func() bool { return env.Arbiter.Posture() == "open" })
	}
	var locks []*client.Lock
	for _, key := range []string{"t/cache/a", "t/cache/b", "t/cache/c", "t/cache/d"} {
		l, err := c.Acquire(t.Context(), key, "", func(*client.Lock) {})
		if err != nil || !l.Unprotected() {
			t.Fatalf("unprotected lock of %s: %v", key, err)
		}
		locks = append(locks, l)
	}
	const ttl = 30 * time.Second // class cache
	time.Sleep(2*ttl/3 + 2*time.Second)
	for _, l := range locks {
		if l.Err() != nil || l.State() != client.Safe {
			t.Fatalf("two keepalive intervals into the outage the unprotected lock of %s is %s (%v); want safe", l.Key(), l.State(), l.Err())
		}
	}
	for _, env := range envs {
		if got := env.Arbiter.Posture(); got != "open" {
			t.Fatalf("posture %s: the outage ended early, the test proves nothing", got)
		}
	}
}
