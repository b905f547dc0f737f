package shardmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// Implicit is the map in force while none is written: version 0, every
// entity key on shard (the topology's first entity cluster).
func Implicit(shard string) *Map {
	return &Map{Version: 0, Shards: []Shard{{Name: shard}}}
}

// A Fence holds a transaction on a shard to the map it was routed by: it
// succeeds only while the shard serves that map version and the key's range
// is not being moved away. It is to a shard map what the epoch compare is to
// a restore: an arbiter whose map is behind is refused by the shard itself,
// whatever its watch delivered.
type Fence struct {
	// Version is the map version the key was routed by; Range is its range.
	Version int64
	Range   string
}

// Cmps are the fence's compares.
func (f Fence) Cmps() []*pb.Compare {
	ver := etcdop.Absent(keyspace.ShardVersionKey)
	if f.Version != 0 {
		ver = etcdop.Value(keyspace.ShardVersionKey, strconv.FormatInt(f.Version, 10))
	}
	return []*pb.Compare{ver, etcdop.Absent(keyspace.RangeOutKey(f.Range))}
}

// Reads are what explains a refusal (Refused); a transaction puts them
// last among its Else operations.
func (f Fence) Reads() []*pb.RequestOp {
	return []*pb.RequestOp{etcdop.Get(keyspace.ShardVersionKey), etcdop.Count(keyspace.RangeOutKey(f.Range), false)}
}

// Refused reads the last len(Reads()) responses of a refused transaction:
// nil when the fence held (the refusal was for something else), else a
// *Moving saying why.
func (f Fence) Refused(resps []*pb.ResponseOp) error {
	if len(resps) < 2 {
		return nil
	}
	ver, out := resps[len(resps)-2].GetResponseRange(), resps[len(resps)-1].GetResponseRange()
	served, err := servedVersion(ver.GetKvs())
	if err != nil {
		return err
	}
	if served != f.Version || out.GetCount() > 0 {
		return &Moving{Range: f.Range, Routed: f.Version, Served: served, Draining: out.GetCount() > 0}
	}
	return nil
}

// servedVersion decodes a shard's version key (absent: 0).
func servedVersion(kvs []*mvccpb.KeyValue) (int64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%w: %s is %q, not a map version", ErrInvalid, keyspace.ShardVersionKey, kvs[0].Value)
	}
	return v, nil
}

// Moving is a refusal by a shard's fence. It is retryable: a range being
// drained is served again once its move completes (Draining), and an
// arbiter routing by an older map than the shard serves (Served > Routed)
// is served once it reads the new map.
type Moving struct {
	Range          string
	Routed, Served int64
	Draining       bool
}

func (m *Moving) Error() string {
	switch {
	case m.Draining:
		return fmt.Sprintf("range %s is being moved to another shard", m.Range)
	case m.Served > m.Routed:
		return fmt.Sprintf("the shard map changed (version %d, routed by %d)", m.Served, m.Routed)
	default:
		return fmt.Sprintf("the shard map is changing (version %d is being published, the shard still serves %d)", m.Routed, m.Served)
	}
}

// ErrShardVersion: a shard serves neither the map version being replaced
// nor its successor: another writer is publishing, or the shard was
// restored from an old backup. Nothing is flipped until an operator looks.
var ErrShardVersion = errors.New("shardmap: a shard serves an unexpected map version")

// ErrEpochChanged: a shard's epoch record changed since it was read for
// a move's epoch check; nothing was published on it. Check again.
var ErrEpochChanged = errors.New("shardmap: a shard's epoch changed since the move's epoch check")

// Flip publishes next in place of prev, read by Get: it first writes
// next's version on every shard of either map (Publish), so an arbiter
// still routing by prev is refused by every shard from then on, then
// replaces the map on the coord cluster. shards must hold a client for
// every shard of both maps.
//
// Flip does not drain: moving a range that has holds or waiters is the
// move controller's work (internal/shardmove), done before it flips.
func Flip(ctx context.Context, coord clientv3.KV, shards map[string]clientv3.KV, prev Stored, next *Map) (Stored, error) {
	if err := next.Validate(); err != nil {
		return Stored{}, err
	}
	if err := Publish(ctx, shards, ShardsOf(prev.Map, next), prev.Version(), next, nil); err != nil {
		return Stored{}, err
	}
	return Put(ctx, coord, prev, next)
}

// Version is the stored map's version (0 when none was written).
func (s Stored) Version() int64 {
	if s.Map == nil {
		return 0
	}
	return s.Map.Version
}

