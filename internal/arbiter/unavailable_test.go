package arbiter_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestEtcdDownIsUnavailableThenResumes stops the etcd under a running lockd
// (external mode): Acquire must answer Unavailable before the caller's
// deadline, never grant from memory, and grants resume when etcd returns.
func TestEtcdDownIsUnavailableThenResumes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etcd")
	clientURL, peerURL := "http://"+lockdtest.FreeAddr(t), "http://"+lockdtest.FreeAddr(t)
	start := func() *store.Backend {
		b, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, ClientURL: clientURL, PeerURL: peerURL})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	etcd := start()
	ext, err := store.ConnectExternal(store.ExternalConfig{Endpoints: []string{clientURL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ext.Close)
	env := lockdtest.Start(t, lockdtest.Options{Backend: ext, FreshStore: true, RequestTimeout: 5 * time.Second})
	alice, _ := env.Raw(t, lockdtest.Alice)
	sid := openSession(t, alice, 15*time.Second)
	if _, err := acquire(t.Context(), alice, sid, "t/up", "std", 0); err != nil {
		t.Fatal(err)
	}

	etcd.Close()
	for _, wait := range []time.Duration{0, 10 * time.Second} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		began := time.Now()
		_, err := acquire(ctx, alice, sid, "t/down", "std", wait)
		cancel()
		// Unavailable (not DeadlineExceeded) means lockd answered before
		// the caller's deadline.
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Acquire (wait %s) with etcd down: %v after %s; want Unavailable", wait, err, time.Since(began))
		}
		t.Logf("Acquire (wait %s) with etcd down: Unavailable after %s", wait, time.Since(began).Round(time.Millisecond))
	}

	etcd = start()
	t.Cleanup(etcd.Close)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		sid2, err := alice.OpenSession(ctx, openReq(15*time.Second))
		if err == nil {
			_, err = acquire(ctx, alice, sid2.GetSessionId(), "t/down", "std", 0)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("grants did not resume after etcd returned: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
