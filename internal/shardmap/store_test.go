package shardmap_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

func shards(n int) []shardmap.Shard {
	s := make([]shardmap.Shard, n)
	for i := range s {
		s[i] = shardmap.Shard{Name: fmt.Sprintf("entity-%d", i+1)}
	}
	return s
}

// TestPutIsVersionedAndExclusive, on a real etcd: the first map is version
// 1, each next one the stored version plus one, written only over the map
// it was read from; of two writers from one read, one wins and the other
// gets ErrConflict; a stored document that does not validate is an error
// naming the key, not a map.
func TestPutIsVersionedAndExclusive(t *testing.T) {
	b := lockdtest.StartEmbedded(t, filepath.Join(t.TempDir(), "coord"))
	t.Cleanup(b.Close)
	ctx, cli := t.Context(), b.Client

	none, err := shardmap.Get(ctx, cli)
	if err != nil || none.Map != nil || none.ModRevision != 0 {
		t.Fatalf("Get with no map = %+v, %v; want none", none, err)
	}
	if _, err := shardmap.Put(ctx, cli, none, &shardmap.Map{Version: 2, Shards: shards(2)}); !errors.Is(err, shardmap.ErrInvalid) || !strings.Contains(err.Error(), "version: must be 1") {
		t.Fatalf("first map at version 2: %v; want shardmap.ErrInvalid naming version", err)
	}
	v1, err := shardmap.Put(ctx, cli, none, &shardmap.Map{Version: 1, Shards: shards(2)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := shardmap.Get(ctx, cli)
	if err != nil || got.Map.Version != 1 || len(got.Map.Shards) != 2 || got.ModRevision != v1.ModRevision {
		t.Fatalf("Get = %+v, %v; want version 1 with 2 shards at revision %d", got, err, v1.ModRevision)
	}

	// Two writers read version 1; only one writes version 2.
	_, errA := shardmap.Put(ctx, cli, got, &shardmap.Map{Version: 2, Shards: shards(3)})
	_, errB := shardmap.Put(ctx, cli, got, &shardmap.Map{Version: 2, Shards: shards(4)})
	if errA != nil || !errors.Is(errB, shardmap.ErrConflict) {
		t.Fatalf("two writers from one read: %v, %v; want the first to win, the second shardmap.ErrConflict", errA, errB)
	}
	if got, _ := shardmap.Get(ctx, cli); got.Map.Version != 2 || len(got.Map.Shards) != 3 {
		t.Fatalf("stored map = %+v; want the first writer's version 2", got.Map)
	}

	if _, err := cli.Put(ctx, keyspace.ShardMapKey, `{"version": 3, "shards": [], "shard": "typo"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := shardmap.Get(ctx, cli); !errors.Is(err, shardmap.ErrInvalid) || !strings.Contains(err.Error(), keyspace.ShardMapKey) {
		t.Fatalf("Get of a bad document: %v; want shardmap.ErrInvalid naming %s", err, keyspace.ShardMapKey)
	}
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	if _, err := shardmap.Decode([]byte(`{"version":1,"shards":[{"name":"e1","wieght":2}]}`)); !errors.Is(err, shardmap.ErrInvalid) || !strings.Contains(err.Error(), "wieght") {
		t.Fatalf("Decode of a misspelt field: %v; want shardmap.ErrInvalid naming it", err)
	}
	m, err := shardmap.Decode([]byte(`{"version":4,"shards":[{"name":"e1"},{"name":"e2","weight":2}],"overrides":[{"prefix":"big/","shard":"e2"}],"depth":{"orders":2}}`))
	if err != nil || m.Version != 4 || m.Shards[1].Weight != 2 || m.Overrides[0].Shard != "e2" || m.Depth["orders"] != 2 {
		t.Fatalf("Decode = %+v, %v", m, err)
	}
}

// TestFlipPublishesOnEveryShardBeforeTheMap, on three real etcds (a coord
// cluster and two shards): a flip writes the new version on every shard
// of either map, then the map; from then on a transaction fenced by the
// old version is refused by each shard (Moving, Served above Routed); a
// shard serving an unexpected version stops the flip before the map is
// written; a flip resumed after some shards were written completes.
func TestFlipPublishesOnEveryShardBeforeTheMap(t *testing.T) {
	dir := t.TempDir()
	coord := lockdtest.StartEmbedded(t, filepath.Join(dir, "coord"))
	t.Cleanup(coord.Close)
	e1 := lockdtest.StartEmbedded(t, filepath.Join(dir, "e1"))
	t.Cleanup(e1.Close)
	e2 := lockdtest.StartEmbedded(t, filepath.Join(dir, "e2"))
	t.Cleanup(e2.Close)
	ctx := t.Context()
	clients := map[string]clientv3.KV{"entity-1": e1.Client, "entity-2": e2.Client}

	backends := map[clientv3.KV]*store.Backend{e1.Client: e1, e2.Client: e2}
	fenced := func(kv clientv3.KV, f shardmap.Fence) error {
		t.Helper()
		resp, err := etcdop.NewKV(backends[kv].KV).Txn(ctx, etcdop.Request(f.Cmps(), []*pb.RequestOp{etcdop.Put("/x", "granted", 0)}, f.Reads()))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Succeeded {
			return nil
		}
		if err := f.Refused(resp.Responses); err != nil {
			return err
		}
		return errors.New("refused, and the fence's reads do not say why")
	}
	v0 := shardmap.Fence{Version: 0, Range: "payments/ledger/"}
	if err := fenced(e1.Client, v0); err != nil {
		t.Fatalf("version 0 on a shard never written: %v; want granted", err)
	}

	v1, err := shardmap.Flip(ctx, coord.Client, clients, shardmap.Stored{}, &shardmap.Map{Version: 1, Shards: shards(2)})
	if err != nil {
		t.Fatal(err)
	}
	for name, kv := range clients {
		var mv *shardmap.Moving
		if err := fenced(kv, v0); !errors.As(err, &mv) || mv.Served != 1 || mv.Routed != 0 || mv.Draining {
			t.Fatalf("%s: a grant routed by version 0 after the flip to 1: %v; want Moving served 1", name, err)
		}
		if err := fenced(kv, shardmap.Fence{Version: 1, Range: "payments/ledger/"}); err != nil {
			t.Fatalf("%s: a grant routed by version 1: %v; want granted", name, err)
		}
	}
	if got, _ := shardmap.Get(ctx, coord.Client); got.Map == nil || got.Map.Version != 1 {
		t.Fatalf("coord map = %+v; want version 1", got.Map)
	}

	// A range marked out is refused at the current version too.
	if _, err := e1.Client.Put(ctx, keyspace.RangeOutKey("payments/ledger/"), "draining"); err != nil {
		t.Fatal(err)
	}
	var mv *shardmap.Moving
	if err := fenced(e1.Client, shardmap.Fence{Version: 1, Range: "payments/ledger/"}); !errors.As(err, &mv) || !mv.Draining {
		t.Fatalf("a grant in a range marked out: %v; want Moving, draining", err)
	}
	if err := fenced(e1.Client, shardmap.Fence{Version: 1, Range: "payments/other/"}); err != nil {
		t.Fatalf("a grant in another range: %v; want granted", err)
	}

	// Shard 2 at an unexpected version: nothing is flipped.
	if _, err := e2.Client.Put(ctx, keyspace.ShardVersionKey, "7"); err != nil {
		t.Fatal(err)
	}
	if _, err := shardmap.Flip(ctx, coord.Client, clients, v1, &shardmap.Map{Version: 2, Shards: shards(2)}); !errors.Is(err, shardmap.ErrShardVersion) || !strings.Contains(err.Error(), "shard entity-2 serves version 7") {
		t.Fatalf("flip over a shard at version 7: %v; want ErrShardVersion naming the shard", err)
	}
	if got, _ := shardmap.Get(ctx, coord.Client); got.Map.Version != 1 {
		t.Fatalf("coord map after a refused flip = version %d; want 1", got.Map.Version)
	}
	// Resumed: shard 1 was written by the refused flip; put shard 2 back
	// and the flip completes.
	if _, err := e2.Client.Put(ctx, keyspace.ShardVersionKey, "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := shardmap.Flip(ctx, coord.Client, clients, v1, &shardmap.Map{Version: 2, Shards: shards(2)}); err != nil {
		t.Fatalf("resumed flip: %v", err)
	}
	for name, kv := range clients {
		if resp, _ := kv.Get(ctx, keyspace.ShardVersionKey); len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
			t.Fatalf("%s serves %v; want 2", name, resp.Kvs)
		}
	}

	// Shard 2 behind (rebuilt: no version, a mark from another time): the
	// next publish brings it straight to the new version and deletes the
	// stale mark; shard 1, at the map's version, keeps its current mark.
	if _, err := e2.Client.Delete(ctx, keyspace.ShardVersionKey); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Client.Put(ctx, keyspace.RangeOutKey("payments/old/"), "draining"); err != nil {
		t.Fatal(err)
	}
	if err := shardmap.Publish(ctx, clients, []string{"entity-1", "entity-2"}, 2, &shardmap.Map{Version: 3, Shards: shards(2)}, nil); err != nil {
		t.Fatalf("publish over a shard behind: %v", err)
	}
	for name, kv := range clients {
		st, err := shardmap.ReadShard(ctx, kv)
		if want := map[string]int{"entity-1": 1, "entity-2": 0}[name]; err != nil || st.Version != 3 || len(st.Marks) != want {
			t.Fatalf("%s after the publish = %+v, %v; want version 3 with %d marks", name, st, err, want)
		}
		if st.Copy == nil || st.Copy.Version != 3 || len(st.Copy.Shards) != 2 {
			t.Fatalf("%s keeps a copy %+v; want the map of version 3", name, st.Copy)
		}
	}
}
