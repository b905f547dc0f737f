package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/testserver"
)

// t0 is the tests' base time; rows are observed at t0 + revision seconds.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// row is a minimal event of the given identity and kind.
func row(cluster uint64, epoch uint32, rev int64, key string, kind audit.Kind) audit.Event {
	return audit.Event{
		ClusterID: cluster, Epoch: epoch, Revision: rev, Key: key, Kind: kind,
		Class:      "default/standard",
		ObservedAt: t0.Add(time.Duration(rev) * time.Second),
	}
}

// id names a row's identity for comparisons.
func id(e audit.Event) string {
	return fmt.Sprintf("%d/%d/%d/%s", e.ClusterID, e.Epoch, e.Revision, e.Key)
}

func ids(rows []audit.Event) []string {
	out := []string{}
	for _, e := range rows {
		out = append(out, id(e))
	}
	return out
}

func open(t *testing.T, url string, opts ...Option) *Sink {
	t.Helper()
	opts = append([]Option{WithBackoff(10 * time.Millisecond), WithDialTimeout(2 * time.Second)}, opts...)
	s, err := Open(t.Context(), url, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// full is a row with every field set, to check the round trip.
func full() audit.Event {
	return audit.Event{
		ClusterID: math.MaxUint64, Epoch: math.MaxUint32, Revision: math.MaxInt64, Key: "jobs/nightly 'quoted' \\ ü",
		Kind: audit.KindForceRelease, Class: "team-a/exclusive",
		ObservedAt: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC),
		Holder:     "spiffe://lockd/next", Session: -5, Token: math.MaxUint64 - 1,
		AcquiredAt:  time.Date(2026, 3, 1, 11, 59, 59, 1, time.UTC),
		EndedHolder: "spiffe://lockd/old", EndedSession: 77, EndedToken: 41,
		EndedAcquiredAt: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), // before the epoch: negative nanoseconds
		Duration:        90*time.Minute + time.Nanosecond,
		Requester:       "alice", Approver: "bob", Reason: "stuck\nholder",
		FromEpoch: 3, ToEpoch: 4, GapFrom: 10, GapTo: 20,
		Unprotected: true, Arbiter: "lockd-0.lockd:7420", SpoolSeq: math.MaxUint64,
	}
}

// unprotectedRow is an unprotected grant as the tailer makes it.
func unprotectedRow(rev int64, key string, seq uint64) audit.Event {
	e := row(1, 2, rev, key, audit.KindUnprotected)
	e.Holder, e.Session, e.Unprotected, e.Arbiter, e.SpoolSeq = "spiffe://lockd/batch", 42, true, "lockd-1", seq
	e.AcquiredAt = t0.Add(-time.Hour)
	return e
}

func TestClickHouseRoundTrip(t *testing.T) {
	s := open(t, testserver.StartClickHouse(t))
	want := []audit.Event{row(1, 1, 5, "a", audit.KindGrant), full()}
	require.NoError(t, s.Write(t.Context(), want))
	got, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Query after Write (-want +got):\n%s", diff)
	}
	require.True(t, got[0].AcquiredAt.IsZero(), "0 reads back as the zero time")
}

// TestClickHouseUnprotectedGrants: the unprotected grant's fields round
// trip, several grants of one revision (different keys) are each kept, a
// replay stores nothing new, and the Kinds filter finds them.
func TestClickHouseUnprotectedGrants(t *testing.T) {
	s := open(t, testserver.StartClickHouse(t))
	grants := []audit.Event{unprotectedRow(30, "jobs/a", 1), unprotectedRow(30, "jobs/b", 2), unprotectedRow(31, "jobs/a", 3)}
	others := []audit.Event{row(1, 2, 29, "jobs/a", audit.KindGrant), row(1, 2, 30, "jobs/c", audit.KindRelease)}
	require.NoError(t, s.Write(t.Context(), append(append([]audit.Event{}, others...), grants...)))
	require.NoError(t, s.Write(t.Context(), grants)) // a replay

	got, err := s.Query(t.Context(), audit.Filter{Kinds: []audit.Kind{audit.KindUnprotected}})
	require.NoError(t, err)
	if diff := cmp.Diff(grants, got); diff != "" {
		t.Fatalf("unprotected grants (-want +got):\n%s", diff)
	}
	all, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	require.Equal(t, []string{"1/2/29/jobs/a", "1/2/30/jobs/a", "1/2/30/jobs/b", "1/2/30/jobs/c", "1/2/31/jobs/a"}, ids(all))
	for _, e := range all {
		require.Equal(t, e.Kind == audit.KindUnprotected, e.Unprotected, "row %s: unprotected only on unprotected grants", id(e))
	}
}

