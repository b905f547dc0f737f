package gate

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/lockd-dev/lockd/ci/internal/classdir"
)

// writeClasses writes the gate's lock classes: one fenced class with ttl,
// the same with durable fairness and the open class (both of the coord
// tier when the tiers are split), and a grant per worker except worker
// drop (-1 keeps them all).
func (r *run) writeClasses(ttl time.Duration, drop int) error {
	var ids []string
	for i, id := range r.grantOf {
		if i != drop {
			ids = append(ids, id)
		}
	}
	c := classdir.Fenced{Namespace: Namespace, Name: ClassName, DurableName: DurableClassName, Resource: "gate-store", TTL: ttl}
	if r.split() {
		// On the coord cluster: the durable class, and the open class,
		// whose open posture is the coord cluster's (lockd opens when the
		// cluster of the sessions loses quorum).
		c.DurableTier, c.OpenTier = "coord", "coord"
	}
	if len(r.openKeys) > 0 {
		c.OpenName, c.OpenTTL = OpenClassName, OpenTTL
	}
	return classdir.Write(filepath.Join(r.dir, "classes"), c, ids)
}

func workerID(i int) string { return fmt.Sprintf("spiffe://gate.local/worker/%d", i) }

// childWorker reports whether worker i runs its units of work as
// supervised children (one worker in three; with two arbiters, each has
// one).
func childWorker(i int) bool { return i%3 == 2 }
