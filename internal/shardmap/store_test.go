package shardmap_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
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
