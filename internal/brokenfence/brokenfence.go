// Package brokenfence holds fences that are wrong on purpose. It is for
// tests only: each type implements a classic mistake an owner makes when
// writing a fence, so that the pause-test kit can show it catches them and
// the reference in package fence can be shown not to make them. Never use
// these types to guard a resource.
//
//   - [CheckThenWrite]: the fence checked in one statement, the write done
//     in another.
//   - [LessOrEqual]: the one-statement write, with <= instead of <.
//   - [PerTable]: one fence for the whole table instead of one per record.
//   - [S3Blind]: the S3 fence checked, then a PUT without If-Match.
//
// The PostgreSQL types use the table layout of fence.PostgresSchemaSQL.
package brokenfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockd-dev/lockd/pkg/fence"
	"github.com/minio/minio-go/v7"
)

// upsertSQL writes a record and its fence with no condition at all.
const upsertSQL = `INSERT INTO %s AS t (id, value, fence) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence`

// table is what the PostgreSQL mistakes share: the reference (for its
// schema and Read) and the quoted table name.
type table struct {
	ref   *fence.Postgres
	pool  *pgxpool.Pool
	name  string
	ident string
}

func newTable(pool *pgxpool.Pool, name string) (table, error) {
	ref, err := fence.NewPostgres(pool, name) // validates name
	if err != nil {
		return table{}, err
	}
	return table{ref: ref, pool: pool, name: name, ident: pgx.Identifier{name}.Sanitize()}, nil
}

func (t table) sql(format string) string { return fmt.Sprintf(format, t.ident) }

// EnsureSchema creates the table as fence.Postgres does.
func (t table) EnsureSchema(ctx context.Context) error { return t.ref.EnsureSchema(ctx) }

// Read returns the value of the record key, or "" when there is none.
func (t table) Read(ctx context.Context, key string) (string, error) { return t.ref.Read(ctx, key) }

// Fence returns the fence column of the record key (0 when absent).
func (t table) Fence(ctx context.Context, key string) (uint64, error) {
	return t.ref.Fence(ctx, key)
}

// CheckThenWrite is broken on purpose, for tests only: Prepare checks the
// record's fence with a SELECT and refuses unless fence < token; the Write
// it returns then runs an unconditional upsert. Anything written between
// the check and the write (a newer holder, while this one was paused) is
// overwritten, and the fence goes back down to this token.
type CheckThenWrite struct{ table }

// NewCheckThenWrite returns the check-then-write mistake on table.
func NewCheckThenWrite(pool *pgxpool.Pool, name string) (*CheckThenWrite, error) {
	t, err := newTable(pool, name)
	return &CheckThenWrite{t}, err
}

// Prepare checks fence < token (or no record) and returns an unconditional
// write.
func (c *CheckThenWrite) Prepare(ctx context.Context, key string, token uint64) (fence.Write, error) {
	var ok bool
	err := c.pool.QueryRow(ctx, c.sql(`SELECT fence < $2 FROM %s WHERE id = $1`), key, fence.Numeric(token)).Scan(&ok)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("brokenfence: check %s record %q: %w", c.name, key, err)
	case !ok:
		return nil, fmt.Errorf("brokenfence: %s record %q: %w", c.name, key, fence.ErrStale)
	}
	return func(ctx context.Context, value string) error {
		if _, err := c.pool.Exec(ctx, c.sql(upsertSQL), key, value, fence.Numeric(token)); err != nil {
			return fmt.Errorf("brokenfence: write %s record %q: %w", c.name, key, err)
		}
		return nil
	}, nil
}

// Describe names the table and the mistake.
func (c *CheckThenWrite) Describe() string {
	return "postgres table " + c.name + " (broken on purpose: check then write)"
}

// LessOrEqual is broken on purpose, for tests only: the reference's one
// statement with fence <= token instead of fence < token, so a token can
// write a record more than once: two processes that share a token (a
// retried or duplicated job, a holder and its forked child) both land.
type LessOrEqual struct{ table }

// NewLessOrEqual returns the less-or-equal mistake on table.
func NewLessOrEqual(pool *pgxpool.Pool, name string) (*LessOrEqual, error) {
	t, err := newTable(pool, name)
	return &LessOrEqual{t}, err
}

