package sqlite

import (
	"database/sql"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/audit"
)

// v1Schema is the events table as the first release made it, before the
// unprotected grant columns: a file of that release must still open.
const v1Schema = `
CREATE TABLE events (
  cluster_id INTEGER NOT NULL, epoch INTEGER NOT NULL, revision INTEGER NOT NULL, key TEXT NOT NULL,
  kind TEXT NOT NULL, class TEXT NOT NULL, observed_at INTEGER NOT NULL, holder TEXT NOT NULL,
  session INTEGER NOT NULL, token INTEGER NOT NULL, acquired_at INTEGER NOT NULL,
  ended_holder TEXT NOT NULL, ended_session INTEGER NOT NULL, ended_token INTEGER NOT NULL,
  ended_acquired_at INTEGER NOT NULL, duration INTEGER NOT NULL, requester TEXT NOT NULL,
  approver TEXT NOT NULL, reason TEXT NOT NULL, from_epoch INTEGER NOT NULL, to_epoch INTEGER NOT NULL,
  gap_from INTEGER NOT NULL, gap_to INTEGER NOT NULL,
  PRIMARY KEY (cluster_id, epoch, revision, key)
) WITHOUT ROWID;
CREATE INDEX events_key ON events (key, revision);
CREATE INDEX events_observed ON events (observed_at);
`

// v1Insert is how the first release wrote a row (and how an older lockd
// sharing the file still would): without the new columns.
const v1Insert = `INSERT INTO events (cluster_id, epoch, revision, key, kind, class, observed_at, holder, session, token, acquired_at,
  ended_holder, ended_session, ended_token, ended_acquired_at, duration, requester, approver, reason, from_epoch, to_epoch, gap_from, gap_to)
  VALUES (?, 1, ?, ?, 'grant', 'jobs/std', ?, 'spiffe://t/old', 5, 65541, ?, '', 0, 0, 0, 0, '', '', '', 0, 0, 0, 0)`

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// unprotected is an unprotected grant as the tailer makes it.
func unprotected(rev int64, key string, seq uint64) audit.Event {
	return audit.Event{ClusterID: 7, Epoch: 2, Revision: rev, Key: key, Kind: audit.KindUnprotected, Class: "jobs/open",
		ObservedAt: t0.Add(time.Duration(rev) * time.Second), Holder: "spiffe://t/batch", Session: 42,
		AcquiredAt: t0.Add(-time.Hour), Unprotected: true, Arbiter: "lockd-1", SpoolSeq: seq}
}

func open(t *testing.T, path string) *Sink {
	t.Helper()
	s, err := Open(t.Context(), path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestSQLiteRoundTripsEveryField(t *testing.T) {
	s := open(t, t.TempDir()+"/history.db")
	full := audit.Event{
		ClusterID: 9, Epoch: math.MaxUint32, Revision: math.MaxInt64, Key: "jobs/nightly 'quoted' ü",
		Kind: audit.KindForceRelease, Class: "jobs/std", ObservedAt: t0.Add(123456789),
		Holder: "spiffe://t/next", Session: -5, Token: math.MaxUint64 - 1, AcquiredAt: t0.Add(-time.Second),
		EndedHolder: "spiffe://t/old", EndedSession: 77, EndedToken: 41, EndedAcquiredAt: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC),
		Duration: 90 * time.Minute, Requester: "op1", Approver: "op2", Reason: "stuck\nholder",
		FromEpoch: 3, ToEpoch: 4, GapFrom: 10, GapTo: 20,
		Unprotected: true, Arbiter: "lockd-0.lockd:7420", SpoolSeq: math.MaxUint64,
	}
	// Two grants shipped in one revision (different keys) and one after.
	want := []audit.Event{unprotected(30, "jobs/a", 1), unprotected(30, "jobs/b", 2), unprotected(31, "jobs/a", 3), full}
	require.NoError(t, s.Write(t.Context(), want))
	require.NoError(t, s.Write(t.Context(), want[:2])) // a replay changes nothing

	got, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Query after Write (-want +got):\n%s", diff)
	}
	got, err = s.Query(t.Context(), audit.Filter{Kinds: []audit.Kind{audit.KindUnprotected}, Since: t0.Add(31 * time.Second)})
	require.NoError(t, err)
	if diff := cmp.Diff(want[2:3], got); diff != "" {
		t.Fatalf("the unprotected grants observed from revision 31's time (-want +got):\n%s", diff)
	}
}