// TestClickHouseMigratesAnOlderTable: a table made before the unprotected
// grant columns existed gets them when Open meets it; its rows read back
// with the columns' defaults and new rows keep every field.
func TestClickHouseMigratesAnOlderTable(t *testing.T) {
	url := testserver.StartClickHouse(t)
	old := open(t, url, WithTable("old_events"))
	// Make the table as the previous release did: without the new columns.
	require.NoError(t, old.conn.Exec(t.Context(), "DROP TABLE "+old.table))
	var oldDDL, oldNames []string
	for _, c := range columns[:firstAdded] {
		oldDDL, oldNames = append(oldDDL, c.name+" "+c.typ), append(oldNames, c.name)
	}
	require.NoError(t, old.conn.Exec(t.Context(), "CREATE TABLE "+old.table+" ("+strings.Join(oldDDL, ", ")+
		") ENGINE = ReplacingMergeTree() ORDER BY (cluster_id, epoch, revision, key)"))
	before := row(1, 1, 7, "jobs/a", audit.KindGrant)
	batch, err := old.conn.PrepareBatch(t.Context(), "INSERT INTO "+old.table+" ("+strings.Join(oldNames, ", ")+")")
	require.NoError(t, err)
	require.NoError(t, batch.Append(values(&before)[:firstAdded]...))
	require.NoError(t, batch.Send())
	require.Equal(t, []string{"unprotected", "arbiter", "spool_seq"}, missingColumns(t, old), "the old table lacks the new columns")

	s := open(t, url, WithTable("old_events"))
	require.Empty(t, missingColumns(t, s), "Open added the new columns")
	got, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	if diff := cmp.Diff([]audit.Event{before}, got); diff != "" {
		t.Fatalf("a row stored before the migration (-want +got):\n%s", diff)
	}

	grant := unprotectedRow(8, "jobs/a", 9)
	require.NoError(t, s.Write(t.Context(), []audit.Event{grant}))
	got, err = s.Query(t.Context(), audit.Filter{Kinds: []audit.Kind{audit.KindUnprotected}})
	require.NoError(t, err)
	if diff := cmp.Diff([]audit.Event{grant}, got); diff != "" {
		t.Fatalf("a grant written to the migrated table (-want +got):\n%s", diff)
	}
	open(t, url, WithTable("old_events")) // and Open again changes nothing
}

// missingColumns lists the columns of columns the sink's table lacks.
func missingColumns(t *testing.T, s *Sink) []string {
	t.Helper()
	db, table, _ := strings.Cut(s.table, ".")
	rows, err := s.conn.Query(t.Context(), "SELECT name FROM system.columns WHERE database = ? AND table = ?", db, table)
	require.NoError(t, err)
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		have[name] = true
	}
	require.NoError(t, rows.Err())
	var missing []string
	for _, c := range columns {
		if !have[c.name] {
			missing = append(missing, c.name)
		}
	}
	return missing
}

