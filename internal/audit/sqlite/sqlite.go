// Package sqlite is the embedded audit sink: the history in one SQLite file
// next to lockd's data (modernc.org/sqlite, no cgo, no server), so lockd with
// no flags has history. It suits one lockd; several arbiters share a
// ClickHouse sink instead (each lockd's file holds only what it tailed).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/lockd-dev/lockd/internal/audit"
)

const schema = `
CREATE TABLE IF NOT EXISTS events (
  cluster_id INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  revision INTEGER NOT NULL,
  key TEXT NOT NULL,
  kind TEXT NOT NULL,
  class TEXT NOT NULL,
  observed_at INTEGER NOT NULL,
  holder TEXT NOT NULL,
  session INTEGER NOT NULL,
  token INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  ended_holder TEXT NOT NULL,
  ended_session INTEGER NOT NULL,
  ended_token INTEGER NOT NULL,
  ended_acquired_at INTEGER NOT NULL,
  duration INTEGER NOT NULL,
  requester TEXT NOT NULL,
  approver TEXT NOT NULL,
  reason TEXT NOT NULL,
  from_epoch INTEGER NOT NULL,
  to_epoch INTEGER NOT NULL,
  gap_from INTEGER NOT NULL,
  gap_to INTEGER NOT NULL,
  unprotected INTEGER NOT NULL DEFAULT 0,
  arbiter TEXT NOT NULL DEFAULT '',
  spool_seq INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (cluster_id, epoch, revision, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_key ON events (key, revision);
CREATE INDEX IF NOT EXISTS events_observed ON events (observed_at);
`

// added are the columns added to the events table after its first
// release, in order: Open adds those a file made by an older lockd lacks.
// Each has a default, so rows stored before read back with zero values.
var added = []struct{ name, ddl string }{
	{"unprotected", "unprotected INTEGER NOT NULL DEFAULT 0"},
	{"arbiter", "arbiter TEXT NOT NULL DEFAULT ''"},
	{"spool_seq", "spool_seq INTEGER NOT NULL DEFAULT 0"},
}

const columns = `cluster_id, epoch, revision, key, kind, class, observed_at, holder, session, token, acquired_at,
  ended_holder, ended_session, ended_token, ended_acquired_at, duration, requester, approver, reason,
  from_epoch, to_epoch, gap_from, gap_to, unprotected, arbiter, spool_seq`

// ncolumns is how many columns columns lists.
var ncolumns = strings.Count(columns, ",") + 1

// Sink is the SQLite history. Safe for concurrent use.
type Sink struct {
	db *sql.DB

	mu      sync.Mutex
	inserts map[int]*sql.Stmt // by row count (chunks)
}

// Option configures Open.
type Option func(*options)

type options struct{ busy time.Duration }

// BusyTimeout is how long a write waits for another writer's lock on the
// file before it fails (default 10s).
func BusyTimeout(d time.Duration) Option { return func(o *options) { o.busy = d } }

// Open opens (creating if needed) the history at path. Writes are durable
// when Write returns (WAL, synchronous=FULL).
func Open(ctx context.Context, path string, opts ...Option) (*Sink, error) {
	o := options{busy: 10 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if path == "" {
		return nil, fmt.Errorf("%w: sqlite: path: required", audit.ErrConfig)
	}
	dsn := fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(%d)", path, o.busy.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlite: open %s: %v", audit.ErrSink, path, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w: sqlite: create the events table in %s: %v", audit.ErrSink, path, err)
	}
	if err := migrate(ctx, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w: sqlite: migrate the events table in %s: %v", audit.ErrSink, path, err)
	}
	return &Sink{db: db}, nil
}

// migrate adds the columns of added that the events table lacks (a file
// an older lockd made). Another process may add one at the same time: a
// failed ALTER is an error only if the column is still missing after it.
func migrate(ctx context.Context, db *sql.DB) error {
	have, err := tableColumns(ctx, db)
	if err != nil {
		return err
	}
	for _, c := range added {
		if have[c.name] {
			continue
		}
		if _, err := db.ExecContext(ctx, "ALTER TABLE events ADD COLUMN "+c.ddl); err != nil {
			now, err2 := tableColumns(ctx, db)
			if err2 != nil || !now[c.name] {
				return fmt.Errorf("add column %s: %w", c.name, err)
			}
		}
	}
	return nil
}

