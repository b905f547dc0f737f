package fencedstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The PostgreSQL store is the table gate_store and the SQL function
// gate_write, both made by SetupPostgres. The fencing mode lives in
// gate_write's body: fenced, its UPDATE has "AND fence < t"; unfenced, it
// has no comparison. A worker calls "SELECT gate_write($1, $2, $3)" either
// way, one statement in its own transaction, and cannot pick the wrong mode.
// The function's comment ("fenced" or "unfenced") records the mode for
// people looking at the database.
//
// gate_write returns true if the row was updated, false if the fence
// rejected the write, and NULL if the key has no row.
const (
	sqlDropFunction = `DROP FUNCTION IF EXISTS gate_write(text, bigint, bigint)`
	sqlDropTable    = `DROP TABLE IF EXISTS gate_store`
	sqlCreateTable  = `CREATE TABLE gate_store (
	id    text   PRIMARY KEY,
	value bigint NOT NULL,
	fence bigint NOT NULL
)`
	sqlInsertKeys = `INSERT INTO gate_store (id, value, fence) SELECT k, 0, 0 FROM unnest($1::text[]) AS k`
	// sqlCreateWrite is completed with the UPDATE's extra condition.
	sqlCreateWrite = `CREATE FUNCTION gate_write(k text, t bigint, v bigint) RETURNS boolean
LANGUAGE sql VOLATILE STRICT AS $body$
	WITH u AS (
		UPDATE gate_store SET value = v, fence = t WHERE id = k%s RETURNING 1
	)
	SELECT CASE
		WHEN EXISTS (SELECT 1 FROM u) THEN true
		WHEN EXISTS (SELECT 1 FROM gate_store WHERE id = k) THEN false
	END
$body$`
	fencedCondition = ` AND fence < t`
	sqlComment      = `COMMENT ON FUNCTION gate_write(text, bigint, bigint) IS '%s'`
	sqlCheckSetUp   = `SELECT to_regprocedure('gate_write(text, bigint, bigint)') IS NOT NULL AND to_regclass('gate_store') IS NOT NULL`
	sqlWrite        = `SELECT gate_write($1, $2, $3)`
	sqlRead         = `SELECT fence, value FROM gate_store WHERE id = $1`
)

const (
	// postgresPoolSize is the most connections one OpenPostgres store
	// holds; each worker process opens its own.
	postgresPoolSize = 4
	// postgresConnectTimeout applies when the URL sets no connect_timeout.
	postgresConnectTimeout = 10 * time.Second
)

// SetupPostgres (re)creates the store in the database at url: it drops
// and recreates the table gate_store(id, value, fence) with one row per
// key at fence 0 and value 0, and the function gate_write whose body is the
// fenced UPDATE (fenced true) or the unfenced one (fenced false), all in one
// transaction. Run it before any worker opens the store.
func SetupPostgres(ctx context.Context, url string, keys []string, fenced bool) error {
	cfg, err := parsePostgresURL(url)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("fencedstore: setup: connect: %w", err)
	}
	defer closeConn(conn)

	cond, mode := "", "unfenced"
	if fenced {
		cond, mode = fencedCondition, "fenced"
	}
	ids := uniqueKeys(keys)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			sqlDropFunction,
			sqlDropTable,
			sqlCreateTable,
			fmt.Sprintf(sqlCreateWrite, cond),
			fmt.Sprintf(sqlComment, mode),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, sqlInsertKeys, ids)
		return err
	})
	if err != nil {
		return fmt.Errorf("fencedstore: setup: %w", err)
	}
	return nil
}

// uniqueKeys returns keys sorted without duplicates.
func uniqueKeys(keys []string) []string {
	ids := append([]string(nil), keys...)
	sort.Strings(ids)
	out := ids[:0]
	for i, k := range ids {
		if i == 0 || k != ids[i-1] {
			out = append(out, k)
		}
	}
	return out
}

// OpenPostgres opens the store that SetupPostgres made in the database
// at url, with a small pool of connections. It fails with ErrNotSetUp if
// the database has no store.
func OpenPostgres(ctx context.Context, url string) (Store, error) {
	cfg, err := parsePostgresURL(url)
	if err != nil {
		return nil, err
	}
	r := &postgresStore{pool: newConnPool(cfg, postgresPoolSize)}
	conn, err := r.pool.acquire(ctx)
	if err != nil {
		r.pool.close()
		return nil, fmt.Errorf("fencedstore: open: %w", err)
	}
	var ok bool
	err = conn.QueryRow(ctx, sqlCheckSetUp).Scan(&ok)
	r.pool.release(conn, err != nil)
	if err != nil {
		r.pool.close()
		return nil, fmt.Errorf("fencedstore: open: %w", err)
	}
	if !ok {
		r.pool.close()
		return nil, fmt.Errorf("%w: no gate_store/gate_write (run SetupPostgres)", ErrNotSetUp)
	}
	return r, nil
}

