package arbiter

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
)

// heldBatch makes cell c's committer behave as if a batch were in flight,
// runs calls concurrently, waits until n parts wait for the next batch and
// sends them as one. It returns the size of the batch sent and each call's
// error in order.
func heldBatch(t *testing.T, c *cell, n int, calls []func() error) (int, []error) {
	t.Helper()
	m := c.commits
	m.mu.Lock()
	if m.sending {
		m.mu.Unlock()
		t.Fatal("a batch is in flight already")
	}
	m.sending = true
	m.mu.Unlock()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		waiting := len(m.pending)
		m.mu.Unlock()
		if waiting >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d parts waiting for the next batch after 10s, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.mu.Lock()
	batch := m.takeLocked()
	m.mu.Unlock()
	m.send(batch, false)
	wg.Wait()
	return len(batch), errs
}

// TestConcurrentGrantsOfDistinctKeysCommitTogetherAndARefusedKeyLeavesTheRestGranted:
// 64 grants of distinct keys that arrive while a batch is in flight commit
// in one etcd transaction (fewer than 64: one), each key's token above its
// previous one although they share a value; a key held by another session
// is refused in that same transaction while the other 63 are granted. The
// 64 releases that follow, one of them with a stale token, commit together
// the same way: the stale one is refused and the other holder keeps its
// key. Both on the coord cluster (the session's own lease) and on an entity
// cluster (the session's lease there), real etcd each.
func TestConcurrentGrantsOfDistinctKeysCommitTogetherAndARefusedKeyLeavesTheRestGranted(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()
	for _, tier := range []struct {
		prefix string
		c      *cell
	}{{"t/leader/", tc.coordC}, {"t/job/", tc.entC}} {
		t.Run(tier.c.name, func(t *testing.T) {
			s, err := a.OpenSession(ctx, alice, 15*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := a.OpenSession(ctx, bob, 15*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			const n, contended = 64, 13
			keys := make([]string, n)
			prev := make([]uint64, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("%sbatch-%02d", tier.prefix, i)
				g, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: keys[i]})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a.Release(ctx, alice, s, keys[i], g.Token); err != nil {
					t.Fatal(err)
				}
				prev[i] = g.Token
			}
			bobs, err := a.Acquire(ctx, AcquireRequest{Caller: bob, Session: sb, Key: keys[contended]})
			if err != nil {
				t.Fatal(err)
			}

			grants := make([]Grant, n)
			calls := make([]func() error, n)
			for i := range calls {
				calls[i] = func() (err error) {
					grants[i], err = a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: keys[i]})
					return err
				}
			}
			size, errs := heldBatch(t, tier.c, n, calls)
			if size != n {
				t.Fatalf("the batch carried %d parts, want all %d", size, n)
			}
			revs := map[int64]bool{}
			for i, err := range errs {
				if i == contended {
					if !errors.Is(err, ErrHeld) {
						t.Fatalf("%s, held by bob: %v; want ErrHeld", keys[i], err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v; want granted beside the refused key", keys[i], err)
				}
				if grants[i].Token <= prev[i] {
					t.Fatalf("%s: token %d not above its previous %d", keys[i], grants[i].Token, prev[i])
				}
				revs[grants[i].Revision] = true
			}
			if len(revs) >= n {
				t.Fatalf("%d grants committed at %d revisions: not group-committed", n-1, len(revs))
			}
			t.Logf("%d grants of distinct keys committed in %d etcd transaction(s); %s refused in the same batch", n-1, len(revs), keys[contended])

			// Releases, the contended key's with alice's old token.
			released := make([]bool, n)
			for i := range calls {
				calls[i] = func() (err error) {
					tok := grants[i].Token
					if i == contended {
						tok = prev[i]
					}
					released[i], err = a.Release(ctx, alice, s, keys[i], tok)
					return err
				}
			}
			if size, errs = heldBatch(t, tier.c, n, calls); size != n {
				t.Fatalf("the release batch carried %d parts, want %d", size, n)
			}
			for i, err := range errs {
				switch {
				case i == contended && !errors.Is(err, ErrStaleToken):
					t.Fatalf("release of %s with a stale token: %v; want ErrStaleToken", keys[i], err)
				case i != contended && (err != nil || !released[i]):
					t.Fatalf("release of %s: %v (released %v)", keys[i], err, released[i])
				}
			}
			resp, err := tier.c.cli.Get(ctx, holdKey(keys[contended]))
			if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != bobs.Revision {
				t.Fatalf("bob's hold of %s after the batch: %v %v; want it untouched (revision %d)", keys[contended], resp, err, bobs.Revision)
			}
			if resp, err := tier.c.cli.Get(ctx, holdKey(tier.prefix+"batch-"), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
				t.Fatalf("holds left: %v %v; want bob's only", resp, err)
			}
		})
	}
}

