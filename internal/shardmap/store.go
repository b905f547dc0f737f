package shardmap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
)

// ErrConflict: the map changed since it was read; read it again.
var ErrConflict = errors.New("shardmap: the map changed since it was read")

// Decode parses a map document and validates it. Unknown fields are
// refused, so a misspelt field is never silently ignored.
func Decode(b []byte) (*Map, error) {
	var m Map
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Stored is the map as read from the coord cluster, with the revision it
// was last written at (zero, and a nil Map, when none was ever written).
type Stored struct {
	Map         *Map
	ModRevision int64
}

// Get reads the map from the coord cluster.
func Get(ctx context.Context, kv clientv3.KV) (Stored, error) {
	resp, err := kv.Get(ctx, keyspace.ShardMapKey)
	if err != nil {
		return Stored{}, err
	}
	if len(resp.Kvs) == 0 {
		return Stored{}, nil
	}
	m, err := Decode(resp.Kvs[0].Value)
	if err != nil {
		return Stored{}, fmt.Errorf("%s at revision %d: %w", keyspace.ShardMapKey, resp.Kvs[0].ModRevision, err)
	}
	return Stored{Map: m, ModRevision: resp.Kvs[0].ModRevision}, nil
}

// Put replaces prev, as read by Get, with m, whose version must be prev's
// plus one (1 for the first map). It is ErrConflict when the stored map is
// no longer prev: two writers never both succeed.
func Put(ctx context.Context, kv clientv3.KV, prev Stored, m *Map) (Stored, error) {
	want := int64(1)
	if prev.Map != nil {
		want = prev.Map.Version + 1
	}
	if m.Version != want {
		return Stored{}, fmt.Errorf("%w: version: must be %d (the stored map's plus one), got %d", ErrInvalid, want, m.Version)
	}
	return put(ctx, kv, prev, m)
}

// Restore puts m back in place of prev on a coord cluster that lost it
// (restored from a backup, or rebuilt empty): m is the copy a shard keeps
// of the map it serves, and its version must be above prev's. It is
// ErrConflict when the stored map is no longer prev.
func Restore(ctx context.Context, kv clientv3.KV, prev Stored, m *Map) (Stored, error) {
	if m.Version <= prev.Version() {
		return Stored{}, fmt.Errorf("%w: version: a restored map must be above the stored one's %d, got %d", ErrInvalid, prev.Version(), m.Version)
	}
	return put(ctx, kv, prev, m)
}

func put(ctx context.Context, kv clientv3.KV, prev Stored, m *Map) (Stored, error) {
	if err := m.Validate(); err != nil {
		return Stored{}, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Stored{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(keyspace.ShardMapKey), "=", prev.ModRevision)).
		Then(clientv3.OpPut(keyspace.ShardMapKey, string(b))).Commit()
	if err != nil {
		return Stored{}, err
	}
	if !resp.Succeeded {
		return Stored{}, ErrConflict
	}
	return Stored{Map: m, ModRevision: resp.Header.Revision}, nil
}