// Prepare returns the one-statement write with <=.
func (l *LessOrEqual) Prepare(_ context.Context, key string, token uint64) (fence.Write, error) {
	return func(ctx context.Context, value string) error {
		tag, err := l.pool.Exec(ctx, l.sql(upsertSQL+` WHERE t.fence <= EXCLUDED.fence`), key, value, fence.Numeric(token))
		if err != nil {
			return fmt.Errorf("brokenfence: write %s record %q: %w", l.name, key, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("brokenfence: %s record %q: %w", l.name, key, fence.ErrStale)
		}
		return nil
	}, nil
}

// Describe names the table and the mistake.
func (l *LessOrEqual) Describe() string {
	return "postgres table " + l.name + " (broken on purpose: fence <= token)"
}

// PerTable is broken on purpose, for tests only: one fence for the whole
// table, in the row (tbl = table name) of a table fences(tbl, fence),
// checked (fence < token) and raised in the same transaction as the
// unconditional write of the record. Because the check is atomic and the
// table's fence is at least the newest token written to any record, a stale
// token is still refused, and a pause test on one key passes. What breaks is
// that the holders of different keys share one fence: the current holder of
// one key is refused because the holder of another key, granted later (so
// with a greater token), wrote first. A kit catches it only with two keys.
type PerTable struct{ table }

// NewPerTable returns the per-table mistake on table.
func NewPerTable(pool *pgxpool.Pool, name string) (*PerTable, error) {
	t, err := newTable(pool, name)
	return &PerTable{t}, err
}

// EnsureSchema creates the table, the table fences and its row for table.
func (p *PerTable) EnsureSchema(ctx context.Context) error {
	if err := p.table.EnsureSchema(ctx); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS fences (tbl text PRIMARY KEY, fence numeric(20,0) NOT NULL)`); err != nil {
		return fmt.Errorf("brokenfence: create table fences: %w", err)
	}
	if _, err := p.pool.Exec(ctx, `INSERT INTO fences (tbl, fence) VALUES ($1, 0) ON CONFLICT (tbl) DO NOTHING`, p.name); err != nil {
		return fmt.Errorf("brokenfence: fences row for %s: %w", p.name, err)
	}
	return nil
}

// Prepare returns a write that, in one transaction, raises the table's
// fence to token if it is lower (else refuses) and writes the record.
func (p *PerTable) Prepare(_ context.Context, key string, token uint64) (fence.Write, error) {
	return func(ctx context.Context, value string) error {
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `UPDATE fences SET fence = $2 WHERE tbl = $1 AND fence < $2`, p.name, fence.Numeric(token))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fence.ErrStale
			}
			_, err = tx.Exec(ctx, p.sql(upsertSQL), key, value, fence.Numeric(token))
			return err
		})
		if err != nil {
			return fmt.Errorf("brokenfence: write %s record %q: %w", p.name, key, err)
		}
		return nil
	}, nil
}

// Describe names the table and the mistake.
func (p *PerTable) Describe() string {
	return "postgres table " + p.name + " (broken on purpose: one fence per table)"
}

// S3Blind is broken on purpose, for tests only: Prepare reads the object's
// fence metadata (fence.S3FenceMetadata) and refuses unless fence < token,
// as the reference does, but the Write it returns PUTs without If-Match or
// If-None-Match. An object written between the check and the PUT (by a
// newer holder, while this one was paused) is overwritten. The body is the
// bare value.
type S3Blind struct {
	client *minio.Client
	bucket string
}

// NewS3Blind returns the blind-PUT mistake on bucket, which must exist.
func NewS3Blind(client *minio.Client, bucket string) *S3Blind {
	return &S3Blind{client: client, bucket: bucket}
}

// Prepare checks the object's fence and returns an unconditional PUT.
func (s *S3Blind) Prepare(ctx context.Context, key string, token uint64) (fence.Write, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return nil, fmt.Errorf("brokenfence: stat %s/%s: %w", s.bucket, key, err)
	}
	if err == nil {
		if v := info.UserMetadata[fence.S3FenceMetadata]; v != "" {
			stored, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("brokenfence: %s/%s fence metadata: %w", s.bucket, key, err)
			}
			if token <= stored {
				return nil, fmt.Errorf("brokenfence: %s/%s: %w", s.bucket, key, fence.ErrStale)
			}
		}
	}
	return func(ctx context.Context, value string) error {
		_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader([]byte(value)), int64(len(value)),
			minio.PutObjectOptions{UserMetadata: map[string]string{fence.S3FenceMetadata: strconv.FormatUint(token, 10)}})
		if err != nil {
			return fmt.Errorf("brokenfence: put %s/%s: %w", s.bucket, key, err)
		}
		return nil
	}, nil
}

// Read returns the object's body, or "" when there is none.
func (s *S3Blind) Read(ctx context.Context, key string) (string, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return "", fmt.Errorf("brokenfence: get %s/%s: %w", s.bucket, key, err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("brokenfence: get %s/%s: %w", s.bucket, key, err)
	}
	return string(b), nil
}

// Describe names the bucket and the mistake.
func (s *S3Blind) Describe() string {
	return "s3 bucket " + s.bucket + " (broken on purpose: PUT without If-Match)"
}
