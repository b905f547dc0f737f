package etcdop

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// capture is a pb.KVClient that keeps the Txn request clientv3 sends and
// answers nothing else.
type capture struct {
	pb.KVClient
	req *pb.TxnRequest
}

func (c *capture) Txn(_ context.Context, req *pb.TxnRequest, _ ...grpc.CallOption) (*pb.TxnResponse, error) {
	c.req = req
	return &pb.TxnResponse{}, nil
}

// clientv3Request is the Txn request clientv3 sends for cmps, then and els.
func clientv3Request(t *testing.T, cmps []clientv3.Cmp, then, els []clientv3.Op) *pb.TxnRequest {
	t.Helper()
	c := &capture{}
	if _, err := clientv3.NewKVFromKVClient(c, nil).Txn(t.Context()).If(cmps...).Then(then...).Else(els...).Commit(); err != nil {
		t.Fatal(err)
	}
	return c.req
}

// TestEveryBuilderMakesWhatClientv3Makes: each compare and operation built
// here is, message for message, the one clientv3 sends for the Compare or
// Op the builder is named after, so a transaction means to etcd what it
// meant when lockd built it with clientv3.
func TestEveryBuilderMakesWhatClientv3Makes(t *testing.T) {
	lease := clientv3.LeaseID(0x694d9a2b6c1e0f07)
	for _, tt := range []struct {
		name string
		cmp  *pb.Compare
		want clientv3.Cmp
	}{
		{"Absent", Absent("/l/a/b"), clientv3.Compare(clientv3.CreateRevision("/l/a/b"), "=", 0)},
		{"Created =", Created("/q/a#1", pb.Compare_EQUAL, 42), clientv3.Compare(clientv3.CreateRevision("/q/a#1"), "=", 42)},
		{"Created >", Created("/q/a#", pb.Compare_GREATER, 41), clientv3.Compare(clientv3.CreateRevision("/q/a#"), ">", 41)},
		{"Created <", Created("/q/a#", pb.Compare_LESS, 41), clientv3.Compare(clientv3.CreateRevision("/q/a#"), "<", 41)},
		{"Modified", Modified("/sys/epoch", 7), clientv3.Compare(clientv3.ModRevision("/sys/epoch"), "=", 7)},
		{"Lease", Lease("/s/6950", int64(lease)), clientv3.Compare(clientv3.LeaseValue("/s/6950"), "=", lease)},
		{"Value", Value("/sys/shard-version", "12"), clientv3.Compare(clientv3.Value("/sys/shard-version"), "=", "12")},
		{"WithPrefix", WithPrefix(Absent("/q/a/b#")), clientv3.Compare(clientv3.CreateRevision("/q/a/b#"), "=", 0).WithPrefix()},
		{"WithPrefix of 0xff", WithPrefix(Absent("/q/\xff\xff")), clientv3.Compare(clientv3.CreateRevision("/q/\xff\xff"), "=", 0).WithPrefix()},
		{"WithPrefix of only 0xff", WithPrefix(Absent("\xff")), clientv3.Compare(clientv3.CreateRevision("\xff"), "=", 0).WithPrefix()},
	} {
		t.Run("compare "+tt.name, func(t *testing.T) {
			want := clientv3Request(t, []clientv3.Cmp{tt.want}, nil, nil)
			equal(t, Request([]*pb.Compare{tt.cmp}, nil, nil), want)
		})
	}
	for _, tt := range []struct {
		name string
		op   *pb.RequestOp
		want clientv3.Op
	}{
		{"Get", Get("/l/a/b"), clientv3.OpGet("/l/a/b")},
		{"Count", Count("/sys/grace", false), clientv3.OpGet("/sys/grace", clientv3.WithCountOnly())},
		{"Count prefix", Count("/q/a#", true), clientv3.OpGet("/q/a#", clientv3.WithPrefix(), clientv3.WithCountOnly())},
		{"Keys", Keys("/sys/grace"), clientv3.OpGet("/sys/grace", clientv3.WithPrefix(), clientv3.WithKeysOnly())},
		{"FirstCreated ascending", FirstCreated("/q/a#", pb.RangeRequest_ASCEND, 0),
			clientv3.OpGet("/q/a#", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))},
		{"FirstCreated descending, before", FirstCreated("/q/a#", pb.RangeRequest_DESCEND, 41),
			clientv3.OpGet("/q/a#", clientv3.WithPrefix(), clientv3.WithMaxCreateRev(41),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))},
		{"Put", Put("/l/a/b", `{"id":"x"}`, int64(lease)), clientv3.OpPut("/l/a/b", `{"id":"x"}`, clientv3.WithLease(lease))},
		{"Put without lease", Put("/sys/x", "v", 0), clientv3.OpPut("/sys/x", "v")},
		{"Delete", Delete("/q/a#1"), clientv3.OpDelete("/q/a#1")},
		{"Txn", Txn([]*pb.Compare{Absent("/q/a#1")}, []*pb.RequestOp{Put("/q/a#1", "w", int64(lease))}, []*pb.RequestOp{Get("/q/a#1")}),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/q/a#1"), "=", 0)},
				[]clientv3.Op{clientv3.OpPut("/q/a#1", "w", clientv3.WithLease(lease))}, []clientv3.Op{clientv3.OpGet("/q/a#1")})},
		{"Txn without else", Txn([]*pb.Compare{Lease("/s/1", 1)}, []*pb.RequestOp{Delete("/l/x")}, nil),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue("/s/1"), "=", 1)}, []clientv3.Op{clientv3.OpDelete("/l/x")}, nil)},
	} {
		t.Run("op "+tt.name, func(t *testing.T) {
			for _, branch := range []string{"then", "else"} {
				var got *pb.TxnRequest
				var want *pb.TxnRequest
				if branch == "then" {
					got, want = Request(nil, []*pb.RequestOp{tt.op}, nil), clientv3Request(t, nil, []clientv3.Op{tt.want}, nil)
				} else {
					got, want = Request(nil, nil, []*pb.RequestOp{tt.op}), clientv3Request(t, nil, nil, []clientv3.Op{tt.want})
				}
				equal(t, got, want)
			}
		})
	}
}

func equal(t *testing.T, got, want *pb.TxnRequest) {
	t.Helper()
	g, w := protoadapt.MessageV2Of(got), protoadapt.MessageV2Of(want)
	if !proto.Equal(g, w) {
		t.Errorf("built:   %v\nclientv3: %v", got, want)
	}
	// Byte for byte on the wire too.
	gb, err := got.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	wb, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(gb) != string(wb) {
		t.Errorf("built and clientv3's requests marshal differently:\n%x\n%x", gb, wb)
	}
}
