package arbiter_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestNoConsensusGrantOfAKeyWhileItsUnprotectedHolderMayBeLive: Alice holds
// t/cache/x unprotected when quorum returns. Until she has been told her
// lock ended (her next keepalive), or its deadline has passed, nobody is
// granted the key through etcd: Bob's Acquire without a wait is refused
// with OPEN_GRACE, and his waiting Acquire is granted only after Alice's
// lock ended.
func TestNoConsensusGrantOfAKeyWhileItsUnprotectedHolderMayBeLive(t *testing.T) {
	o := startOutage(t, lockdtest.Options{})
	const key = "t/cache/x"
	alice := o.env.Client(t, lockdtest.Alice)
	bob := o.env.Client(t, lockdtest.Bob)
	o.loseQuorum(t)
	var (
		mu    sync.Mutex
		ended time.Time
	)
	u, err := alice.Acquire(t.Context(), key, "", func(*client.Lock) {
		mu.Lock()
		ended = time.Now()
		mu.Unlock()
	})
	if err != nil || !u.Unprotected() {
		t.Fatalf("Alice's unprotected lock: %v", err)
	}
	o.regainQuorum(t)

	_, err = bob.Acquire(t.Context(), key, "", func(*client.Lock) {})
	if !errors.Is(err, client.ErrOpenGrace) {
		t.Fatalf("Bob without a wait, with Alice's unprotected lock %s: %v; want ErrOpenGrace", u.State(), err)
	}
	l, err := bob.Acquire(t.Context(), key, "", func(*client.Lock) {}, client.Wait(90*time.Second))
	granted := time.Now()
	if err != nil {
		t.Fatalf("Bob waiting: %v", err)
	}
	if l.Unprotected() || l.Token() == 0 {
		t.Fatalf("Bob's grant after the outage is unprotected")
	}
	mu.Lock()
	defer mu.Unlock()
	if ended.IsZero() || !granted.After(ended) {
		t.Fatalf("Bob was granted %s at %s while Alice's unprotected lock was %s (ended at %v)", key, granted.Format(time.StampMilli),
			u.State(), ended.Format(time.StampMilli))
	}
	if !errors.Is(u.Err(), client.ErrUnprotectedEnded) {
		t.Errorf("Alice's lock ended with %v, want ErrUnprotectedEnded", u.Err())
	}
	t.Logf("Alice's unprotected lock ended %s before Bob's grant", granted.Sub(ended).Round(time.Millisecond))
}
