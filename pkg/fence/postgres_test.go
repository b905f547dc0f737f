package fence

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockd-dev/lockd/internal/testserver"
	"github.com/stretchr/testify/require"
)

// op is one write of a case table against a fresh key: accepted says
// whether the fence must accept it; after each step the key must hold the
// value and fence of the last accepted write.
type op struct {
	token    uint64
	value    string
	accepted bool
}

// writeCases run against every reference.
var writeCases = []struct {
	name string
	ops  []op
}{
	{"first write accepted", []op{{10, "a", true}}},
	{"higher token accepted", []op{{10, "a", true}, {11, "b", true}, {1 << 40, "c", true}}},
	{"lower token stale", []op{{10, "a", true}, {9, "b", false}, {1, "c", false}}},
	{"same token twice stale", []op{{10, "a", true}, {10, "b", false}, {10, "a", false}}},
	{"stale after newer holder", []op{{10, "a", true}, {20, "b", true}, {15, "c", false}, {21, "d", true}}},
	// Token 0 is an unprotected grant (made without quorum): no fence
	// accepts it, not even for a record that does not exist yet.
	{"token 0 rejected on a new record", []op{{0, "a", false}, {1, "b", true}}},
	{"token 0 rejected on an existing record", []op{{1, "a", true}, {0, "b", false}}},
	{"tokens above 2^63", []op{
		{1<<63 + 5, "a", true},
		{1<<63 + 4, "b", false},
		{1<<63 - 1, "c", false},
		{1<<63 + 5, "d", false},
		{math.MaxUint64 - 1, "e", true},
		{math.MaxUint64, "f", true},
		{math.MaxUint64, "g", false},
	}},
}

// fenced is what the table runner needs of a reference.
type fenced interface {
	Resource
	Write(ctx context.Context, key string, token uint64, value string) error
	Fence(ctx context.Context, key string) (uint64, error)
}

