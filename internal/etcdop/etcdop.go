// Package etcdop builds etcd requests as etcd's own protobuf messages and
// sends transactions on a cluster's raw KV client.
//
// lockd's lock path (grants, releases, handoffs, the reads that explain a
// refusal, a shard's fence) is built here rather than with clientv3's Op
// values, which clientv3 converts to these same messages on every call:
// under load that conversion was a third of what lockd allocated. Each
// builder makes exactly what clientv3 makes of the Compare or Op it is
// named after; etcdop_test.go checks every one against clientv3 itself.
package etcdop

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// KV sends one Txn request on a cluster's raw KV client.
type KV struct{ kv pb.KVClient }

// NewKV sends on kv.
func NewKV(kv pb.KVClient) KV { return KV{kv: kv} }

// callOptions are the call options clientv3 sends a Txn with: wait for a
// connection rather than fail at once, and its message size limits.
var callOptions = []grpc.CallOption{
	grpc.WaitForReady(true),
	grpc.MaxCallSendMsgSize(2 * 1024 * 1024),
	grpc.MaxCallRecvMsgSize(math.MaxInt32),
}

// Txn commits req. Its errors are clientv3's: etcd's typed errors
// (rpctypes), or the context's when it ended.
func (k KV) Txn(ctx context.Context, req *pb.TxnRequest) (*clientv3.TxnResponse, error) {
	resp, err := k.kv.Txn(ctx, req, callOptions...)
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return (*clientv3.TxnResponse)(resp), nil
}

// Raw is the raw KV client of cli's cluster: kv when given, else one on
// cli's connection; nil when cli has none (an in-process client, for which
// kv must be given).
func Raw(cli *clientv3.Client, kv pb.KVClient) pb.KVClient {
	if kv != nil {
		return kv
	}
	if cli != nil && cli.ActiveConnection() != nil {
		return pb.NewKVClient(cli.ActiveConnection())
	}
	return nil
}

// Compares. Each is clientv3.Compare of the target it is named after.

// Created is Compare(CreateRevision(key), result, rev).
func Created(key string, result pb.Compare_CompareResult, rev int64) *pb.Compare {
	return &pb.Compare{Target: pb.Compare_CREATE, Result: result, Key: []byte(key),
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
}

// Absent is Compare(CreateRevision(key), "=", 0): key does not exist.
func Absent(key string) *pb.Compare { return Created(key, pb.Compare_EQUAL, 0) }

// Modified is Compare(ModRevision(key), "=", rev).
func Modified(key string, rev int64) *pb.Compare {
	return &pb.Compare{Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, Key: []byte(key),
		TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// Lease is Compare(LeaseValue(key), "=", lease).
func Lease(key string, lease int64) *pb.Compare {
	return &pb.Compare{Target: pb.Compare_LEASE, Result: pb.Compare_EQUAL, Key: []byte(key),
		TargetUnion: &pb.Compare_Lease{Lease: lease}}
}

// Value is Compare(Value(key), "=", value).
func Value(key, value string) *pb.Compare {
	return &pb.Compare{Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, Key: []byte(key),
		TargetUnion: &pb.Compare_Value{Value: []byte(value)}}
}

// WithPrefix is Cmp.WithPrefix: c compares every key with c's key as prefix.
func WithPrefix(c *pb.Compare) *pb.Compare {
	c.RangeEnd = prefixEnd(c.Key)
	return c
}

// prefixEnd is the end of the range of keys with prefix key
// (clientv3.GetPrefixRangeEnd).
func prefixEnd(key []byte) []byte {
	end := make([]byte, len(key))
	copy(end, key)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0} // every byte 0xff: to the end of the key space
}

// Operations. Each is the clientv3 Op it is named after.

// Get is OpGet(key).
func Get(key string) *pb.RequestOp { return rangeOp(&pb.RangeRequest{Key: []byte(key)}) }

// Count is OpGet(key, WithCountOnly()), and with prefix set
// OpGet(key, WithPrefix(), WithCountOnly()).
func Count(key string, prefix bool) *pb.RequestOp {
	r := &pb.RangeRequest{Key: []byte(key), CountOnly: true}
	if prefix {
		r.RangeEnd = prefixEnd(r.Key)
	}
	return rangeOp(r)
}

// Keys is OpGet(prefix, WithPrefix(), WithKeysOnly()).
func Keys(prefix string) *pb.RequestOp {
	r := &pb.RangeRequest{Key: []byte(prefix), KeysOnly: true}
	r.RangeEnd = prefixEnd(r.Key)
	return rangeOp(r)
}

// FirstCreated is OpGet(prefix, WithPrefix(), WithSort(SortByCreateRevision,
// order), WithLimit(1)) with, when maxCreate is not zero,
// WithMaxCreateRev(maxCreate): the key under prefix created first (order
// ASCEND) or last (DESCEND), among those created at maxCreate or before.
func FirstCreated(prefix string, order pb.RangeRequest_SortOrder, maxCreate int64) *pb.RequestOp {
	r := &pb.RangeRequest{Key: []byte(prefix), Limit: 1, SortOrder: order, SortTarget: pb.RangeRequest_CREATE,
		MaxCreateRevision: maxCreate}
	r.RangeEnd = prefixEnd(r.Key)
	return rangeOp(r)
}

func rangeOp(r *pb.RangeRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
}

// Put is OpPut(key, val, WithLease(lease)).
func Put(key, val string, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(val), Lease: lease}}}
}

// Delete is OpDelete(key).
func Delete(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
}

// Txn is OpTxn(cmps, then, els).
func Txn(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}}}
}

// Request is a Txn of cmps, then and els.
func Request(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.TxnRequest {
	return &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}
}
