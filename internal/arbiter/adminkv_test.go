package arbiter

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// nothingKV fails the test if a refused call reaches etcd.
type nothingKV struct {
	clientv3.KV
	t *testing.T
}

func (n nothingKV) Txn(context.Context) clientv3.Txn {
	n.t.Fatal("a refused Txn reached etcd")
	return nil
}

func TestAdminKVRefusesKeysOutsideTheAdminPrefixes(t *testing.T) {
	k := adminKV{kv: nothingKV{t: t}}
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"put a session record", func() error { _, err := k.Put(ctx, "/s/1234", "x"); return err }},
		{"read everything", func() error { _, err := k.Get(ctx, "/", clientv3.WithPrefix()); return err }},
		{"range past the holds", func() error { _, err := k.Get(ctx, "/l/a", clientv3.WithRange("/m")); return err }},
		{"txn deleting sessions", func() error {
			_, err := k.Txn(ctx).Then(clientv3.OpDelete("/s/", clientv3.WithPrefix())).Commit()
			return err
		}},
		{"txn comparing elsewhere", func() error {
			_, err := k.Txn(ctx).If(clientv3.Compare(clientv3.Version("/s/1"), "=", 0)).Then(clientv3.OpPut(forceRecordPrefix+"x", "")).Commit()
			return err
		}},
		{"txn else branch", func() error {
			_, err := k.Txn(ctx).Then(clientv3.OpPut(forceRecordPrefix+"x", "")).Else(clientv3.OpGet("/q2")).Commit()
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, ErrInternal) {
				t.Fatalf("err = %v, want a refusal", err)
			}
		})
	}
	for _, ok := range [][2]string{{holdPrefix + "t/x", ""}, {holdPrefix, clientv3.GetPrefixRangeEnd(holdPrefix)}, {epochKey, ""},
		{graceKey, ""}, {forceRequestPrefix + "id", ""}, {epochRequestPrefix + "id", ""}, {queuePrefix, clientv3.GetPrefixRangeEnd(queuePrefix)}} {
		if !allowedRange([]byte(ok[0]), []byte(ok[1])) {
			t.Errorf("refused %q..%q, which admin operations need", ok[0], ok[1])
		}
	}
}