func TestClickHouseReplay(t *testing.T) {
	s := open(t, testserver.StartClickHouse(t))
	first := []audit.Event{
		row(1, 1, 10, "a", audit.KindGrant),
		row(1, 1, 11, "b", audit.KindGrant),
		// One revision, two keys (a session's holds expiring together):
		// two identities, both kept.
		row(1, 1, 12, "a", audit.KindExpiry),
		row(1, 1, 12, "b", audit.KindExpiry),
	}
	replay := []audit.Event{
		row(1, 1, 12, "b", audit.KindExpiry), // again
		row(1, 1, 11, "b", audit.KindGrant),  // again
		row(1, 1, 13, "a", audit.KindGrant),  // new
		// A store rebuilt empty: same cluster, revisions again, higher epoch.
		row(1, 2, 10, "a", audit.KindGrant),
	}
	require.NoError(t, s.Write(t.Context(), first))
	require.NoError(t, s.Write(t.Context(), replay))
	require.NoError(t, s.Write(t.Context(), first)) // the whole first batch once more

	got, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	require.Equal(t, []string{
		"1/1/10/a", "1/1/11/b", "1/1/12/a", "1/1/12/b", "1/1/13/a", "1/2/10/a",
	}, ids(got), "each identity once, ordered by cluster, epoch, revision, key")

	var stored uint64
	require.NoError(t, s.conn.QueryRow(t.Context(), "SELECT count() FROM "+s.table).Scan(&stored))
	t.Logf("%d rows stored before merges, %d identities", stored, len(got))
	require.GreaterOrEqual(t, stored, uint64(len(got)))
}

func TestClickHouseFilter(t *testing.T) {
	s := open(t, testserver.StartClickHouse(t))
	with := func(e audit.Event, f func(*audit.Event)) audit.Event { f(&e); return e }
	rows := []audit.Event{
		with(row(7, 1, 1, "jobs/a", audit.KindGrant), func(e *audit.Event) { e.Holder = "alice" }),
		with(row(7, 1, 2, "jobs/a", audit.KindRelease), func(e *audit.Event) { e.EndedHolder = "alice" }),
		with(row(7, 1, 3, "jobs-x", audit.KindGrant), func(e *audit.Event) { e.Holder = "bob"; e.Class = "team/b" }),
		with(row(7, 1, 4, "jobs/b/c", audit.KindHandoff), func(e *audit.Event) { e.Holder = "carol"; e.EndedHolder = "bob" }),
		with(row(7, 2, 5, audit.EpochKey, audit.KindEpochAdvance), func(e *audit.Event) { e.FromEpoch, e.ToEpoch = 1, 2 }),
		with(row(9, 1, 3, "jobs/a", audit.KindExpiry), func(e *audit.Event) { e.EndedHolder = "alice"; e.Class = "team/b" }),
		row(9, 1, 6, "", audit.KindGap),
	}
	require.NoError(t, s.Write(t.Context(), rows))

	at := func(rev int64) time.Time { return t0.Add(time.Duration(rev) * time.Second) }
	for _, tc := range []struct {
		name string
		f    audit.Filter
		want []string
	}{
		{"none", audit.Filter{}, []string{"7/1/1/jobs/a", "7/1/2/jobs/a", "7/1/3/jobs-x", "7/1/4/jobs/b/c", "7/2/5//sys/epoch", "9/1/3/jobs/a", "9/1/6/"}},
		{"cluster", audit.Filter{ClusterID: 9}, []string{"9/1/3/jobs/a", "9/1/6/"}},
		{"key exact", audit.Filter{Key: "jobs/a"}, []string{"7/1/1/jobs/a", "7/1/2/jobs/a", "9/1/3/jobs/a"}},
		{"key exact is not a prefix", audit.Filter{Key: "jobs"}, []string{}},
		{"key prefix", audit.Filter{Key: "jobs/"}, []string{"7/1/1/jobs/a", "7/1/2/jobs/a", "7/1/4/jobs/b/c", "9/1/3/jobs/a"}},
		{"key prefix nested", audit.Filter{Key: "jobs/b/"}, []string{"7/1/4/jobs/b/c"}},
		{"since", audit.Filter{Since: at(4)}, []string{"7/1/4/jobs/b/c", "7/2/5//sys/epoch", "9/1/6/"}},
		{"until is exclusive", audit.Filter{Until: at(2)}, []string{"7/1/1/jobs/a"}},
		{"since and until", audit.Filter{Since: at(2), Until: at(4)}, []string{"7/1/2/jobs/a", "7/1/3/jobs-x", "9/1/3/jobs/a"}},
		{"from revision", audit.Filter{FromRevision: 5}, []string{"7/2/5//sys/epoch", "9/1/6/"}},
		{"to revision", audit.Filter{ToRevision: 2}, []string{"7/1/1/jobs/a", "7/1/2/jobs/a"}},
		{"revision range", audit.Filter{FromRevision: 3, ToRevision: 3}, []string{"7/1/3/jobs-x", "9/1/3/jobs/a"}},
		{"identity as holder or ended holder", audit.Filter{Identity: "bob"}, []string{"7/1/3/jobs-x", "7/1/4/jobs/b/c"}},
		{"identity ended only", audit.Filter{Identity: "alice", ClusterID: 9}, []string{"9/1/3/jobs/a"}},
		{"identity is bound, not spliced", audit.Filter{Identity: "x' OR 1=1 OR holder = '"}, []string{}},
		{"class", audit.Filter{Class: "team/b"}, []string{"7/1/3/jobs-x", "9/1/3/jobs/a"}},
		{"one kind", audit.Filter{Kinds: []audit.Kind{audit.KindGap}}, []string{"9/1/6/"}},
		{"kinds", audit.Filter{Kinds: []audit.Kind{audit.KindRelease, audit.KindExpiry, audit.KindHandoff}}, []string{"7/1/2/jobs/a", "7/1/4/jobs/b/c", "9/1/3/jobs/a"}},
		{"limit takes the oldest", audit.Filter{Limit: 2}, []string{"7/1/1/jobs/a", "7/1/2/jobs/a"}},
		{"limit after filters", audit.Filter{Key: "jobs/", FromRevision: 2, Limit: 2}, []string{"7/1/2/jobs/a", "7/1/4/jobs/b/c"}},
		{"all together", audit.Filter{ClusterID: 7, Key: "jobs/", Since: at(1), Until: at(5), FromRevision: 1, ToRevision: 4,
			Identity: "alice", Class: "default/standard", Kinds: []audit.Kind{audit.KindRelease}, Limit: 5}, []string{"7/1/2/jobs/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Query(t.Context(), tc.f)
			require.NoError(t, err)
			require.Equal(t, tc.want, ids(got))
		})
	}

	_, err := s.Query(t.Context(), audit.Filter{Limit: -1})
	require.ErrorIs(t, err, audit.ErrConfig)
}

