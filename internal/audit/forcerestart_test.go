package audit_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestForceReleaseThatRevokesASessionSurvivesATailerRestart: an approved
// force-release with revoke_session deletes one hold and writes its record
// in one transaction, and the session's lease is revoked in a later
// revision. A tailer that stored the first and restarts before the second
// still records the session's other holds as forced (requester, approver,
// reason), not as expired: what a force record asked is read back from
// the store, not only from the memory of the tailer that saw it. So does a
// tailer that finds its checkpoint compacted and goes on, after a gap row,
// from a snapshot.
func TestForceReleaseThatRevokesASessionSurvivesATailerRestart(t *testing.T) {
	t.Run("resumed from the checkpoint", func(t *testing.T) { forceRevokeAcrossRestart(t, false) })
	t.Run("resumed after a gap, the checkpoint compacted", func(t *testing.T) { forceRevokeAcrossRestart(t, true) })
}

func forceRevokeAcrossRestart(t *testing.T, compact bool) {
	env := lockdtest.Start(t, lockdtest.Options{})
	cli := env.Backend.Client
	ctx := t.Context()
	sink, err := openSinkURL(ctx, t.TempDir()+"/history.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	_, stop := startTailer(t, cli, sink, nil)

	// Two holds on one session.
	alice := env.Client(t, lockdtest.Alice)
	forced, err := alice.Acquire(ctx, "t/revoke/forced", "std", fence)
	if err != nil {
		t.Fatal(err)
	}
	other, err := alice.Acquire(ctx, "t/revoke/other", "std", fence)
	if err != nil {
		t.Fatal(err)
	}
	holds, err := cli.Get(ctx, keyspace.HoldPrefix+"t/revoke/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(holds.Kvs) != 2 || holds.Kvs[0].Lease == 0 || holds.Kvs[0].Lease != holds.Kvs[1].Lease {
		t.Fatalf("want two holds on one session, got %v", holds.Kvs)
	}
	hold, session := holds.Kvs[0], holds.Kvs[0].Lease
	if string(hold.Key) != keyspace.HoldKey("t/revoke/forced") {
		t.Fatalf("first hold is %s", hold.Key)
	}

	// The approval's transaction, as the arbiter writes it: the hold
	// deleted and the record put on a lease of its own; the revoke of the
	// session comes after, and this tailer does not see it.
	recLease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(keyspace.Force{ID: "restart", Key: "t/revoke/forced", Holder: lockdtest.Alice, Session: session,
		HoldRevision: hold.ModRevision, Requester: lockdtest.Operator, Reason: "INC-77: wedged", RevokeSession: true,
		Approver: lockdtest.Operator2, ApprovedAt: time.Now()})
	hk := keyspace.HoldKey("t/revoke/forced")
	approved, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(hk), "=", hold.ModRevision)).
		Then(clientv3.OpDelete(hk), clientv3.OpPut(keyspace.ForceRecordPrefix+"restart", string(rec), clientv3.WithLease(recLease.ID))).
		Commit()
	if err != nil || !approved.Succeeded {
		t.Fatalf("the approval's transaction: %v (succeeded %v)", err, approved != nil && approved.Succeeded)
	}
	forceRev := approved.Header.Revision
	checkpoint := func() int64 {
		resp, err := cli.Get(ctx, keyspace.AuditPrefix+"checkpoint/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			return 0
		}
		n, _ := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		return n
	}
	lockdtest.WaitFor(t, 10*time.Second, "the checkpoint at or past the force record", func() bool { return checkpoint() >= forceRev })
	stop()

	revoke := func() {
		t.Helper()
		revoked, err := cli.Revoke(ctx, clientv3.LeaseID(session))
		if err != nil {
			t.Fatal(err)
		}
		if cp := checkpoint(); cp >= revoked.Header.Revision {
			t.Fatalf("checkpoint %d is not before the revoke (%d): the restart shows nothing", cp, revoked.Header.Revision)
		}
	}
	var tl *audit.Tailer
	if compact {
		// Compacted before the new tailer starts, which then revokes.
		head, err := cli.Get(ctx, keyspace.EpochKey)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, head.Header.Revision); err != nil {
			t.Fatal(err)
		}
		tl, _ = startTailer(t, cli, sink, nil)
		revoke()
	} else {
		revoke()
		tl, _ = startTailer(t, cli, sink, nil)
	}
	caughtUp(t, cli, tl)
	gaps, err := sink.Query(ctx, audit.Filter{Kinds: []audit.Kind{audit.KindGap}})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{false: 0, true: 1}[compact]; len(gaps) != want {
		t.Fatalf("gap rows %+v; want %d", gaps, want)
	}

	for _, tc := range []struct {
		key   string
		token uint64
	}{{"t/revoke/forced", forced.Token()}, {"t/revoke/other", other.Token()}} {
		rows := rowsFor(t, sink, tc.key)
		if len(rows) != 2 || rows[0].Kind != audit.KindGrant {
			t.Fatalf("%s: rows %+v; want its grant and its end", tc.key, rows)
		}
		end := rows[1]
		if end.Kind != audit.KindForceRelease || end.EndedToken != tc.token || end.EndedSession != session ||
			end.Requester != lockdtest.Operator || end.Approver != lockdtest.Operator2 || end.Reason != "INC-77: wedged" {
			t.Errorf("%s: its end %+v; want a force-release of token %d by %s and %s for INC-77",
				tc.key, end, tc.token, lockdtest.Operator, lockdtest.Operator2)
		}
	}
}
