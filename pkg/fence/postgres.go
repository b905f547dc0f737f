package fence

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The reference SQL. %s is the table name, quoted; $1 is the record id, $2
// the value and $3 the token. Tokens are uint64 and exceed bigint above
// 2^63, so the fence column is numeric(20,0), which holds every uint64
// exactly (lockd's tokens stay below 2^63 today, but a fence should not
// depend on that).
const (
	// PostgresSchemaSQL creates a fenced table: one fence per record.
	PostgresSchemaSQL = `CREATE TABLE IF NOT EXISTS %s (
	id    text PRIMARY KEY,
	value text NOT NULL,
	fence numeric(20,0) NOT NULL CHECK (fence > 0)
)`

	// PostgresWriteSQL is the fenced write: one statement that inserts a new
	// record or updates an existing one only if its fence is strictly less
	// than the token, and sets the fence in the same statement; token 0 (an
	// unprotected grant) writes nothing, not even a new record. Zero rows
	// affected means the fence rejected the write. For a record that always
	// exists, the same rule is
	// UPDATE t SET value = $2, fence = $3 WHERE id = $1 AND fence < $3
	// (token 0 is never greater than a fence).
	PostgresWriteSQL = `INSERT INTO %s AS t (id, value, fence) SELECT $1::text, $2::text, $3::numeric WHERE $3::numeric > 0
ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence
WHERE t.fence < EXCLUDED.fence`

	// PostgresReadSQL reads a record's value.
	PostgresReadSQL = `SELECT value FROM %s WHERE id = $1`

	// PostgresFenceSQL reads a record's fence as text (a uint64 does not fit
	// a Go int64).
	PostgresFenceSQL = `SELECT fence::text FROM %s WHERE id = $1`
)

// tableName is what NewPostgres accepts: a lower-case SQL identifier, so the
// name means the same table quoted or not.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Postgres is the reference fence for a PostgreSQL table made by
// [PostgresSchemaSQL]: each record carries its own fence, and every write is
// the single statement [PostgresWriteSQL]. It is safe for concurrent use.
type Postgres struct {
	pool  *pgxpool.Pool
	table string
	ident string // table, quoted
}

// NewPostgres returns the reference fence for table in the database pool
// connects to. table must be a lower-case SQL identifier (letters, digits and
// underscores, at most 63 bytes); it is not created until EnsureSchema.
func NewPostgres(pool *pgxpool.Pool, table string) (*Postgres, error) {
	if pool == nil {
		return nil, errors.New("fence: postgres: nil pool")
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("fence: postgres: table name %q is not a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 bytes)", table)
	}
	return &Postgres{pool: pool, table: table, ident: pgx.Identifier{table}.Sanitize()}, nil
}

// EnsureSchema creates the table (id text primary key, value text not null,
// fence numeric(20,0) not null, above 0) if it does not exist. It does not
// check the columns of a table that already exists.
func (p *Postgres) EnsureSchema(ctx context.Context) error {
	if _, err := p.pool.Exec(ctx, p.sql(PostgresSchemaSQL)); err != nil {
		return fmt.Errorf("fence: postgres: create table %s: %w", p.table, err)
	}
	return nil
}

// Write is the reference fenced write: it stores value for key with token
// as the record's fence if and only if the record is new or its fence is
// strictly less than token, in one statement. It returns an error wrapping
// [ErrStale] when the fence rejected the write, and [ErrUnprotected] for
// token 0 without asking the database; any other error says nothing about
// whether the write happened (a timeout may hide a commit).
func (p *Postgres) Write(ctx context.Context, key string, token uint64, value string) error {
	if token == 0 {
		return fmt.Errorf("fence: postgres: %s record %q: %w", p.table, key, ErrUnprotected)
	}
	tag, err := p.pool.Exec(ctx, p.sql(PostgresWriteSQL), key, value, Numeric(token))
	if err != nil {
		return fmt.Errorf("fence: postgres: write %s record %q: %w", p.table, key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("fence: postgres: %s record %q: %w", p.table, key, ErrStale)
	}
	return nil
}

// Prepare does nothing but return a Write that calls [Postgres.Write] with
// key and token: the reference checks the fence only in the write itself.
func (p *Postgres) Prepare(_ context.Context, key string, token uint64) (Write, error) {
	return func(ctx context.Context, value string) error {
		return p.Write(ctx, key, token, value)
	}, nil
}

// Read returns the value of the record key, or "" when there is none.
func (p *Postgres) Read(ctx context.Context, key string) (string, error) {
	var v string
	err := p.pool.QueryRow(ctx, p.sql(PostgresReadSQL), key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("fence: postgres: read %s record %q: %w", p.table, key, err)
	}
	return v, nil
}

// Fence returns the fence of the record key: the highest token it accepted,
// or 0 when there is no record.
func (p *Postgres) Fence(ctx context.Context, key string) (uint64, error) {
	var s string
	err := p.pool.QueryRow(ctx, p.sql(PostgresFenceSQL), key).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: postgres: read fence of %s record %q: %w", p.table, key, err)
	}
	f, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence: postgres: fence of %s record %q is not a uint64: %w", p.table, key, err)
	}
	return f, nil
}

// Describe returns "postgres table NAME on HOST:PORT/DATABASE", without the
// user or password.
func (p *Postgres) Describe() string {
	c := p.pool.Config().ConnConfig
	return fmt.Sprintf("postgres table %s on %s:%d/%s", p.table, c.Host, c.Port, c.Database)
}

// sql fills the quoted table name into one of the SQL constants.
func (p *Postgres) sql(format string) string {
	return fmt.Sprintf(format, p.ident)
}

// Numeric returns token as a PostgreSQL numeric query argument, exact for
// every uint64 (pgx would refuse a uint64 above 2^63-1 for a bigint).
func Numeric(token uint64) pgtype.Numeric {
	return pgtype.Numeric{Int: new(big.Int).SetUint64(token), Valid: true}
}