func TestClickHouseWriteAcrossRestart(t *testing.T) {
	srv := testserver.StartClickHouseServer(t)
	s := open(t, srv.URL, WithAttempts(3))
	before := []audit.Event{row(1, 1, 1, "a", audit.KindGrant), row(1, 1, 2, "a", audit.KindRelease)}
	require.NoError(t, s.Write(t.Context(), before))

	srv.Stop()
	rows := []audit.Event{row(1, 1, 2, "a", audit.KindRelease), row(1, 1, 3, "b", audit.KindGrant)}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := s.Write(ctx, rows)
	require.Error(t, err, "write with the server stopped")
	require.True(t, errors.Is(err, audit.ErrSink), "errors.Is(%v, audit.ErrSink)", err)
	_, err = s.Query(ctx, audit.Filter{})
	require.ErrorIs(t, err, audit.ErrSink, "query with the server stopped")

	// The caller's retry, the same rows, after the server is back.
	srv.Restart()
	require.NoError(t, s.Write(t.Context(), rows))
	got, err := s.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	require.Equal(t, []string{"1/1/1/a", "1/1/2/a", "1/1/3/b"}, ids(got))

	// Or against a new, empty server: Open makes the table again.
	other := open(t, testserver.StartClickHouse(t))
	require.NoError(t, other.Write(t.Context(), rows))
	got, err = other.Query(t.Context(), audit.Filter{})
	require.NoError(t, err)
	require.Equal(t, []string{"1/1/2/a", "1/1/3/b"}, ids(got))
}

