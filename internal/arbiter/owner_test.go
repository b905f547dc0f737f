package arbiter_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestAKeysClassComesFromTheClassRepository: a key acquired without a class
// is granted under the class owning the longest prefix of it; inspect names
// that class held or not; a key no class owns is refused with NO_CLASS,
// naming its namespace.
func TestAKeysClassComesFromTheClassRepository(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice)
	for key, want := range map[string]string{"t/x": "t/std", "t/fast/x": "t/fast", "t/fifo/x": "t/fifo", "t/fast": "t/std"} {
		l, err := c.Acquire(t.Context(), key, "", func(*client.Lock) {})
		if err != nil {
			t.Fatalf("%s without a class: %v", key, err)
		}
		if l.Class() != want {
			t.Errorf("%s granted under %s, want %s", key, l.Class(), want)
		}
		_ = l.Release(t.Context())
	}
	lc, _ := env.Raw(t, lockdtest.Alice)
	in, err := lc.Inspect(t.Context(), &lockv1.InspectRequest{Key: "t/fast/free"})
	if err != nil || in.GetHeld() || in.GetClass() != "t/fast" {
		t.Fatalf("inspect of a free key: %v %v; want not held, class t/fast", in, err)
	}

	// A namespace whose class owns only part of what Alice may lock.
	writeClasses(t, env, "loose", `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: part, namespace: loose}
spec:
  keys: ["loose/owned/"]
  purpose: correctness
  enforcement: fenced
  ttl: 15s
  tier: entity
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: alice, namespace: loose}
spec:
  spiffeID: `+lockdtest.Alice+`
  prefixes: ["loose/"]
`)
	lockdtest.WaitFor(t, 15*time.Second, "namespace loose loaded", func() bool {
		l, err := c.Acquire(t.Context(), "loose/owned/x", "", func(*client.Lock) {})
		if err == nil {
			_ = l.Release(t.Context())
		}
		return err == nil
	})
	_, err = c.Acquire(t.Context(), "loose/elsewhere", "", func(*client.Lock) {})
	if !errors.Is(err, client.ErrNoClass) || client.Reason(err) != "NO_CLASS" {
		t.Fatalf("a key no class owns: %v; want NO_CLASS", err)
	}
	in, err = lc.Inspect(t.Context(), &lockv1.InspectRequest{Key: "loose/elsewhere"})
	if err != nil || in.GetClass() != "" {
		t.Fatalf("inspect of a key no class owns: %v %v; want no class", in, err)
	}
}

// TestAHoldKeepsItsClassAcrossAClassChange: a class change that moves a
// held key to another class leaves the hold as it was granted (its class,
// its holder's lock); the key's new class applies from its next grant,
// also to a waiter queued before the change.
func TestAHoldKeepsItsClassAcrossAClassChange(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	const key = "t/moving/1"
	alice := env.Client(t, lockdtest.Alice)
	held, err := alice.Acquire(t.Context(), key, "", func(*client.Lock) {})
	if err != nil || held.Class() != "t/std" {
		t.Fatalf("first grant: %v (class %v)", err, held)
	}
	bob := env.Client(t, lockdtest.Bob)
	type result struct {
		l   *client.Lock
		err error
	}
	waited := make(chan result, 1)
	go func() {
		l, err := bob.Acquire(t.Context(), key, "", func(*client.Lock) {}, client.Wait(60*time.Second))
		waited <- result{l, err}
	}()
	lockdtest.WaitFor(t, 10*time.Second, "Bob in line", func() bool { return env.Arbiter.QueueLen(key) == 1 })

	// Review moves t/moving/ to a new class of the same TTL.
	writeClasses(t, env, "t", `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: moving, namespace: t}
spec:
  keys: ["t/moving/"]
  nestedIn: [std]
  purpose: correctness
  enforcement: fenced
  ttl: 15s
  tier: entity
  resource: test-db
`)
	lc, _ := env.Raw(t, lockdtest.Alice)
	lockdtest.WaitFor(t, 15*time.Second, "the class change loaded", func() bool {
		in, err := lc.Inspect(t.Context(), &lockv1.InspectRequest{Key: key})
		return err == nil && in.GetClass() == "t/moving"
	})
	in, err := lc.Inspect(t.Context(), &lockv1.InspectRequest{Key: key})
	if err != nil || !in.GetHeld() || in.GetHold().GetClass() != "t/std" {
		t.Fatalf("the hold after the change: %v %v; want still held under t/std", in, err)
	}
	if held.State() != client.Safe || held.Class() != "t/std" {
		t.Fatalf("Alice's lock after the change: %s, class %s", held.State(), held.Class())
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-waited
	if r.err != nil {
		t.Fatalf("Bob's wait: %v", r.err)
	}
	if r.l.Class() != "t/moving" {
		t.Fatalf("Bob's grant after the change is under %s, want the key's new class t/moving", r.l.Class())
	}
	in, err = lc.Inspect(t.Context(), &lockv1.InspectRequest{Key: key})
	if err != nil || in.GetHold().GetClass() != "t/moving" {
		t.Fatalf("the new hold: %v %v; want class t/moving", in, err)
	}
}

// writeClasses writes a class file into namespace ns of env's watched
// class directory.
func writeClasses(t *testing.T, env *lockdtest.Env, ns, body string) {
	t.Helper()
	dir := filepath.Join(env.ClassesDir, ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".extra.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "extra.yaml")); err != nil {
		t.Fatal(err)
	}
}
