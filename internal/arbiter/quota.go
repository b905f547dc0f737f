package arbiter

import (
	"fmt"
	"sync"
)

// waiterQuota counts, per identity, the Acquires waiting on this lockd, in
// any line: one identity cannot fill lockd's memory with waiters
// (--max-waiters-per-identity). It belongs to the arbiter, not to a cell,
// so the limit holds across every cluster the arbiter fronts.
type waiterQuota struct {
	max int
	mu  sync.Mutex
	n   map[string]int // identity -> waiters counted now
}

func newWaiterQuota(max int) *waiterQuota {
	return &waiterQuota{max: max, n: map[string]int{}}
}

// take counts a waiter of identity, or refuses it with ErrQuota when the
// identity has as many as it may.
func (q *waiterQuota) take(identity string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.n[identity]; n >= q.max {
		return fmt.Errorf("%w: %s has %d waiters queued on this lockd (limit %d, --max-waiters-per-identity); "+
			"wait for fewer keys at once", ErrQuota, identity, n, q.max)
	}
	q.n[identity]++
	return nil
}

// give uncounts a waiter of identity that take counted.
func (q *waiterQuota) give(identity string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n[identity]--; q.n[identity] <= 0 {
		delete(q.n, identity)
	}
}
