package gate

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/lockd-dev/lockd/ci/internal/classdir"
)

// writeClasses writes the gate's lock classes: one fenced class with ttl,
// the same with durable fairness, and a grant per worker except worker
// drop (-1 keeps them all).
func (r *run) writeClasses(ttl time.Duration, drop int) error {
	var ids []string
	for i, id := range r.grantOf {
		if i != drop {
			ids = append(ids, id)
		}
	}
	c := classdir.Fenced{Namespace: Namespace, Name: ClassName, DurableName: DurableClassName, Resource: "gate-store", TTL: ttl}
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
