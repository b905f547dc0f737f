// Package clickhouse is the audit history's ClickHouse sink: one table, a
// ReplacingMergeTree ordered by the row identity (cluster_id, epoch,
// revision, key), read with FINAL so a row written twice (a tailer's
// replay after a failed Write) is returned once.
//
// The SQL is kept to what ClickHouse 18.16 (Debian's) understands: times
// are Int64 unix nanoseconds (0 is the zero time), durations Int64
// nanoseconds, and no newer types, settings or insert dedup tokens are
// used.
package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/lockd-dev/lockd/internal/audit"
)

// DefaultTable is the table Open uses unless WithTable names another.
const DefaultTable = "audit_events"

// Defaults of the options.
const (
	DefaultAttempts    = 3
	DefaultDialTimeout = 5 * time.Second
	DefaultBackoff     = 200 * time.Millisecond
)

// Sink stores audit rows in a ClickHouse table. It implements audit.Sink
// and is safe for concurrent use.
type Sink struct {
	conn     driver.Conn
	table    string // database.table, both validated identifiers
	attempts int
	backoff  time.Duration
}

var _ audit.Sink = (*Sink)(nil)

// Option configures Open.
type Option func(*config)

type config struct {
	table       string
	attempts    int
	backoff     time.Duration
	dialTimeout time.Duration
}

// WithTable names the table in the URL's database (default DefaultTable).
// It must be a plain identifier: letters, digits and underscores.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithAttempts sets how many batches one Write sends before it gives up
// and returns its error to the caller (default DefaultAttempts, at least 1).
func WithAttempts(n int) Option { return func(c *config) { c.attempts = n } }

// WithBackoff sets the pause before a Write's second batch; it doubles for
// each one after (default DefaultBackoff).
func WithBackoff(d time.Duration) Option { return func(c *config) { c.backoff = d } }

// WithDialTimeout bounds each connection attempt (default
// DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// identifier is what a database or table name must look like: it is put in
// DDL and queries as is (names cannot be bound parameters).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Open connects to the ClickHouse server of rawURL,
// clickhouse://[user[:password]@]host:port/database (the native protocol),
// creates the database and the table if they are missing, adds the columns
// a table made by an older lockd lacks, and returns the sink. A malformed
// URL or option is an error wrapping audit.ErrConfig; a server that cannot
// be reached or refuses the DDL is one wrapping audit.ErrSink.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Sink, error) {
	cfg := config{table: DefaultTable, attempts: DefaultAttempts, backoff: DefaultBackoff, dialTimeout: DefaultDialTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not url.Error's text: it quotes the URL, password and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: clickhouse URL: %v (want clickhouse://host:port/database)", audit.ErrConfig, err)
	}
	if u.Scheme != "clickhouse" || u.Host == "" || u.Port() == "" {
		return nil, fmt.Errorf("%w: clickhouse URL %q: want clickhouse://host:port/database", audit.ErrConfig, u.Redacted())
	}
	if len(u.Query()) > 0 {
		return nil, fmt.Errorf("%w: clickhouse URL %q: query parameters are not supported; remove them", audit.ErrConfig, u.Redacted())
	}
	database := strings.TrimPrefix(u.Path, "/")
	if !identifier.MatchString(database) {
		return nil, fmt.Errorf("%w: clickhouse URL %q: database %q must be letters, digits and underscores", audit.ErrConfig, u.Redacted(), database)
	}
	if !identifier.MatchString(cfg.table) {
		return nil, fmt.Errorf("%w: clickhouse table %q must be letters, digits and underscores", audit.ErrConfig, cfg.table)
	}
	if cfg.attempts < 1 || cfg.backoff < 0 || cfg.dialTimeout <= 0 {
		return nil, fmt.Errorf("%w: clickhouse: attempts must be at least 1 (got %d), backoff not negative (got %v), dial timeout positive (got %v)",
			audit.ErrConfig, cfg.attempts, cfg.backoff, cfg.dialTimeout)
	}
	auth := ch.Auth{Database: "default", Username: "default"}
	if u.User != nil {
		auth.Username = u.User.Username()
		auth.Password, _ = u.User.Password()
	}
	conn, err := ch.Open(&ch.Options{
		Addr:        []string{u.Host},
		Auth:        auth,
		DialTimeout: cfg.dialTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: clickhouse %s: connect: %v", audit.ErrSink, u.Host, err)
	}
	s := &Sink{conn: conn, table: database + "." + cfg.table, attempts: cfg.attempts, backoff: cfg.backoff}
	for _, ddl := range []string{
		"CREATE DATABASE IF NOT EXISTS " + database,
		"CREATE TABLE IF NOT EXISTS " + s.table + " (" + columnDDL + ") ENGINE = ReplacingMergeTree() ORDER BY (cluster_id, epoch, revision, key)",
	} {
		if err := conn.Exec(ctx, ddl); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("%w: clickhouse %s: create %s: %v (is the server up, and may the user create it?)",
				audit.ErrSink, u.Host, s.table, err)
		}
	}
	if err := s.migrate(ctx, database, cfg.table); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: clickhouse %s: migrate %s: %v (is the server up, and may the user alter it?)",
			audit.ErrSink, u.Host, s.table, err)
	}
	return s, nil
}