// tableColumns names the events table's columns.
func tableColumns(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	rs, err := db.QueryContext(ctx, "SELECT name FROM pragma_table_info('events')")
	if err != nil {
		return nil, fmt.Errorf("read the table's columns: %w", err)
	}
	defer rs.Close()
	have := map[string]bool{}
	for rs.Next() {
		var name string
		if err := rs.Scan(&name); err != nil {
			return nil, fmt.Errorf("read the table's columns: %w", err)
		}
		have[name] = true
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read the table's columns: %w", err)
	}
	return have, nil
}

// rowsPerInsert is how many rows one INSERT statement carries: far fewer
// statements to run than one per row, within SQLite's 32766 parameters.
const rowsPerInsert = 200

// chunks splits n rows into the row counts of the INSERTs that write them:
// rowsPerInsert at a time, then the rest in powers of two, so that a few
// statements, each prepared once (insert), write any number of rows.
func chunks(n int) []int {
	var out []int
	for ; n >= rowsPerInsert; n -= rowsPerInsert {
		out = append(out, rowsPerInsert)
	}
	for p := 128; n > 0; p /= 2 {
		if n >= p {
			out = append(out, p)
			n -= p
		}
	}
	return out
}

// insert is the prepared INSERT of n rows. SQLite parses such a statement
// (27 parameters a row) in about a third of the time it takes to run it, so
// each size is prepared once and kept.
func (s *Sink) insert(ctx context.Context, n int) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.inserts[n]; st != nil {
		return st, nil
	}
	one := "(" + strings.Repeat("?,", ncolumns-1) + "?)"
	st, err := s.db.PrepareContext(ctx, `INSERT OR IGNORE INTO events (`+columns+`) VALUES `+strings.TrimSuffix(strings.Repeat(one+",", n), ","))
	if err != nil {
		return nil, err
	}
	if s.inserts == nil {
		s.inserts = map[int]*sql.Stmt{}
	}
	s.inserts[n] = st
	return st, nil
}

// Write stores rows in one transaction; a row already stored (same
// identity) is left as it is.
func (s *Sink) Write(ctx context.Context, rows []audit.Event) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: sqlite: begin: %v", audit.ErrSink, err)
	}
	defer func() { _ = tx.Rollback() }()
	args := make([]any, 0, ncolumns*rowsPerInsert)
	for _, n := range chunks(len(rows)) {
		args = args[:0]
		for _, r := range rows[:n] {
			args = append(args, int64(r.ClusterID), r.Epoch, r.Revision, r.Key, string(r.Kind), r.Class, nanos(r.ObservedAt),
				r.Holder, r.Session, int64(r.Token), nanos(r.AcquiredAt),
				r.EndedHolder, r.EndedSession, int64(r.EndedToken), nanos(r.EndedAcquiredAt), int64(r.Duration),
				r.Requester, r.Approver, r.Reason, r.FromEpoch, r.ToEpoch, r.GapFrom, r.GapTo,
				r.Unprotected, r.Arbiter, int64(r.SpoolSeq))
		}
		st, err := s.insert(ctx, n)
		if err == nil {
			_, err = tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		}
		if err != nil {
			return fmt.Errorf("%w: sqlite: insert %d rows from revision %d: %v", audit.ErrSink, n, rows[0].Revision, err)
		}
		rows = rows[n:]
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: sqlite: commit: %v", audit.ErrSink, err)
	}
	return nil
}