// TestAGoneSessionInABatchFailsOnlyItsOwnGrant: a put on a lease etcd no
// longer has fails a whole Txn, so a batch guards each part with its
// session's record on the lease. A session whose lease was revoked behind
// lockd's back is refused (ErrSessionNotFound) while the other grants of
// its batch commit.
func TestAGoneSessionInABatchFailsOnlyItsOwnGrant(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := a.OpenSession(ctx, bob, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.coord.Client.Revoke(ctx, clientv3.LeaseID(gone)); err != nil {
		t.Fatal(err)
	}
	const n = 8
	calls := make([]func() error, n+1)
	for i := range n {
		calls[i] = func() error {
			_, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: fmt.Sprintf("t/leader/gone-%d", i)})
			return err
		}
	}
	// The cell's own grant transaction: Acquire would first ask the
	// session table, which may already have heard of the revoke.
	calls[n] = func() error {
		_, err := tc.coordC.tryGrant(ctx, "t/leader/gone-bob", a.encodeHold(bob.String(), gone, &class.Class{Namespace: "t", Name: "leader"}), gone, linePos{})
		return err
	}
	size, errs := heldBatch(t, tc.coordC, n+1, calls)
	if size != n+1 {
		t.Fatalf("batch of %d, want %d", size, n+1)
	}
	if !errors.Is(errs[n], ErrSessionNotFound) {
		t.Fatalf("grant on the revoked session: %v; want ErrSessionNotFound", errs[n])
	}
	for i, err := range errs[:n] {
		if err != nil {
			t.Fatalf("grant %d beside the revoked session's: %v; want granted", i, err)
		}
	}
}

// TestAnIdleArbiterSendsAGrantAtOnce: with nothing in flight a grant leaves
// alone, from the caller's own goroutine, and the committer is idle again
// when it returns: no timer, no batch to wait for.
func TestAnIdleArbiterSendsAGrantAtOnce(t *testing.T) {
	tc := startTwoClusters(t)
	a, ctx := tc.a, t.Context()
	s, err := a.OpenSession(ctx, alice, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := a.Acquire(ctx, AcquireRequest{Caller: alice, Session: s, Key: fmt.Sprintf("t/leader/idle-%d", i)}); err != nil {
			t.Fatal(err)
		}
		m := tc.coordC.commits
		m.mu.Lock()
		sending, waiting := m.sending, len(m.pending)
		m.mu.Unlock()
		if sending || waiting != 0 {
			t.Fatalf("after a lone grant: sending %v, %d waiting; want idle", sending, waiting)
		}
	}
}

// TestABatchKeepsToEtcdsLimits: parts are taken in arrival order, one per
// key, against one epoch record, within the batch size and etcd's
// --max-txn-ops (the batch's width plus its deepest part's needs).
func TestABatchKeepsToEtcdsLimits(t *testing.T) {
	mk := func(key string, rev int64, need int) *part {
		return &part{key: key, epochRev: rev, need: need, size: 100}
	}
	for _, tc := range []struct {
		name          string
		maxBatch, ops int
		pending       []*part
		want, left    []string
	}{
		{"all fit", 64, 128, []*part{mk("a", 1, 10), mk("b", 1, 10), mk("c", 1, 10)}, []string{"a", "b", "c"}, nil},
		{"a key once", 64, 128, []*part{mk("a", 1, 10), mk("a", 1, 10), mk("b", 1, 10)}, []string{"a", "b"}, []string{"a"}},
		{"one epoch record", 64, 128, []*part{mk("a", 1, 10), mk("b", 2, 10), mk("c", 1, 10)}, []string{"a", "c"}, []string{"b"}},
		{"batch size", 2, 128, []*part{mk("a", 1, 10), mk("b", 1, 10), mk("c", 1, 10)}, []string{"a", "b"}, []string{"c"}},
		// width 3 + need 10 = 13 > 12: c waits.
		{"max txn ops", 64, 12, []*part{mk("a", 1, 10), mk("b", 1, 10), mk("c", 1, 10)}, []string{"a", "b"}, []string{"c"}},
		{"a deep part", 64, 40, []*part{mk("a", 1, 10), mk("b", 1, 39), mk("c", 1, 10)}, []string{"a", "c"}, []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &committer{maxBatch: tc.maxBatch, maxOps: tc.ops, pending: tc.pending}
			var got, left []string
			for _, p := range m.takeLocked() {
				got = append(got, p.key)
			}
			for _, p := range m.pending {
				left = append(left, p.key)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || fmt.Sprint(left) != fmt.Sprint(tc.left) {
				t.Fatalf("batch %v, left %v; want %v, left %v", got, left, tc.want, tc.left)
			}
		})
	}
}
