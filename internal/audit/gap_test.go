package audit_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	_ "modernc.org/sqlite"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/audit/sqlite"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// The sink goes down for real (another connection holds SQLite's write
// lock), the tailer falls behind, its lag gauge crosses half the compaction
// window, and then etcd compacts past its checkpoint: the tailer writes a
// gap record for exactly the revisions it never read and goes on.
func TestCompactionPastTheCheckpointWritesAGapAfterTheLagGaugeWarned(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	cli := env.Backend.Client
	path := t.TempDir() + "/history.db"
	sink, err := sqlite.Open(t.Context(), path, sqlite.BusyTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	reg := prometheus.NewRegistry()
	tl, _ := startTailer(t, cli, sink, func(c *audit.Config) {
		c.Registerer = reg
		c.CompactionWindow = 2 * time.Second
		c.SinkPatience = 300 * time.Millisecond
	})
	alice := env.Client(t, lockdtest.Alice)
	grantRelease := func(key string) uint64 {
		l, err := alice.Acquire(t.Context(), key, "std", fence)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		return l.Token()
	}
	before := grantRelease("t/before")
	caughtUp(t, cli, tl)
	_, checkpoint := tl.Stored()
	stored := rowsFor(t, sink, "t/before")
	lastStored := stored[len(stored)-1].Revision

	// Take the write lock away from the sink.
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO events (cluster_id, epoch, revision, key, kind, class, observed_at, holder, session, token, acquired_at,
		ended_holder, ended_session, ended_token, ended_acquired_at, duration, requester, approver, reason, from_epoch, to_epoch, gap_from, gap_to)
		VALUES (0,0,0,'lock-holder','gap','',0,'',0,0,0,'',0,0,0,0,'','','',0,0,0,0)`); err != nil {
		t.Fatal(err)
	}
	lost := grantRelease("t/lost")
	cluster := clusterHex(t, tl)
	lockdtest.WaitFor(t, 10*time.Second, "the lag gauge past half the window", func() bool {
		return testutil.ToFloat64(mustGauge(t, reg, "lockd_audit_lag_past_half_window", cluster)) == 1
	})
	if n, ok := exported(t, reg, "lockd_audit_gaps_total", cluster); !ok || n != 0 {
		t.Fatalf("lockd_audit_gaps_total before etcd compacted anything = %v (exported: %v), want 0: "+
			"exported at 0, so that increase() sees the first gap", n, ok)
	}
	resp, err := cli.Get(t.Context(), "/sys/epoch")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(t.Context(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// Keep the sink down past the tailer's patience, so it drops what it
	// read and resumes from its checkpoint, which etcd no longer has.
	time.Sleep(time.Second)
	if err := tx.Rollback(); err != nil { // the sink is back
		t.Fatal(err)
	}
	lockdtest.WaitFor(t, 15*time.Second, "a gap row", func() bool {
		rows, err := sink.Query(t.Context(), audit.Filter{Kinds: []audit.Kind{audit.KindGap}})
		return err == nil && len(rows) == 1
	})
	gaps, _ := sink.Query(t.Context(), audit.Filter{Kinds: []audit.Kind{audit.KindGap}})
	g := gaps[0]
	// From just after the checkpoint (the last stored row, or a revision
	// after it with no rows) through the compaction.
	lostRev := int64(lost & (1<<48 - 1))
	if g.GapFrom <= lastStored || g.GapFrom > lostRev || g.GapFrom > checkpoint+1 || g.GapTo < resp.Header.Revision || g.Reason == "" {
		t.Fatalf("gap %d..%d (%q); want it to start after %d (the last stored row), at or before %d (the first lost one), and reach %d (the compaction)",
			g.GapFrom, g.GapTo, g.Reason, lastStored, lostRev, resp.Header.Revision)
	}
	// The tailer counts the gap once its row is stored: the row can be seen
	// a moment before the count moves (CI, under load, did).
	lockdtest.WaitFor(t, 5*time.Second, "lockd_audit_gaps_total at 1", func() bool {
		return counter(t, reg, "lockd_audit_gaps_total", cluster) == 1
	})
	if n := counter(t, reg, "lockd_audit_gaps_total", cluster); n != 1 {
		t.Fatalf("lockd_audit_gaps_total = %v, want 1", n)
	}
	// What was read before the outage is there; what was compacted is the
	// gap, not silently missing; and the history goes on after it.
	if rows := rowsFor(t, sink, "t/before"); len(rows) != 2 || rows[0].Token != before {
		t.Fatalf("t/before: %+v", rows)
	}
	if rows := rowsFor(t, sink, "t/lost"); len(rows) != 0 {
		t.Fatalf("t/lost was compacted before it was read, yet has rows %+v (token %d)", rows, lost)
	}
	after := grantRelease("t/after")
	caughtUp(t, cli, tl)
	if rows := rowsFor(t, sink, "t/after"); len(rows) != 2 || rows[0].Token != after {
		t.Fatalf("t/after: %+v", rows)
	}
}

func clusterHex(t *testing.T, tl *audit.Tailer) string {
	t.Helper()
	c, _ := tl.Stored()
	return strconvHex(c)
}

func mustGauge(t *testing.T, reg *prometheus.Registry, name, cluster string) prometheus.Collector {
	t.Helper()
	return gathered{reg: reg, name: name, cluster: cluster}
}

// exported is the value of name{cluster} in reg and whether reg has it.
func exported(t *testing.T, reg *prometheus.Registry, name, cluster string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && labelIs(m, "cluster", cluster) {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

func counter(t *testing.T, reg *prometheus.Registry, name, cluster string) float64 {
	t.Helper()
	return testutil.ToFloat64(gathered{reg: reg, name: name, cluster: cluster})
}