// ShardsOf names the shards of either map, prev's first.
func ShardsOf(prev, next *Map) []string {
	var names []string
	for _, m := range []*Map{prev, next} {
		if m == nil {
			continue
		}
		for _, s := range m.Shards {
			if !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	return names
}

// Publish writes map to (its version, and a copy of it) on each named
// shard that serves version from (a
// shard already at to is left: a publish resumed after a crash). A shard
// behind from (a shard new to the map, never written, or one restored
// from a backup or rebuilt empty) goes straight to to, and the range-out
// marks left in its store are deleted: while behind it refused every
// fenced grant, so nothing was granted on it by any map it missed, and
// marks written before it fell behind are not the current move's. A shard
// named in epochAt is written only while its epoch record is still at the
// mod revision given (ErrEpochChanged otherwise).
func Publish(ctx context.Context, shards map[string]clientv3.KV, names []string, from int64, to *Map, epochAt map[string]int64) error {
	for _, name := range names {
		kv, ok := shards[name]
		if !ok {
			return fmt.Errorf("%w: shards: no client for shard %q", ErrInvalid, name)
		}
		rev, guarded := epochAt[name]
		if err := publish(ctx, kv, name, from, to, rev, guarded); err != nil {
			return err
		}
	}
	return nil
}

// ErrShardChanged: a shard's version changed between the read and the
// write of a publish or a repair. Try again.
var ErrShardChanged = errors.New("shardmap: a shard's map version changed meanwhile")

// publish moves shard name's version from `from` (or from behind it) to
// map to's.
func publish(ctx context.Context, kv clientv3.KV, name string, from int64, m *Map, epochRev int64, guarded bool) error {
	to := m.Version
	cur, err := ReadShard(ctx, kv)
	if err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
	}
	switch {
	case cur.Version == to:
		return nil
	case cur.Version > from:
		return fmt.Errorf("%w: shard %s serves version %d; expected %d (the map's) or %d", ErrShardVersion, name, cur.Version, from, to)
	}
	var stale []string
	if cur.Version < from {
		stale = cur.Marks
	}
	var extra []clientv3.Cmp
	if guarded {
		extra = append(extra, clientv3.Compare(clientv3.ModRevision(keyspace.EpochKey), "=", epochRev))
	}
	ok, err := cur.Set(ctx, kv, m, stale, nil, extra...)
	if err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
	}
	if ok {
		return nil
	}
	again, err := ReadShard(ctx, kv)
	if err != nil {
		return fmt.Errorf("shard %s: %w", name, err)
	}
	if again.Version == to {
		return nil
	}
	if guarded && again.rev == cur.rev {
		return fmt.Errorf("%w: shard %s", ErrEpochChanged, name)
	}
	return fmt.Errorf("%w: shard %s", ErrShardChanged, name)
}

// ShardState is a shard's map version and range-out marks, as read.
type ShardState struct {
	// Version is the map version the shard serves (0: none written);
	// Copy the copy of that map it keeps (nil: none).
	Version int64
	Copy    *Map
	// Marks are the ranges marked out on the shard.
	Marks []string
	rev   int64 // the version key's mod revision (0: absent)
}

// ReadShard reads a shard's version and marks.
func ReadShard(ctx context.Context, kv clientv3.KV) (ShardState, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(keyspace.ShardVersionKey),
		clientv3.OpGet(keyspace.RangeOutPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(keyspace.ShardMapCopyKey)).Commit()
	if err != nil {
		return ShardState{}, err
	}
	ver := resp.Responses[0].GetResponseRange().GetKvs()
	v, err := servedVersion(ver)
	if err != nil {
		return ShardState{}, err
	}
	st := ShardState{Version: v}
	if len(ver) > 0 {
		st.rev = ver[0].ModRevision
	}
	for _, m := range resp.Responses[1].GetResponseRange().GetKvs() {
		st.Marks = append(st.Marks, strings.TrimPrefix(string(m.Key), keyspace.RangeOutPrefix))
	}
	if kvs := resp.Responses[2].GetResponseRange().GetKvs(); len(kvs) > 0 {
		// A copy that cannot be read is no copy: the coord cluster's map
		// is not restored from it.
		if m, err := Decode(kvs[0].Value); err == nil && m.Version == st.Version {
			st.Copy = m
		}
	}
	return st, nil
}

// Set writes map m (its version and a copy) on the shard read as s,
// deletes the marks of the
// ranges in unmark and puts each mark in put (range: value), all while
// the version is still as read and every extra compare holds. ok is false
// when a compare failed.
func (s ShardState) Set(ctx context.Context, kv clientv3.KV, m *Map, unmark []string, put map[string]string, extra ...clientv3.Cmp) (ok bool, err error) {
	b, err := json.Marshal(m)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	cmp := clientv3.Compare(clientv3.ModRevision(keyspace.ShardVersionKey), "=", s.rev)
	ops := []clientv3.Op{clientv3.OpPut(keyspace.ShardVersionKey, strconv.FormatInt(m.Version, 10)), clientv3.OpPut(keyspace.ShardMapCopyKey, string(b))}
	for _, rng := range unmark {
		if _, keep := put[rng]; !keep {
			ops = append(ops, clientv3.OpDelete(keyspace.RangeOutKey(rng)))
		}
	}
	for _, rng := range slices.Sorted(maps.Keys(put)) {
		ops = append(ops, clientv3.OpPut(keyspace.RangeOutKey(rng), put[rng]))
	}
	resp, err := kv.Txn(ctx).If(append([]clientv3.Cmp{cmp}, extra...)...).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