func TestClickHouseOpen(t *testing.T) {
	url := testserver.StartClickHouse(t)
	// Open twice: the second finds the database and table made.
	open(t, url)
	open(t, url, WithTable("other_events"))

	for _, tc := range []struct {
		name, url string
		opts      []Option
	}{
		{"not a URL", "clickhouse://%zz", nil},
		{"scheme", "tcp://127.0.0.1:9000/db", nil},
		{"no port", "clickhouse://127.0.0.1/db", nil},
		{"no database", "clickhouse://127.0.0.1:9000/", nil},
		{"database not an identifier", "clickhouse://127.0.0.1:9000/a;DROP", nil},
		{"query parameters", "clickhouse://127.0.0.1:9000/db?debug=1", nil},
		{"table not an identifier", "clickhouse://127.0.0.1:9000/db", []Option{WithTable("a.b")}},
		{"no attempts", "clickhouse://127.0.0.1:9000/db", []Option{WithAttempts(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(t.Context(), tc.url, tc.opts...)
			require.ErrorIs(t, err, audit.ErrConfig)
		})
	}

	t.Run("unreachable", func(t *testing.T) {
		srv := testserver.StartClickHouseServer(t)
		srv.Stop()
		_, err := Open(t.Context(), srv.URL, WithDialTimeout(time.Second))
		require.ErrorIs(t, err, audit.ErrSink)
	})
}

func TestClickHouseOpenHidesPassword(t *testing.T) {
	for _, u := range []string{"clickhouse://u:s3cret@127.0.0.1:9000/db%zz", "clickhouse://u:s3cret@127.0.0.1:9000/a-b"} {
		_, err := Open(t.Context(), u)
		require.ErrorIs(t, err, audit.ErrConfig)
		require.NotContains(t, err.Error(), "s3cret")
	}
}

// TestClickHouseDocQueriesRun runs every SQL block of docs/audit.md against
// the table Open makes (so a renamed table or column fails here), and checks
// that the reconciliation query lists exactly the unprotected grants made in
// its window, by their grant time, not their shipping time.
func TestClickHouseDocQueriesRun(t *testing.T) {
	s := open(t, testserver.StartClickHouse(t))
	doc, err := os.ReadFile("../../../docs/audit.md")
	require.NoError(t, err)
	outage := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC) // the doc's window: 02:00 to 03:00
	g := func(rev int64, key string, seq uint64, acquired time.Time) audit.Event {
		e := unprotectedRow(rev, key, seq)
		e.AcquiredAt, e.ObservedAt = acquired, outage.Add(3*time.Hour) // shipped long after
		return e
	}
	protected := row(1, 2, 40, "jobs/p", audit.KindGrant)
	protected.AcquiredAt = outage.Add(time.Minute)
	require.NoError(t, s.Write(t.Context(), []audit.Event{
		g(50, "jobs/b", 2, outage.Add(30*time.Minute)),
		g(50, "jobs/a", 1, outage.Add(10*time.Minute)),
		g(51, "jobs/before", 3, outage.Add(-time.Second)),
		g(51, "jobs/after", 4, outage.Add(time.Hour)),
		protected,
	}))

	var blocks []string
	for _, part := range strings.Split(string(doc), "```sql\n")[1:] {
		q, _, ok := strings.Cut(part, "```")
		require.True(t, ok, "an unclosed sql block")
		blocks = append(blocks, strings.TrimSuffix(strings.TrimSpace(q), ";"))
	}
	require.GreaterOrEqual(t, len(blocks), 3)
	var reconciled bool
	for _, q := range blocks {
		rows, err := s.conn.Query(t.Context(), q)
		require.NoError(t, err, q)
		if !strings.Contains(q, "'unprotected-grant'") {
			for rows.Next() {
			}
			require.NoError(t, rows.Err(), q)
			rows.Close()
			continue
		}
		reconciled = true
		var got []string
		for rows.Next() {
			var (
				acquired, shipped           time.Time
				key, class, holder, arbiter string
				session, revision           int64
				seq                         uint64
			)
			require.NoError(t, rows.Scan(&acquired, &key, &class, &holder, &session, &arbiter, &seq, &revision, &shipped))
			require.Equal(t, "lockd-1", arbiter)
			require.Equal(t, int64(50), revision)
			require.Equal(t, outage.Add(3*time.Hour).Unix(), shipped.Unix())
			got = append(got, fmt.Sprintf("%s#%d@%s", key, seq, acquired.UTC().Format("15:04")))
		}
		require.NoError(t, rows.Err())
		rows.Close()
		require.Equal(t, []string{"jobs/a#1@02:10", "jobs/b#2@02:30"}, got, "the grants made in the window, oldest first")
	}
	require.True(t, reconciled, "docs/audit.md has the reconciliation query")
}
