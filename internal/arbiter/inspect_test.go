package arbiter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestInspectShowsSessionTTLLeftAndQueueInOrder: Inspect says how long the
// holder's session has left by the store's clock, and who waits in the
// order they will be granted, with how long each has waited: from the
// arbiter and on the wire. When the holder goes, the next in line holds and
// the queue moves up.
func TestInspectShowsSessionTTLLeftAndQueueInOrder(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	const key = "t/inspect-queue"
	alice, _ := env.Raw(t, lockdtest.Alice)
	sa := openSession(t, alice, 15*time.Second)
	if _, err := acquire(t.Context(), alice, sa, key, "std", 0); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	ids := []string{lockdtest.Bob, lockdtest.Worker(1)}
	sids := make([]int64, len(ids))
	for i, id := range ids {
		lc, _ := env.Raw(t, id)
		sids[i] = openSession(t, lc, 15*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = acquire(ctx, lc, sids[i], key, "std", time.Minute)
		}()
		lockdtest.WaitFor(t, 5*time.Second, id+" queued", func() bool { return env.Arbiter.QueueLen(key) == i+1 })
	}

	in, err := env.Arbiter.Inspect(t.Context(), identity.Workload(lockdtest.Alice), key)
	if err != nil || !in.Held || in.Hold.Holder != lockdtest.Alice || in.Hold.Waiters != 2 || len(in.Queue) != 2 {
		t.Fatalf("Inspect: %+v %v; want held by alice with 2 waiters", in, err)
	}
	if left := in.Hold.SessionTTLLeft; left <= 0 || left > 15*time.Second {
		t.Fatalf("session TTL left %s; want in (0, 15s], the std class TTL", left)
	}
	for i, w := range in.Queue {
		if w.Position != i+1 || w.Identity != ids[i] || w.Session != sids[i] || w.Waited <= 0 {
			t.Fatalf("queue[%d] = %+v; want position %d, %s, session %d, waited > 0", i, w, i+1, ids[i], sids[i])
		}
	}
	if in.Queue[0].Waited < in.Queue[1].Waited {
		t.Fatalf("bob, first in line, waited %s, less than the second's %s", in.Queue[0].Waited, in.Queue[1].Waited)
	}

	resp, err := alice.Inspect(t.Context(), &lockv1.InspectRequest{Key: key})
	if err != nil || resp.GetWaiters() != 2 || len(resp.GetQueue()) != 2 {
		t.Fatalf("Inspect on the wire: %v %v; want 2 waiters and their queue", resp, err)
	}
	if resp.GetClass() != "t/std" || resp.GetTier() != "entity" || resp.GetCluster() != "embedded" {
		t.Fatalf("class %q tier %q cluster %q on the wire; want t/std, its tier entity, and the embedded cluster lockd fronts",
			resp.GetClass(), resp.GetTier(), resp.GetCluster())
	}
	if left := resp.GetHold().GetSessionTtlLeft(); left == nil || left.AsDuration() <= 0 || left.AsDuration() > 15*time.Second {
		t.Fatalf("session_ttl_left on the wire: %v; want in (0, 15s]", left)
	}
	for i, w := range resp.GetQueue() {
		if w.GetPosition() != int32(i+1) || w.GetIdentity() != ids[i] || w.GetSessionId() != sids[i] || w.GetWaited().AsDuration() <= 0 {
			t.Fatalf("queue[%d] on the wire = %v; want position %d, %s, session %d, waited > 0", i, w, i+1, ids[i], sids[i])
		}
	}
	list, err := alice.ListHolds(t.Context(), &lockv1.ListHoldsRequest{Prefix: "t/"})
	if err != nil || len(list.GetHolds()) != 1 || list.GetHolds()[0].GetSessionTtlLeft() != nil {
		t.Fatalf("ListHolds: %v %v; want one hold, session_ttl_left unset (Inspect's only)", list, err)
	}

	if _, err := alice.CloseSession(t.Context(), &lockv1.CloseSessionRequest{SessionId: sa}); err != nil {
		t.Fatal(err)
	}
	lockdtest.WaitFor(t, 10*time.Second, "bob holds", func() bool {
		in, err = env.Arbiter.Inspect(t.Context(), identity.Workload(lockdtest.Alice), key)
		return err == nil && in.Hold.Holder == lockdtest.Bob
	})
	if in.Hold.Session != sids[0] || len(in.Queue) != 1 || in.Queue[0].Position != 1 || in.Queue[0].Identity != ids[1] {
		t.Fatalf("after alice left: %+v; want bob holding, %s first in line", in, ids[1])
	}
}