func parsePostgresURL(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("fencedstore: postgres url: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = postgresConnectTimeout
	}
	return cfg, nil
}

// postgresStore is the Store over PostgreSQL.
type postgresStore struct {
	pool *connPool
}

func (r *postgresStore) Read(ctx context.Context, key string) (uint64, int64, error) {
	conn, err := r.pool.acquire(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("fencedstore: read %q: %w", key, err)
	}
	var fence, value int64
	err = conn.QueryRow(ctx, sqlRead, key).Scan(&fence, &value)
	r.pool.release(conn, err != nil && !errors.Is(err, pgx.ErrNoRows))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, 0, fmt.Errorf("%w: %q", ErrUnknownKey, key)
	case err != nil:
		return 0, 0, classifyPostgres("read", key, err)
	case fence < 0:
		return 0, 0, fmt.Errorf("fencedstore: read %q: negative fence %d", key, fence)
	}
	return uint64(fence), value, nil
}

func (r *postgresStore) Write(ctx context.Context, key string, tok uint64, value int64) (bool, error) {
	if tok > MaxToken {
		return false, fmt.Errorf("%w: write %q: token %d", ErrTokenRange, key, tok)
	}
	conn, err := r.pool.acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("fencedstore: write %q: %w", key, err)
	}
	var accepted *bool
	err = conn.QueryRow(ctx, sqlWrite, key, int64(tok), value).Scan(&accepted)
	r.pool.release(conn, err != nil)
	if err != nil {
		return false, classifyPostgres("write", key, err)
	}
	if accepted == nil {
		return false, fmt.Errorf("%w: %q", ErrUnknownKey, key)
	}
	return *accepted, nil
}

func (r *postgresStore) Close() error {
	r.pool.close()
	return nil
}

// classifyPostgres wraps an error from a statement. It is definite only if
// it certainly had no effect: pgx says nothing was sent (SafeToRetry), or
// the server answered the statement with an ERROR, which rolls back its
// implicit transaction. Anything else (a timeout, a lost connection, a
// FATAL, a failure reading the answer) may come after the server committed
// it: unknown.
func classifyPostgres(op, key string, err error) error {
	if pgconn.SafeToRetry(err) {
		return fmt.Errorf("fencedstore: %s %q: not sent: %w", op, key, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		sev := pgErr.SeverityUnlocalized
		if sev == "" {
			sev = pgErr.Severity
		}
		if strings.EqualFold(sev, "ERROR") {
			return fmt.Errorf("fencedstore: %s %q: %w", op, key, err)
		}
	}
	return fmt.Errorf("%w: %s %q: %w", ErrUnknownOutcome, op, key, err)
}

// connPool is a fixed-size pool of pgx connections. pgxpool would do, but
// it needs a module (puddle) that this module does not require.
type connPool struct {
	cfg   *pgx.ConnConfig
	slots chan struct{}

	mu     sync.Mutex
	idle   []*pgx.Conn
	closed bool
}

func newConnPool(cfg *pgx.ConnConfig, size int) *connPool {
	return &connPool{cfg: cfg, slots: make(chan struct{}, size)}
}

// acquire returns an idle connection or a new one, waiting for a free slot.
// Its errors are definite: no statement was sent.
func (p *connPool) acquire(ctx context.Context) (*pgx.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			<-p.slots
			return nil, ErrClosed
		}
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		conn := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if !conn.IsClosed() {
			return conn, nil
		}
	}
	conn, err := pgx.ConnectConfig(ctx, p.cfg.Copy())
	if err != nil {
		<-p.slots
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// release returns conn to the pool, or closes it if broken or the pool is
// closed.
func (p *connPool) release(conn *pgx.Conn, broken bool) {
	p.mu.Lock()
	keep := !broken && !p.closed && !conn.IsClosed()
	if keep {
		p.idle = append(p.idle, conn)
	}
	p.mu.Unlock()
	<-p.slots
	if !keep {
		closeConn(conn)
	}
}

// close closes the idle connections; those in use are closed on release.
func (p *connPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.mu.Unlock()
	for _, conn := range idle {
		closeConn(conn)
	}
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
