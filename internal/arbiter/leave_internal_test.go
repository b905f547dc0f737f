package arbiter

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/store"
)

// TestALeavingWaiterIsNotHandedAHoldFromARestoredStore: a durable waiter
// whose wait ends leaves the line, and takes a hold of its own session that
// it finds there as handed over to it. If the store was restored meanwhile,
// that hold may be one the session released long ago, brought back by the
// restore: the leave must check the answer's cluster ID, seal, and hand
// nothing out. (The release gate found it, seed 443060: a waiter's deadline
// passed just as a restore landed, and it was handed the token it had
// released seconds before, after another worker had been granted the key.)
//
// The restore is real (etcdutl, a new cluster token); the arbiter's client
// is pointed at the restored store, which is what lockd sees when a
// restored cluster comes up behind the endpoints it dials.
func TestALeavingWaiterIsNotHandedAHoldFromARestoredStore(t *testing.T) {
	dir := t.TempDir()
	b, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: filepath.Join(dir, "original")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	a, err := New(Config{Client: b.Client, Leases: b.Leases, KV: b.KV, Bootstrap: Bootstrap{FreshStore: true}}, NewPolicy(class.NewSet(nil, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.home.initEpoch(t.Context()); err != nil {
		t.Fatal(err)
	}
	caller := identity.Caller{Kind: identity.KindWorkload, ID: "spiffe://t/alice"}
	sess, err := a.OpenSession(t.Context(), caller, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	key := "t/d/k"
	cls := &class.Class{Namespace: "t", Name: "fifo", Fairness: class.FairnessDurable}
	if att, err := a.home.tryGrant(t.Context(), key, a.encodeHold(caller.String(), sess, cls), sess, linePos{}); err != nil || !att.granted {
		t.Fatalf("grant: %+v %v", att, err)
	}

	// The snapshot holds the session's hold; the original store moves on.
	snap := filepath.Join(dir, "snap.db")
	ext, err := clientv3.New(clientv3.Config{Endpoints: []string{b.Embedded.Clients[0].Addr().String()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	rc, err := ext.Snapshot(t.Context()) // over the network: the in-process client cannot stream one
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
	_ = rc.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	peer := "http://" + freeAddr(t)
	restored := filepath.Join(dir, "restored")
	if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: snap, Name: "lockd", OutputDataDir: restored, PeerURLs: []string{peer},
		InitialCluster: "lockd=" + peer, InitialClusterToken: "restored-" + t.Name(),
	}); err != nil {
		t.Fatalf("etcdutl restore: %v", err)
	}
	b2, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: restored, Name: "lockd", PeerURL: peer, ClientURL: "http://" + freeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b2.Close)
	if a.Sealed() {
		t.Fatal("sealed before any answer from the restored store: the test proves nothing")
	}
	a.home.cli, a.home.kv = b2.Client, etcdop.NewKV(b2.KV) // the restored cluster answers from here on

	// A waiter of the session, in line at a place the restored store does
	// not have, leaves as its deadline passes.
	d := &durable{a: a, c: a.home, req: AcquireRequest{Caller: caller, Session: sess, Key: key}, cls: cls,
		qk: keyspace.QueueKey(key, sess), pos: linePos{qk: keyspace.QueueKey(key, sess), rev: 1}}
	if g, held := d.leave(); held {
		t.Fatalf("the leaving waiter was handed token %d, a hold read from a restored store", g.Token)
	}
	if !a.Sealed() {
		t.Fatal("an answer from a store with another cluster ID did not seal the arbiter")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startOnFreePorts starts an embedded etcd in dir on loopback ports that
// were free when picked; another test binary (packages test side by side)
// may take one first, so it picks new ones a few times (as lockdtest does,
// which internal tests cannot import).
func startOnFreePorts(t *testing.T, dir string) *store.Backend {
	t.Helper()
	var err error
	for range 5 {
		var b *store.Backend
		b, err = store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, ClientURL: "http://" + freeAddr(t), PeerURL: "http://" + freeAddr(t)})
		if err == nil {
			return b
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	t.Fatal(err)
	return nil
}
