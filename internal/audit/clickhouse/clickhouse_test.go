package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	}
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
