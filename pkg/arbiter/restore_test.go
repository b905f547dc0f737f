package arbiter_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/lockdtest"
	"github.com/lockd-dev/lockd/pkg/store"
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
	ext, err := store.ConnectExternal(store.ExternalConfig{Endpoints: []string{b1.Embedded.Config().AdvertiseClientUrls[0].String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	rc, err := ext.Client.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	f.Close()
	for range 50 { // tokens handed out after the snapshot: the restore rolls these revisions back
		grant("t/after", true)
	}
	env.Stop()
	b1.Close()

	peer := "http://" + lockdtest.FreeAddr(t)
	restored := filepath.Join(dir, "restored")
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
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
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "sealed: epoch advance required") {
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

	// Only operators may advance.
	if _, err := admin.AdvanceEpoch(t.Context(), &lockv1.AdvanceEpochRequest{FromEpoch: 1, Reason: "restore"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("advance by a non-operator: %v", err)
	}
	_, opAdmin := env2.Raw(t, lockdtest.Operator)
	adv, err := opAdmin.AdvanceEpoch(t.Context(), &lockv1.AdvanceEpochRequest{FromEpoch: 1, Reason: "restore drill"})
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
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
