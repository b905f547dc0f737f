package gate

import (
	"fmt"

	"github.com/lockd-dev/lockd/ci/internal/classdir"
)

// writeClasses writes the gate's lock classes: one fenced class with the
// shortest TTL the rules allow, and a grant per worker.
func writeClasses(dir string, workers int) error {
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = workerID(i)
	}
	return classdir.Write(dir, classdir.Fenced{Namespace: Namespace, Name: ClassName, Resource: "gate-register", TTL: TTL}, ids)
}

func workerID(i int) string { return fmt.Sprintf("spiffe://gate.local/worker/%d", i) }