// migrate adds the columns from columns[firstAdded:] that the table lacks
// (one made by an older lockd), each with its type's default for the rows
// stored before. ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, so the
// columns are read from system.columns; another lockd may add one at the
// same time, so a failed ALTER is an error only if the column is still
// missing after it.
func (s *Sink) migrate(ctx context.Context, database, table string) error {
	have, err := s.tableColumns(ctx, database, table)
	if err != nil {
		return err
	}
	for _, c := range columns[firstAdded:] {
		if have[c.name] {
			continue
		}
		if err := s.conn.Exec(ctx, "ALTER TABLE "+s.table+" ADD COLUMN "+c.name+" "+c.typ); err != nil {
			now, err2 := s.tableColumns(ctx, database, table)
			if err2 != nil || !now[c.name] {
				return fmt.Errorf("add column %s: %w", c.name, err)
			}
		}
	}
	return nil
}

// tableColumns names the table's columns.
func (s *Sink) tableColumns(ctx context.Context, database, table string) (map[string]bool, error) {
	rows, err := s.conn.Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ?", database, table)
	if err != nil {
		return nil, fmt.Errorf("read the table's columns: %w", err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("read the table's columns: %w", err)
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the table's columns: %w", err)
	}
	return have, nil
}

// columns are the table's columns, one per audit.Event field, in the order
// values returns them and scan reads them.
var columns = []struct{ name, typ string }{
	{"cluster_id", "UInt64"},
	{"epoch", "UInt32"},
	{"revision", "Int64"},
	{"key", "String"},
	{"kind", "String"},
	{"class", "String"},
	{"observed_at", "Int64"},
	{"holder", "String"},
	{"session", "Int64"},
	{"token", "UInt64"},
	{"acquired_at", "Int64"},
	{"ended_holder", "String"},
	{"ended_session", "Int64"},
	{"ended_token", "UInt64"},
	{"ended_acquired_at", "Int64"},
	{"duration", "Int64"},
	{"requester", "String"},
	{"approver", "String"},
	{"reason", "String"},
	{"from_epoch", "UInt32"},
	{"to_epoch", "UInt32"},
	{"gap_from", "Int64"},
	{"gap_to", "Int64"},
	// Added after the first release: Open adds them to an older table.
	{"unprotected", "UInt8"},
	{"arbiter", "String"},
	{"spool_seq", "UInt64"},
}

// firstAdded is the index in columns of the first column added after the
// table's first release: Open adds it and every one after to a table that
// lacks them (see migrate).
const firstAdded = 23

var columnDDL, columnList = func() (string, string) {
	var ddl, list []string
	for _, c := range columns {
		ddl = append(ddl, c.name+" "+c.typ)
		list = append(list, c.name)
	}
	return strings.Join(ddl, ", "), strings.Join(list, ", ")
}()

// values returns e's column values in the order of columns.
func values(e *audit.Event) []any {
	return []any{
		e.ClusterID, e.Epoch, e.Revision, e.Key, string(e.Kind), e.Class, nanos(e.ObservedAt),
		e.Holder, e.Session, e.Token, nanos(e.AcquiredAt),
		e.EndedHolder, e.EndedSession, e.EndedToken, nanos(e.EndedAcquiredAt), int64(e.Duration),
		e.Requester, e.Approver, e.Reason,
		e.FromEpoch, e.ToEpoch,
		e.GapFrom, e.GapTo,
		b2u(e.Unprotected), e.Arbiter, e.SpoolSeq,
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// nanos is t in unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNanos is the inverse of nanos, in UTC.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Write stores rows with one INSERT batch. A failed batch is not resent
// (clickhouse-go cannot): Write builds a new one from rows, up to the
// configured attempts, pausing between them. Rows already stored by an
// earlier attempt or call are harmless: the table keeps one row per
// identity and Query reads with FINAL. It returns nil only after the
// server acknowledged the whole insert; otherwise an error wrapping
// audit.ErrSink, after which the caller retries with the same rows.
func (s *Sink) Write(ctx context.Context, rows []audit.Event) error {
	if len(rows) == 0 {
		return nil
	}
	var err error
	pause := s.backoff
	for attempt := 1; attempt <= s.attempts; attempt++ {
		if attempt > 1 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: clickhouse: write %d rows to %s: %w (gave up waiting to retry: %v)", audit.ErrSink, len(rows), s.table, err, ctx.Err())
			case <-time.After(pause):
			}
			pause *= 2
		}
		if err = s.send(ctx, rows); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("%w: clickhouse: write %d rows to %s: %w (retry the same rows once the server is reachable; a replay is harmless)",
		audit.ErrSink, len(rows), s.table, err)
}

// send inserts rows in one new batch. The batch pins a connection until it
// is sent or aborted, so every path ends it.
func (s *Sink) send(ctx context.Context, rows []audit.Event) (err error) {
	batch, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table+" ("+columnList+")")
	if err != nil {
		return fmt.Errorf("prepare batch: %w", err)
	}
	defer func() {
		if !batch.IsSent() {
			_ = batch.Abort()
		}
	}()
	for i := range rows {
		if err := batch.Append(values(&rows[i])...); err != nil {
			return fmt.Errorf("append row %d (revision %d, key %q): %w", i, rows[i].Revision, rows[i].Key, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("send batch: %w", err)
	}
	return nil
}

// Stats implements audit.Sink: per class counts over the window, read with
// FINAL so a replayed row counts once.
func (s *Sink) Stats(ctx context.Context, since, until time.Time) ([]audit.ClassStats, error) {
	q := "SELECT class, countIf(kind IN ('grant', 'handoff')), countIf(kind = 'expiry'), countIf(kind = 'force-release'), max(duration) FROM " +
		s.table + " FINAL WHERE class != ''"
	var args []any
	if !since.IsZero() {
		q += " AND observed_at >= ?"
		args = append(args, since.UnixNano())
	}
	if !until.IsZero() {
		q += " AND observed_at < ?"
		args = append(args, until.UnixNano())
	}
	q += " GROUP BY class ORDER BY class"
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%w: clickhouse: stats %s: %v (retry once the server is reachable)", audit.ErrSink, s.table, err)
	}
	defer rows.Close()
	var out []audit.ClassStats
	for rows.Next() {
		var c audit.ClassStats
		var grants, expiries, forced uint64
		var longest int64
		if err := rows.Scan(&c.Class, &grants, &expiries, &forced, &longest); err != nil {
			return nil, fmt.Errorf("%w: clickhouse: stats: %v", audit.ErrSink, err)
		}
		c.Grants, c.Expiries, c.Forced, c.Longest = int64(grants), int64(expiries), int64(forced), time.Duration(longest)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: clickhouse: stats: %v", audit.ErrSink, err)
	}
	return out, nil
}

// Query returns the rows matching f, each identity once (FINAL), ordered
// by cluster_id, epoch, revision and key. Every value of f is a bound
// parameter. A negative Limit is an error wrapping audit.ErrConfig; a
// failed query one wrapping audit.ErrSink.
func (s *Sink) Query(ctx context.Context, f audit.Filter) ([]audit.Event, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("%w: clickhouse: query limit %d is negative; use 0 for no limit", audit.ErrConfig, f.Limit)
	}
	where, args := conditions(f)
	q := "SELECT " + columnList + " FROM " + s.table + " FINAL"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY cluster_id, epoch, revision, key"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, uint64(f.Limit))
	}
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%w: clickhouse: query %s: %v (retry once the server is reachable)", audit.ErrSink, s.table, err)
	}
	defer rows.Close()
	var out []audit.Event
	for rows.Next() {
		var (
			e                                 audit.Event
			kind                              string
			observed, acquired, endedAcquired int64
			duration                          int64
			unprotected                       uint8
		)
		if err := rows.Scan(
			&e.ClusterID, &e.Epoch, &e.Revision, &e.Key, &kind, &e.Class, &observed,
			&e.Holder, &e.Session, &e.Token, &acquired,
			&e.EndedHolder, &e.EndedSession, &e.EndedToken, &endedAcquired, &duration,
			&e.Requester, &e.Approver, &e.Reason,
			&e.FromEpoch, &e.ToEpoch,
			&e.GapFrom, &e.GapTo,
			&unprotected, &e.Arbiter, &e.SpoolSeq,
		); err != nil {
			return nil, fmt.Errorf("%w: clickhouse: read a row of %s: %v", audit.ErrSink, s.table, err)
		}
		e.Kind, e.Unprotected = audit.Kind(kind), unprotected != 0
		e.ObservedAt, e.AcquiredAt, e.EndedAcquiredAt = fromNanos(observed), fromNanos(acquired), fromNanos(endedAcquired)
		e.Duration = time.Duration(duration)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: clickhouse: read rows of %s: %v (retry the query)", audit.ErrSink, s.table, err)
	}
	return out, nil
}

// conditions turns f into WHERE conditions with ? placeholders and their
// arguments, in order.
func conditions(f audit.Filter) (where []string, args []any) {
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	if f.ClusterID != 0 {
		add("cluster_id = ?", f.ClusterID)
	}
	if f.Key != "" {
		if strings.HasSuffix(f.Key, "/") {
			// A byte prefix: substring and length count bytes, as len does.
			add("substring(key, 1, ?) = ?", uint64(len(f.Key)), f.Key)
		} else {
			add("key = ?", f.Key)
		}
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
		marks := make([]string, len(f.Kinds))
		for i, k := range f.Kinds {
			marks[i] = "?"
			args = append(args, string(k))
		}
		where = append(where, "kind IN ("+strings.Join(marks, ", ")+")")
	}
	return where, args
}

// Close closes the sink's connections.
func (s *Sink) Close() error {
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("%w: clickhouse: close: %v", audit.ErrSink, err)
	}
	return nil
}
