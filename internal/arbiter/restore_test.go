package arbiter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestRestoreSealsUntilEpochAdvance snapshots etcd, keeps granting, restores
// the snapshot with a new cluster token (etcdutl), and starts lockd on it:
// it must be sealed, and after the epoch advance every token must exceed
// every token issued before, including those issued after the snapshot.
func TestRestoreSealsUntilEpochAdvance(t *testing.T) {
	dir := t.TempDir()
	b1 := lockdtest.StartEmbedded(t, filepath.Join(dir, "original"))
	env := lockdtest.Start(t, lockdtest.Options{Backend: b1})
	alice, _ := env.Raw(t, lockdtest.Alice)
	sid := openSession(t, alice, 15*time.Second)

	var maxTok uint64
	grant := func(key string, release bool) {
		t.Helper()
		resp, err := acquire(t.Context(), alice, sid, key, "std", 0)
		if err != nil {
			t.Fatalf("grant %s: %v", key, err)
		}
		maxTok = max(maxTok, resp.GetToken().GetValue())
		if release {
			if _, err := alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: key, Token: resp.GetToken().GetValue()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 20 {
		grant("t/before", true)
	}
	grant("t/held-at-snapshot", false)

	snap := filepath.Join(dir, "snap.db")
	saveSnapshot(t, b1, snap)
	for range 50 { // tokens handed out after the snapshot: the restore rolls these revisions back
		grant("t/after", true)
	}
	env.Stop()
	b1.Close()

	peer := "http://" + lockdtest.FreeAddr(t)
	restored := filepath.Join(dir, "restored")
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: snap, Name: "lockd", OutputDataDir: restored, PeerURLs: []string{peer},
		InitialCluster: "lockd=" + peer, InitialClusterToken: "restored-" + t.Name(),
	})
	if err != nil {
		t.Fatalf("etcdutl restore: %v", err)
	}
	b2, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: restored, Name: "lockd", PeerURL: peer,
		ClientURL: "http://" + lockdtest.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b2.Close)
	reg := prometheus.NewRegistry()
	env2 := lockdtest.Start(t, lockdtest.Options{Backend: b2, Registry: reg})
	if !env2.Arbiter.Sealed() {
		t.Fatal("lockd on a restored store is not sealed")
	}
	alice2, admin := env2.Raw(t, lockdtest.Alice)
	sid2 := openSession(t, alice2, 15*time.Second)
	_, err = acquire(t.Context(), alice2, sid2, "t/new", "std", 0)
	if status.Code(err) != codes.FailedPrecondition || !errors.Is(client.Decode(err), client.ErrSealed) {
		t.Fatalf("grant on a sealed store: %v", err)
	}
	rec := httptest.NewRecorder()
	env2.Server.HTTPHandler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "sealed") {
		t.Fatalf("/readyz while sealed: %d %q", rec.Code, rec.Body.String())
	}
	st, err := admin.EpochStatus(t.Context(), &lockv1.EpochStatusRequest{})
	if err != nil || !st.GetSealed() || st.GetRecordClusterId() == st.GetStoreClusterId() {
		t.Fatalf("epoch status: %v %v", st, err)
	}

	// A session that survived in the snapshot is not renewed while sealed:
	// its holds may have been rolled back.
	if ans, err := keepAliveOnce(t, alice2, sid); status.Code(err) != codes.FailedPrecondition || !errors.Is(client.Decode(err), client.ErrSealed) {
		t.Fatalf("keepalive on a sealed store = %v, %v; want FailedPrecondition sealed", ans, err)
	}

	// Only operators may ask; it takes two of them; one alone cannot.
	if _, err := admin.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: 1, Reason: "restore"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("advance request by a non-operator: %v", err)
	}
	_, opAdmin := env2.Raw(t, lockdtest.Operator)
	if _, err := opAdmin.AdvanceEpoch(t.Context(), &lockv1.AdvanceEpochRequest{FromEpoch: 1, Reason: "restore"}); status.Code(err) != codes.FailedPrecondition || !errors.Is(client.Decode(err), client.ErrNotOperator) || !strings.Contains(err.Error(), "two operators") {
		t.Fatalf("one-person advance: %v", err)
	}
	self, err := opAdmin.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: 1, Reason: "restore drill"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opAdmin.ApproveEpochAdvance(t.Context(), &lockv1.ApproveEpochAdvanceRequest{Id: self.GetId()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("self-approved epoch advance: %v", err)
	}
	if !env2.Arbiter.Sealed() {
		t.Fatal("unsealed without a second operator")
	}
	adv := env2.AdvanceEpoch(t, 1, "restore drill")
	if adv.GetEpoch() != 2 || adv.GetHoldsDeleted() < 1 || adv.GetClusterId() != st.GetStoreClusterId() {
		t.Fatalf("advance = %v", adv)
	}
	if env2.Arbiter.Sealed() {
		t.Fatal("still sealed after the advance")
	}
	rec = httptest.NewRecorder()
	env2.Server.HTTPHandler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/readyz after advance: %d %q", rec.Code, rec.Body.String())
	}
	// The surviving session is renewed again, and the answer carries the
	// new epoch: its holder learns its epoch-1 holds are gone.
	if ans, err := keepAliveOnce(t, alice2, sid); err != nil || ans.GetEpoch() != 2 || ans.GetTtl().AsDuration() <= 0 {
		t.Fatalf("keepalive after the advance = %v, %v; want epoch 2 and a TTL", ans, err)
	}
	// No grant until every old holder has been fenced: the longest class
	// TTL (30s, other/cache) plus a second after the advance.
	advanced := time.Now()
	if _, err := acquire(t.Context(), alice2, sid2, "t/after", "std", 0); status.Code(err) != codes.FailedPrecondition || !errors.Is(client.Decode(err), client.ErrEpochGrace) {
		t.Fatalf("grant right after the advance: %v; want FailedPrecondition, reason EPOCH_GRACE", err)
	}
	stopKA := keepRenewing(t, alice2, sid2)
	// A wait that ends inside the grace says so: the key is not held by
	// anyone, grants resume when the grace ends.
	if _, err := acquire(t.Context(), alice2, sid2, "t/after", "std", time.Second); status.Code(err) != codes.FailedPrecondition || !errors.Is(client.Decode(err), client.ErrEpochGrace) {
		t.Fatalf("a wait that ends inside the grace: %v; want FailedPrecondition, reason EPOCH_GRACE (not a holder's wait timeout)", err)
	}
	first, err := acquire(t.Context(), alice2, sid2, "t/after", "std", time.Minute)
	stopKA()
	if err != nil {
		t.Fatalf("grant waiting through the grace: %v", err)
	}
	if waited := time.Since(advanced); waited < 30*time.Second {
		t.Fatalf("granted %s after the advance, before old holders were fenced (30s)", waited)
	}
	if _, err := alice2.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid2, Key: "t/after", Token: first.GetToken().GetValue()}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		resp, err := acquire(t.Context(), alice2, sid2, "t/after", "std", 0)
		if err != nil {
			t.Fatalf("grant after advance: %v", err)
		}
		if resp.GetToken().GetValue() <= maxTok {
			t.Fatalf("token %d after restore is not greater than %d issued before", resp.GetToken().GetValue(), maxTok)
		}
		if _, err := alice2.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid2, Key: "t/after", Token: resp.GetToken().GetValue()}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := b2.Client.Get(t.Context(), "/l/t/held-at-snapshot"); len(got.Kvs) != 0 {
		t.Fatal("a restored hold survived the epoch advance")
	}
}

// keepAliveOnce sends one keepalive for sid on a new stream and returns the
// answer.
func keepAliveOnce(t *testing.T, lc lockv1.LockServiceClient, sid int64) (*lockv1.KeepAliveResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	st, err := lc.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&lockv1.KeepAliveRequest{SessionId: sid}); err != nil {
		return nil, err
	}
	return st.Recv()
}

// keepRenewing renews sid every 3 s until the returned func is called.
func keepRenewing(t *testing.T, lc lockv1.LockServiceClient, sid int64) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	st, err := lc.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			if st.Send(&lockv1.KeepAliveRequest{SessionId: sid}) != nil {
				return
			}
			if _, err := st.Recv(); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