// Query returns the rows matching f.
func (s *Sink) Query(ctx context.Context, f audit.Filter) ([]audit.Event, error) {
	var where []string
	var args []any
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if f.ClusterID != 0 {
		add("cluster_id = ?", int64(f.ClusterID))
	}
	switch {
	case strings.HasSuffix(f.Key, "/"):
		add("substr(key, 1, ?) = ?", len(f.Key), f.Key)
	case f.Key != "":
		add("key = ?", f.Key)
	}
	if !f.Since.IsZero() {
		add("observed_at >= ?", f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		add("observed_at < ?", f.Until.UnixNano())
	}
	if f.FromRevision != 0 {
		add("revision >= ?", f.FromRevision)
	}
	if f.ToRevision != 0 {
		add("revision <= ?", f.ToRevision)
	}
	if f.Identity != "" {
		add("(holder = ? OR ended_holder = ?)", f.Identity, f.Identity)
	}
	if f.Class != "" {
		add("class = ?", f.Class)
	}
	if len(f.Kinds) > 0 {
		ph := strings.TrimSuffix(strings.Repeat("?,", len(f.Kinds)), ",")
		var ks []any
		for _, k := range f.Kinds {
			ks = append(ks, string(k))
		}
		add("kind IN ("+ph+")", ks...)
	}
	q := `SELECT ` + columns + ` FROM events`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY cluster_id, epoch, revision, key`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	rs, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlite: query: %v", audit.ErrSink, err)
	}
	defer rs.Close()
	var out []audit.Event
	for rs.Next() {
		var r audit.Event
		var cluster, tok, endedTok, obs, acq, endedAcq, dur, seq int64
		var kind string
		if err := rs.Scan(&cluster, &r.Epoch, &r.Revision, &r.Key, &kind, &r.Class, &obs, &r.Holder, &r.Session, &tok, &acq,
			&r.EndedHolder, &r.EndedSession, &endedTok, &endedAcq, &dur, &r.Requester, &r.Approver, &r.Reason,
			&r.FromEpoch, &r.ToEpoch, &r.GapFrom, &r.GapTo, &r.Unprotected, &r.Arbiter, &seq); err != nil {
			return nil, fmt.Errorf("%w: sqlite: scan: %v", audit.ErrSink, err)
		}
		r.ClusterID, r.Token, r.EndedToken, r.SpoolSeq = uint64(cluster), uint64(tok), uint64(endedTok), uint64(seq)
		r.Kind, r.Duration = audit.Kind(kind), time.Duration(dur)
		r.ObservedAt, r.AcquiredAt, r.EndedAcquiredAt = fromNanos(obs), fromNanos(acq), fromNanos(endedAcq)
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("%w: sqlite: read rows: %v", audit.ErrSink, err)
	}
	return out, nil
}

// Stats implements audit.Sink.
func (s *Sink) Stats(ctx context.Context, since, until time.Time) ([]audit.ClassStats, error) {
	q := `SELECT class,
  SUM(CASE WHEN kind IN ('grant','handoff') THEN 1 ELSE 0 END),
  SUM(CASE WHEN kind = 'expiry' THEN 1 ELSE 0 END),
  SUM(CASE WHEN kind = 'force-release' THEN 1 ELSE 0 END),
  MAX(duration)
FROM events WHERE class != ''`
	var args []any
	if !since.IsZero() {
		q += ` AND observed_at >= ?`
		args = append(args, since.UnixNano())
	}
	if !until.IsZero() {
		q += ` AND observed_at < ?`
		args = append(args, until.UnixNano())
	}
	q += ` GROUP BY class ORDER BY class`
	rs, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlite: stats: %v", audit.ErrSink, err)
	}
	defer rs.Close()
	var out []audit.ClassStats
	for rs.Next() {
		var c audit.ClassStats
		var longest int64
		if err := rs.Scan(&c.Class, &c.Grants, &c.Expiries, &c.Forced, &longest); err != nil {
			return nil, fmt.Errorf("%w: sqlite: stats: %v", audit.ErrSink, err)
		}
		c.Longest = time.Duration(longest)
		out = append(out, c)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("%w: sqlite: stats: %v", audit.ErrSink, err)
	}
	return out, nil
}

// Close closes the file.
func (s *Sink) Close() error {
	s.mu.Lock()
	for _, st := range s.inserts {
		_ = st.Close()
	}
	s.inserts = nil
	s.mu.Unlock()
	if err := s.db.Close(); err != nil && !errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%w: sqlite: close: %v", audit.ErrSink, err)
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
