package lockdtest_test

import (
	"errors"
	"testing"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestStartLoadsTheCallersOwnClasses is docs/client.md's example: a team
// tests its holder against its own classes, and only those are loaded.
func TestStartLoadsTheCallersOwnClasses(t *testing.T) {
	const writer = "spiffe://example.org/ledger-writer"
	env := lockdtest.Start(t, lockdtest.Options{Classes: map[string]string{
		"payments/classes.yaml": `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec:
  keys: ["payments/ledger/"]
  purpose: correctness
  enforcement: fenced
  ttl: 10s
  tier: entity
  resource: ledger-db
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: ledger-writer, namespace: payments}
spec:
  spiffeID: ` + writer + `
  prefixes: ["payments/ledger/"]
`}})
	c := lockdtest.ClientAt(t, env.Addr, writer)
	lock, err := c.Acquire(t.Context(), "payments/ledger/42", "ledger-writes", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	if !lock.CanStart() || lock.Token() == 0 {
		t.Fatalf("granted lock: CanStart %v, token %d", lock.CanStart(), lock.Token())
	}
	if err := lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The package's own test classes are not loaded alongside.
	alice := lockdtest.ClientAt(t, env.Addr, lockdtest.Alice)
	if _, err := alice.Acquire(t.Context(), "t/x", "std", func(*client.Lock) {}); !errors.Is(err, client.ErrDenied) {
		t.Fatalf("a key of the default test classes: %v; want ErrDenied", err)
	}
}
