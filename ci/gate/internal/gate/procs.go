package gate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// writeClasses writes the gate's lock classes: one fenced class with the
// shortest TTL the rules allow, and a grant per worker.
func writeClasses(dir string, workers int) error {
	if err := os.MkdirAll(filepath.Join(dir, Namespace), 0o755); err != nil {
		return err
	}
	cls := fmt.Sprintf(`apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata:
  name: %s
  namespace: %s
spec:
  purpose: correctness
  enforcement: fenced
  ttl: %s
  tier: entity
  resource: gate-register
`, ClassName, Namespace, TTL)
	var b strings.Builder
	for i := range workers {
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, `apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata:
  name: w%d
  namespace: %s
spec:
  spiffeID: %s
  prefixes: ["%s/"]
`, i, Namespace, workerID(i), Namespace)
	}
	if err := os.WriteFile(filepath.Join(dir, Namespace, "classes.yaml"), []byte(cls), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, Namespace, "grants.yaml"), []byte(b.String()), 0o644)
}

func workerID(i int) string { return fmt.Sprintf("spiffe://gate.local/worker/%d", i) }