func TestPostgres(t *testing.T) {
	dsn := testserver.StartPostgres(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	p, err := NewPostgres(pool, "fence_ref")
	require.NoError(t, err)
	require.NoError(t, p.EnsureSchema(t.Context()))
	require.NoError(t, p.EnsureSchema(t.Context()), "EnsureSchema is idempotent")

	for i, tc := range writeCases {
		t.Run(tc.name, func(t *testing.T) {
			runWriteCase(t, p, fmt.Sprintf("k%d", i), tc.ops)
		})
	}

	t.Run("fence column keeps uint64 exactly", func(t *testing.T) {
		ctx := t.Context()
		require.NoError(t, p.Write(ctx, "u64", 1<<63+12345, "v"))
		var text string
		require.NoError(t, pool.QueryRow(ctx, `SELECT fence::text FROM fence_ref WHERE id = 'u64'`).Scan(&text))
		require.Equal(t, "9223372036854788153", text)
		f, err := p.Fence(ctx, "u64")
		require.NoError(t, err)
		require.Equal(t, uint64(1<<63+12345), f)
	})

	t.Run("the SQL itself writes nothing with token 0", func(t *testing.T) {
		// For code that copies the statements rather than calling Write.
		ctx := t.Context()
		tag, err := pool.Exec(ctx, p.sql(PostgresWriteSQL), "sql0", "v", Numeric(0))
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected(), "token 0 inserted a new record")
		_, err = pool.Exec(ctx, `INSERT INTO fence_ref (id, value, fence) VALUES ('sql0', 'v', 0)`)
		require.ErrorContains(t, err, "check constraint", "the schema lets a record carry fence 0")
		tag, err = pool.Exec(ctx, p.sql(PostgresWriteSQL), "sql0", "v", Numeric(3))
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	})

	t.Run("absent record reads empty", func(t *testing.T) {
		v, err := p.Read(t.Context(), "never-written")
		require.NoError(t, err)
		require.Equal(t, "", v)
		f, err := p.Fence(t.Context(), "never-written")
		require.NoError(t, err)
		require.Zero(t, f)
	})

	t.Run("records are fenced independently", func(t *testing.T) {
		ctx := t.Context()
		require.NoError(t, p.Write(ctx, "ind/a", 100, "a"))
		require.NoError(t, p.Write(ctx, "ind/b", 50, "b"), "a lower token on another record is not stale")
	})

	t.Run("concurrent writers: only increasing tokens land and the greatest wins", func(t *testing.T) {
		ctx := t.Context()
		const n = 32
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { errs[i] = p.Write(ctx, "race", uint64(i+1), fmt.Sprint(i+1)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, ErrStale, "writer %d", i+1)
			}
		}
		require.NoError(t, errs[n-1], "the greatest token is never stale")
		v, err := p.Read(ctx, "race")
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(n), v)
	})

	t.Run("Prepare does not check", func(t *testing.T) {
		ctx := t.Context()
		require.NoError(t, p.Write(ctx, "prep", 10, "a"))
		w, err := p.Prepare(ctx, "prep", 5)
		require.NoError(t, err, "the reference checks only when writing")
		require.ErrorIs(t, w(ctx, "b"), ErrStale)
	})

	t.Run("Describe names the table, not the user", func(t *testing.T) {
		d := p.Describe()
		require.Contains(t, d, "postgres table fence_ref on 127.0.0.1:")
		require.NotContains(t, d, "postgres@")
	})

	t.Run("Open", func(t *testing.T) {
		ctx := t.Context()
		u := strings.Replace(dsn, "postgres@", "postgres:sekrit@", 1) + "&table=fence_open"
		r, closeFn, err := Open(ctx, u)
		require.NoError(t, err)
		defer closeFn()
		require.Equal(t, strings.Replace(p.Describe(), "fence_ref", "fence_open", 1), r.Describe())
		w, err := r.Prepare(ctx, "k", 7)
		require.NoError(t, err)
		require.NoError(t, w(ctx, "seven"))
		w, err = r.Prepare(ctx, "k", 7)
		require.NoError(t, err)
		require.ErrorIs(t, w(ctx, "again"), ErrStale)
		v, err := r.Read(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, "seven", v)
	})

	t.Run("Open errors do not leak the password", func(t *testing.T) {
		port := strings.Split(strings.Split(dsn, "127.0.0.1:")[1], "/")[0]
		for _, u := range []string{
			"postgres://postgres:sekrit@127.0.0.1:" + port + "/postgres?sslmode=disable",                // no table
			"postgres://postgres:sekrit@127.0.0.1:" + port + "/postgres?sslmode=disable&table=Bad-Name", // bad table
			"postgres://postgres:sekrit@127.0.0.1:" + port + "/nosuchdb?sslmode=disable&table=t",        // no database
			"postgres://postgres:sekrit@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2&table=t", // nothing listening
			"postgres://postgres:sekrit@127.0.0.1:" + port + "/postgres?sslmode=bogus&table=t",          // pgx parse error
			"postgres://postgres:sek%zzrit@127.0.0.1/postgres?table=t",                                  // not a URL
		} {
			_, _, err := Open(t.Context(), u)
			require.Error(t, err, u)
			require.NotContains(t, err.Error(), "sekrit", u)
			require.NotContains(t, err.Error(), "sek%zzrit", u)
			require.True(t, strings.HasPrefix(err.Error(), "fence: "), err.Error())
		}
	})
}

func TestNewPostgresTableName(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/x") // lazy: never connects
	require.NoError(t, err)
	defer pool.Close()
	for _, name := range []string{"fence_demo", "_t", "t1", strings.Repeat("a", 63)} {
		_, err := NewPostgres(pool, name)
		require.NoError(t, err, name)
	}
	for _, name := range []string{"", "1t", "Fence", "a-b", "a.b", `a"b`, "a; DROP TABLE x", strings.Repeat("a", 64)} {
		_, err := NewPostgres(pool, name)
		require.Error(t, err, name)
	}
	_, err = NewPostgres(nil, "t")
	require.Error(t, err)
}

// runWriteCase applies ops to key through the reference f and checks each
// outcome and the value and fence after it.
func runWriteCase(t *testing.T, f fenced, key string, ops []op) {
	t.Helper()
	ctx := t.Context()
	var wantValue string
	var wantFence uint64
	for i, o := range ops {
		err := f.Write(ctx, key, o.token, o.value)
		if o.accepted {
			require.NoError(t, err, "op %d", i)
			wantValue, wantFence = o.value, o.token
		} else {
			require.ErrorIs(t, err, ErrStale, "op %d", i)
			if o.token == 0 {
				require.ErrorIs(t, err, ErrUnprotected, "op %d", i)
			}
			if o.token > 1000 {
				require.NotContains(t, err.Error(), fmt.Sprint(o.token), "op %d: a token is a capability: not in errors", i)
			}
		}
		v, err := f.Read(ctx, key)
		require.NoError(t, err)
		require.Equal(t, wantValue, v, "op %d", i)
		fence, err := f.Fence(ctx, key)
		require.NoError(t, err)
		require.Equal(t, wantFence, fence, "op %d", i)
	}
}
