package audit_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestTailerRecordsUnprotectedGrants ships unprotected grants to a real
// etcd the way an arbiter does (put-if-absent under /sys/unprotected/) and
// reads the rows back from the embedded store and from a real ClickHouse:
// one row per grant, several grants in one transaction each their own row
// at the shared revision, shipping again, rewriting or deleting a record
// makes no row, and a record that does not decode is a row under its own
// key and a warning in the tailer's log.
func TestTailerRecordsUnprotectedGrants(t *testing.T) {
	forEachSink(t, func(t *testing.T, sinkURL string) {
		sink, err := openSinkURL(t.Context(), sinkURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sink.Close() })
		recordsUnprotectedGrants(t, sink)
	})
}

func recordsUnprotectedGrants(t *testing.T, sink audit.Sink) {
	env := lockdtest.Start(t, lockdtest.Options{})
	cli := env.Backend.Client
	var log syncBuffer
	tl, _ := startTailer(t, cli, sink, func(c *audit.Config) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, &log), nil))
	})
	ctx := t.Context()
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond).UTC()
	rec := func(arbiter string, seq uint64, key string) keyspace.Unprotected {
		return keyspace.Unprotected{Arbiter: arbiter, Seq: seq, Key: key, Class: "t/open", Identity: lockdtest.Alice,
			Session: 7000 + int64(seq), AcquiredAt: at.Add(time.Duration(seq) * time.Second).UnixNano(), TTL: 15}
	}
	// ship is the arbiter's shipping write: one transaction, each record
	// put only if its key is absent (a nested transaction per record).
	ship := func(vals map[string][]byte) *clientv3.TxnResponse {
		t.Helper()
		var ops []clientv3.Op
		for k, v := range vals {
			ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(k, string(v))}, nil))
		}
		resp, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// applied reports whether the record's put in a shipping was applied.
	applied := func(resp *clientv3.TxnResponse) bool { return resp.Responses[0].GetResponseTxn().GetSucceeded() }
	encode := func(u keyspace.Unprotected) map[string][]byte {
		b, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{keyspace.UnprotectedKey(u.Arbiter, u.Seq): b}
	}

	a := rec("lockd-0", 1, "t/unprot/a")
	first := ship(encode(a))
	if !applied(first) {
		t.Fatal("the first shipment of a grant was refused")
	}
	if again := ship(encode(a)); applied(again) {
		t.Fatal("shipping the same grant again was applied")
	}
	// A rewrite and a delete of a shipped record are not grants.
	changed := a
	changed.Identity = lockdtest.Bob
	b, _ := json.Marshal(changed)
	if _, err := cli.Put(ctx, keyspace.UnprotectedKey(a.Arbiter, a.Seq), string(b)); err != nil {
		t.Fatal(err)
	}
	// Three grants for three keys in one transaction, one of them garbled,
	// with a (refused) re-shipment of the first, as after a crash.
	b1, c1 := rec("lockd-0", 2, "t/unprot/b"), rec("lockd-1", 1, "t/unprot/c")
	batch := encode(b1)
	for _, m := range []map[string][]byte{encode(c1), encode(a)} {
		for k, v := range m {
			batch[k] = v
		}
	}
	garbledKey := keyspace.UnprotectedKey("lockd-1", 2)
	batch[garbledKey] = []byte("{not json")
	shared := ship(batch)
	if _, err := cli.Delete(ctx, keyspace.UnprotectedKey(b1.Arbiter, b1.Seq)); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, cli, tl)

	rows, err := sink.Query(ctx, audit.Filter{Kinds: []audit.Kind{audit.KindUnprotected}})
	if err != nil {
		t.Fatal(err)
	}
	er, err := cli.Get(ctx, keyspace.EpochKey)
	if err != nil || len(er.Kvs) != 1 {
		t.Fatalf("the epoch record: %v %v", er, err)
	}
	epoch, _, err := keyspace.DecodeEpoch(er.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	cluster := first.Header.ClusterId
	want := func(u keyspace.Unprotected, rev int64) audit.Event {
		return audit.Event{ClusterID: cluster, Epoch: epoch, Revision: rev, Key: u.Key, Kind: audit.KindUnprotected, Class: u.Class,
			Holder: u.Identity, Session: u.Session, AcquiredAt: time.Unix(0, u.AcquiredAt).UTC(), Unprotected: true, Arbiter: u.Arbiter, SpoolSeq: u.Seq}
	}
	wantRows := []audit.Event{
		want(a, first.Header.Revision),
		{ClusterID: cluster, Epoch: epoch, Revision: shared.Header.Revision, Key: garbledKey, Kind: audit.KindUnprotected,
			Unprotected: true, Arbiter: "lockd-1", SpoolSeq: 2},
		want(b1, shared.Header.Revision),
		want(c1, shared.Header.Revision),
	}
	if diff := cmp.Diff(wantRows, rows, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".ObservedAt" }, cmp.Ignore())); diff != "" {
		t.Fatalf("unprotected grant rows (-want +got):\n%s", diff)
	}
	for _, r := range rows {
		if r.ObservedAt.IsZero() || r.Token != 0 {
			t.Errorf("row %s: observed at %s, token %d; want a time and token 0", r.Key, r.ObservedAt, r.Token)
		}
	}
	if got := rowsFor(t, sink, "t/unprot/a"); len(got) != 1 {
		t.Errorf("t/unprot/a: %d rows %+v; want only its grant (the rewrite and the refused re-shipment make none)", len(got), got)
	}
	if !strings.Contains(log.String(), "did not decode") {
		t.Errorf("the garbled record is not in the tailer's log:\n%s", log.String())
	}
}

// syncBuffer is a log the tailer's goroutines write while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
