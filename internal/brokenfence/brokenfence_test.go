package brokenfence

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockd-dev/lockd/internal/testserver"
	"github.com/lockd-dev/lockd/pkg/fence"
	"github.com/stretchr/testify/require"
)

// The resources are driven as the pause-test kit drives them: Prepare when
// the holder decides to write, the returned Write when it gets to it.

// pausedHolder runs the pause test's sequence on key: holder A (token a)
// decides to write and is paused; holder B (token b, granted after A lost
// its lease) writes "B"; A resumes and its write of "A" lands. It returns
// what the resource holds afterwards and the outcome of A's write.
func pausedHolder(t *testing.T, r fence.Resource, key string, a, b uint64) (string, error) {
	t.Helper()
	ctx := t.Context()
	writeA, err := r.Prepare(ctx, key, a)
	require.NoError(t, err, "A prepares")
	require.NoError(t, write(ctx, r, key, b, "B"), "B writes")
	errA := writeA(ctx, "A")
	v, err := r.Read(ctx, key)
	require.NoError(t, err)
	return v, errA
}

// write prepares and writes at once.
func write(ctx context.Context, r fence.Resource, key string, token uint64, value string) error {
	w, err := r.Prepare(ctx, key, token)
	if err != nil {
		return err
	}
	return w(ctx, value)
}

func TestPostgresMistakes(t *testing.T) {
	dsn := testserver.StartPostgres(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ref, err := fence.NewPostgres(pool, "reference")
	require.NoError(t, err)
	require.NoError(t, ref.EnsureSchema(t.Context()))

	t.Run("CheckThenWrite overwrites a newer holder's write", func(t *testing.T) {
		ctx := t.Context()
		broken, err := NewCheckThenWrite(pool, "check_then_write")
		require.NoError(t, err)
		require.NoError(t, broken.EnsureSchema(ctx))

		// Both start with the record at fence 5.
		require.NoError(t, write(ctx, broken, "k", 5, "initial"))
		require.NoError(t, write(ctx, ref, "ctw", 5, "initial"))

		// A (10) checks 5 < 10 and pauses; B (20) writes; A's write lands.
		v, errA := pausedHolder(t, broken, "k", 10, 20)
		require.NoError(t, errA, "broken: the stale write is accepted")
		require.Equal(t, "A", v, "broken: B's write is lost")
		f, err := broken.Fence(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, uint64(10), f, "broken: the fence went back down")

		v, errA = pausedHolder(t, ref, "ctw", 10, 20)
		require.ErrorIs(t, errA, fence.ErrStale, "reference: the stale write is rejected")
		require.Equal(t, "B", v)
	})

	t.Run("LessOrEqual lets one token write twice", func(t *testing.T) {
		ctx := t.Context()
		broken, err := NewLessOrEqual(pool, "less_or_equal")
		require.NoError(t, err)
		require.NoError(t, broken.EnsureSchema(ctx))

		// Two workers share token 10 (a job retried after a timeout that
		// had in fact committed, a holder and its forked child): the first
		// writes "first", the second "second".
		for _, r := range []fence.Resource{broken, ref} {
			require.NoError(t, write(ctx, r, "le", 10, "first"), r.Describe())
		}
		require.NoError(t, write(ctx, broken, "le", 10, "second"), "broken: the duplicate is accepted")
		v, err := broken.Read(ctx, "le")
		require.NoError(t, err)
		require.Equal(t, "second", v)

		require.ErrorIs(t, write(ctx, ref, "le", 10, "second"), fence.ErrStale, "reference: a token writes a record once")
		v, err = ref.Read(ctx, "le")
		require.NoError(t, err)
		require.Equal(t, "first", v)

		// A lower token is still refused: the mistake is only at equality,
		// which is why a pause test with two tokens passes on it.
		require.ErrorIs(t, write(ctx, broken, "le", 9, "lower"), fence.ErrStale)
	})

	t.Run("PerTable refuses the current holder of one key after another key's write", func(t *testing.T) {
		ctx := t.Context()
		broken, err := NewPerTable(pool, "per_table")
		require.NoError(t, err)
		require.NoError(t, broken.EnsureSchema(ctx))

		// A is granted key a (token 10), then B is granted key b (token
		// 20). Both are current holders. B writes first, then A.
		for _, r := range []fence.Resource{broken, ref} {
			require.NoError(t, write(ctx, r, "pt/b", 20, "B"), r.Describe())
		}
		require.ErrorIs(t, write(ctx, broken, "pt/a", 10, "A"), fence.ErrStale, "broken: a current holder is refused")
		require.NoError(t, write(ctx, ref, "pt/a", 10, "A"), "reference: records are fenced independently")

		// The one-key pause test passes on it: the atomic table fence
		// still refuses a stale holder of the same key.
		v, errA := pausedHolder(t, broken, "pt/c", 30, 40)
		require.ErrorIs(t, errA, fence.ErrStale)
		require.Equal(t, "B", v)
	})

	t.Run("the mistakes describe themselves", func(t *testing.T) {
		for _, mk := range []func() (fence.Resource, error){
			func() (fence.Resource, error) { return NewCheckThenWrite(pool, "d") },
			func() (fence.Resource, error) { return NewLessOrEqual(pool, "d") },
			func() (fence.Resource, error) { return NewPerTable(pool, "d") },
		} {
			r, err := mk()
			require.NoError(t, err)
			require.Contains(t, r.Describe(), "broken on purpose")
		}
		_, err := NewCheckThenWrite(pool, "Bad-Name")
		require.Error(t, err)
	})
}

func TestS3Blind(t *testing.T) {
	m := testserver.StartMinIO(t)
	ctx := t.Context()
	broken := NewS3Blind(m.Client, m.Bucket)
	ref := fence.NewS3(m.Client, m.Bucket)
	require.Contains(t, broken.Describe(), "broken on purpose")

	require.NoError(t, write(ctx, broken, "blind", 5, "initial"))
	require.NoError(t, write(ctx, ref, "ref", 5, "initial"))

	// A (10) reads fence 5 and pauses; B (20) writes; A's PUT lands.
	v, errA := pausedHolder(t, broken, "blind", 10, 20)
	require.NoError(t, errA, "broken: the stale PUT is accepted")
	require.Equal(t, "A", v, "broken: B's object is overwritten")

	v, errA = pausedHolder(t, ref, "ref", 10, 20)
	require.ErrorIs(t, errA, fence.ErrStale, "reference: If-Match fails, the re-read refuses")
	require.Equal(t, "B", v)

	// Its check alone still refuses a token that is already stale.
	_, err := broken.Prepare(ctx, "blind", 10)
	require.ErrorIs(t, err, fence.ErrStale)
}
