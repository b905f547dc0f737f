package arbiter

import (
	"bytes"
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
)

// adminPrefixes are the only keys the admin operations (force-release and
// epoch advance) read or write: holds and queues, the force-release and
// epoch-advance requests, the force records, the epoch record, the grace
// key and the epoch allocation counter.
var adminPrefixes = []string{holdPrefix, queuePrefix, forceRequestPrefix, forceRecordPrefix, epochRequestPrefix, epochKey, graceKey,
	keyspace.AllocatedEpochKey}

// adminKV is the admin operations' view of etcd. Every key and range of a
// Get, Put or Txn (compares and operations of both branches) must lie
// under adminPrefixes; anything else is refused before it is sent. It
// limits what a bug in an admin path can touch within lockd's own etcd
// credential; it is not etcd RBAC.
type adminKV struct {
	kv clientv3.KV
}

func allowedRange(key, end []byte) bool {
	for _, p := range adminPrefixes {
		pb := []byte(p)
		if !bytes.HasPrefix(key, pb) {
			continue
		}
		if len(end) == 0 {
			return true
		}
		limit := []byte(clientv3.GetPrefixRangeEnd(p))
		if bytes.Compare(end, limit) <= 0 {
			return true
		}
	}
	return false
}

func checkOp(op clientv3.Op) error {
	if op.IsTxn() {
		return fmt.Errorf("%w: admin: nested transactions are not used", ErrInternal)
	}
	if !allowedRange(op.KeyBytes(), op.RangeBytes()) {
		return fmt.Errorf("%w: admin: key %q is outside what admin operations may touch", ErrInternal, op.KeyBytes())
	}
	return nil
}

func (k adminKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if err := checkOp(clientv3.OpGet(key, opts...)); err != nil {
		return nil, err
	}
	return k.kv.Get(ctx, key, opts...)
}

func (k adminKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if err := checkOp(clientv3.OpPut(key, val, opts...)); err != nil {
		return nil, err
	}
	return k.kv.Put(ctx, key, val, opts...)
}

func (k adminKV) Txn(ctx context.Context) *adminTxn { return &adminTxn{ctx: ctx, kv: k.kv} }

// adminTxn collects a transaction and checks it whole at Commit.
type adminTxn struct {
	ctx       context.Context
	kv        clientv3.KV
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
}

func (t *adminTxn) If(cs ...clientv3.Cmp) *adminTxn   { t.cmps = append(t.cmps, cs...); return t }
func (t *adminTxn) Then(ops ...clientv3.Op) *adminTxn { t.then = append(t.then, ops...); return t }
func (t *adminTxn) Else(ops ...clientv3.Op) *adminTxn { t.els = append(t.els, ops...); return t }

func (t *adminTxn) Commit() (*clientv3.TxnResponse, error) {
	for _, c := range t.cmps {
		if !allowedRange(c.KeyBytes(), c.RangeEnd) {
			return nil, fmt.Errorf("%w: admin: compare on %q is outside what admin operations may touch", ErrInternal, c.KeyBytes())
		}
	}
	for _, op := range append(append([]clientv3.Op{}, t.then...), t.els...) {
		if err := checkOp(op); err != nil {
			return nil, err
		}
	}
	return t.kv.Txn(t.ctx).If(t.cmps...).Then(t.then...).Else(t.els...).Commit()
}