// TestSQLiteMigratesAnOlderFile: a history file of the first release opens
// (the new columns are added), its rows read back with zero values, an
// older lockd's insert still works, and new rows keep every field.
func TestSQLiteMigratesAnOlderFile(t *testing.T) {
	path := t.TempDir() + "/history.db"
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	_, err = db.Exec(v1Schema)
	require.NoError(t, err)
	_, err = db.Exec(v1Insert, 7, 10, "jobs/a", t0.UnixNano(), t0.UnixNano())
	require.NoError(t, err)
	require.NotContains(t, columnsOf(t, db), "spool_seq")
	require.NoError(t, db.Close())

	s := open(t, path)
	cols := columnsOf(t, s.db)
	for _, c := range []string{"unprotected", "arbiter", "spool_seq"} {
		require.Contains(t, cols, c, "Open added the column")
	}
	old := audit.Event{ClusterID: 7, Epoch: 1, Revision: 10, Key: "jobs/a", Kind: audit.KindGrant, Class: "jobs/std",
		ObservedAt: t0, Holder: "spiffe://t/old", Session: 5, Token: 65541, AcquiredAt: t0}
	got, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	if diff := cmp.Diff([]audit.Event{old}, got); diff != "" {
		t.Fatalf("the row stored before the migration (-want +got):\n%s", diff)
	}

	// An older lockd sharing the file still writes its rows.
	_, err = s.db.Exec(v1Insert, 7, 11, "jobs/b", t0.UnixNano(), t0.UnixNano())
	require.NoError(t, err)
	grant := unprotected(12, "jobs/a", 9)
	require.NoError(t, s.Write(t.Context(), []audit.Event{grant}))
	got, err = s.Query(t.Context(), audit.Filter{Kinds: []audit.Kind{audit.KindUnprotected}})
	require.NoError(t, err)
	if diff := cmp.Diff([]audit.Event{grant}, got); diff != "" {
		t.Fatalf("a grant written to the migrated file (-want +got):\n%s", diff)
	}
	all, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.False(t, all[1].Unprotected, "the older lockd's row")

	// Opening the migrated file again changes nothing.
	again := open(t, path)
	got, err = again.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	require.Len(t, got, 3)
}

func columnsOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rs, err := db.Query("SELECT name FROM pragma_table_info('events')")
	require.NoError(t, err)
	defer rs.Close()
	var cols []string
	for rs.Next() {
		var c string
		require.NoError(t, rs.Scan(&c))
		cols = append(cols, c)
	}
	require.NoError(t, rs.Err())
	return cols
}

// TestWriteChunksEveryRowIntoFewStatementSizes: any number of rows is
// written by INSERTs of rowsPerInsert rows and powers of two below 128,
// adding up to the rows exactly, so a few prepared statements serve every
// batch; and every row of odd-sized batches is stored.
func TestWriteChunksEveryRowIntoFewStatementSizes(t *testing.T) {
	sizes := map[int]bool{}
	for n := range 1000 {
		sum := 0
		for _, c := range chunks(n) {
			sum += c
			sizes[c] = true
		}
		if sum != n {
			t.Fatalf("chunks(%d) add up to %d", n, sum)
		}
	}
	if len(sizes) > 9 {
		t.Errorf("%d statement sizes for up to 1000 rows, want at most 9 (200 and 128..1): %v", len(sizes), sizes)
	}

	s, err := Open(t.Context(), t.TempDir()+"/audit.db")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	rev := int64(0)
	for _, n := range []int{1, 3, 199, 200, 201, 457} {
		rows := make([]audit.Event, n)
		for i := range rows {
			rev++
			rows[i] = audit.Event{ClusterID: 7, Epoch: 1, Revision: rev, Key: "t/k", Kind: audit.KindGrant, Class: "t/c"}
		}
		require.NoError(t, s.Write(t.Context(), rows))
	}
	got, err := s.Query(t.Context(), audit.Filter{Key: "t/k"})
	require.NoError(t, err)
	if len(got) != int(rev) {
		t.Errorf("%d rows stored, want %d", len(got), rev)
	}
}

// BenchmarkWrite writes the history in batches the tailer makes under
// load (one transaction, about a second of grants and releases):
//
//	go test -run '^$' -bench Write -benchtime 20x ./internal/audit/sqlite
func BenchmarkWrite(b *testing.B) {
	s, err := Open(b.Context(), b.TempDir()+"/audit.db")
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	const batch = 4321
	rows := make([]audit.Event, batch)
	rev := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		for i := range rows {
			rev++
			rows[i] = audit.Event{ClusterID: 7, Epoch: 1, Revision: rev, Key: "bench/u/12", Kind: audit.KindGrant, Class: "bench/bench",
				Holder: "spiffe://lockd.local/bench-1", Session: 0x694d9a2b6c1e0f07, Token: uint64(1)<<48 | uint64(rev)}
		}
		require.NoError(b, s.Write(b.Context(), rows))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/row")
}
