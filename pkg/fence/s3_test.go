package fence

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/internal/testserver"
	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
)

func TestS3(t *testing.T) {
	m := testserver.StartMinIO(t)
	s := NewS3(m.Client, m.Bucket)

	for i, tc := range writeCases {
		t.Run(tc.name, func(t *testing.T) {
			runWriteCase(t, s, fmt.Sprintf("cases/k%d", i), tc.ops)
		})
	}

	// put writes an object directly, as another client would.
	put := func(t *testing.T, key, body string, opts minio.PutObjectOptions) (minio.UploadInfo, error) {
		t.Helper()
		return m.Client.PutObject(t.Context(), m.Bucket, key, strings.NewReader(body), int64(len(body)), opts)
	}

	t.Run("MinIO answers 412 to a stale ETag and to If-None-Match on an existing object", func(t *testing.T) {
		_, err := put(t, "direct/412", "one", minio.PutObjectOptions{})
		require.NoError(t, err)
		first, err := m.Client.StatObject(t.Context(), m.Bucket, "direct/412", minio.StatObjectOptions{})
		require.NoError(t, err)
		_, err = put(t, "direct/412", "two", minio.PutObjectOptions{})
		require.NoError(t, err)

		var opts minio.PutObjectOptions
		opts.SetMatchETag(first.ETag)
		_, err = put(t, "direct/412", "three", opts)
		require.Error(t, err)
		require.Equal(t, http.StatusPreconditionFailed, minio.ToErrorResponse(err).StatusCode)
		require.True(t, lostRace(err))

		opts = minio.PutObjectOptions{}
		opts.SetMatchETagExcept("*")
		_, err = put(t, "direct/412", "four", opts)
		require.Equal(t, http.StatusPreconditionFailed, minio.ToErrorResponse(err).StatusCode)

		require.Equal(t, "two", readRaw(t, m, "direct/412"), "a failed conditional PUT changes nothing")
	})

	t.Run("an ETag hashes the body only, so the fence is in the body too", func(t *testing.T) {
		a, err := put(t, "direct/etag", "same", minio.PutObjectOptions{UserMetadata: map[string]string{S3FenceMetadata: "1"}})
		require.NoError(t, err)
		b, err := put(t, "direct/etag", "same", minio.PutObjectOptions{UserMetadata: map[string]string{S3FenceMetadata: "2"}})
		require.NoError(t, err)
		require.Equal(t, a.ETag, b.ETag, "same body, other metadata: If-Match cannot tell the writes apart")
		require.NotEqual(t, s3Body(1, "same"), s3Body(2, "same"))
	})

	t.Run("new object: If-None-Match", func(t *testing.T) {
		ctx := t.Context()
		require.NoError(t, s.Write(ctx, "new/plain", 5, "v"))
		f, err := s.Fence(ctx, "new/plain")
		require.NoError(t, err)
		require.Equal(t, uint64(5), f)
	})

	// interleave returns a reference whose every round runs slip (another
	// writer) between its read and its PUT, and a counter of rounds.
	interleave := func(slip func(round int)) (*S3, *int) {
		rounds := 0
		r := NewS3(m.Client, m.Bucket)
		r.beforePut = func(string) {
			rounds++
			slip(rounds)
		}
		return r, &rounds
	}
	other := NewS3(m.Client, m.Bucket) // the writer that slips in

	raceCases := []struct {
		name      string
		before    []op // written first, by other
		token     uint64
		slip      op // written by other between the first round's read and PUT
		wantErr   error
		wantPuts  int // a refusal is decided on the re-read, before a second PUT
		wantValue string
		wantFence uint64
	}{
		{"a greater token slips in: re-read, refuse", []op{{10, "old", true}}, 15, op{20, "newer", true},
			ErrStale, 1, "newer", 20},
		{"the same value with a greater token slips in: the ETag still changed", []op{{10, "v", true}}, 15, op{20, "v", true},
			ErrStale, 1, "v", 20},
		{"a smaller token slips in: re-read, write over it", []op{{10, "old", true}}, 30, op{20, "between", true},
			nil, 2, "mine", 30},
		{"a greater token creates the object: If-None-Match loses, refuse", nil, 5, op{7, "creator", true},
			ErrStale, 1, "creator", 7},
		{"a smaller token creates the object: re-read, write with If-Match", nil, 5, op{3, "creator", true},
			nil, 2, "mine", 5},
	}
	for i, tc := range raceCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			key := fmt.Sprintf("race/%d", i)
			for _, o := range tc.before {
				require.NoError(t, other.Write(ctx, key, o.token, o.value))
			}
			r, rounds := interleave(func(round int) {
				if round == 1 {
					require.NoError(t, other.Write(ctx, key, tc.slip.token, tc.slip.value))
				}
			})
			err := r.Write(ctx, key, tc.token, "mine")
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantPuts, *rounds, "PUT attempts")
			v, err := s.Read(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tc.wantValue, v)
			f, err := s.Fence(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tc.wantFence, f)
		})
	}

	t.Run("object deleted between read and PUT: re-read, create", func(t *testing.T) {
		ctx := t.Context()
		require.NoError(t, other.Write(ctx, "race/deleted", 10, "old"))
		r, rounds := interleave(func(round int) {
			if round == 1 {
				require.NoError(t, m.Client.RemoveObject(ctx, m.Bucket, "race/deleted", minio.RemoveObjectOptions{}))
			}
		})
		require.NoError(t, r.Write(ctx, "race/deleted", 11, "mine"))
		require.Equal(t, 2, *rounds)
	})

	t.Run("gives up after S3MaxAttempts lost races and overwrites nothing", func(t *testing.T) {
		ctx := t.Context()
		r, rounds := interleave(func(round int) {
			require.NoError(t, other.Write(ctx, "race/busy", uint64(100+round), fmt.Sprint("other", round)))
		})
		err := r.Write(ctx, "race/busy", 1000, "mine")
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrStale, "losing races is not a rejection")
		require.Contains(t, err.Error(), "gave up")
		require.Equal(t, S3MaxAttempts, *rounds)
		v, err := s.Read(ctx, "race/busy")
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("other", S3MaxAttempts), v)
	})

	t.Run("an object without fence metadata counts as fence 0", func(t *testing.T) {
		ctx := t.Context()
		_, err := put(t, "legacy", "legacy value", minio.PutObjectOptions{})
		require.NoError(t, err)
		v, err := s.Read(ctx, "legacy")
		require.NoError(t, err)
		require.Equal(t, "legacy value", v)
		require.NoError(t, s.Write(ctx, "legacy", 1, "fenced"))
		v, err = s.Read(ctx, "legacy")
		require.NoError(t, err)
		require.Equal(t, "fenced", v)
	})

	t.Run("absent object reads empty", func(t *testing.T) {
		v, err := s.Read(t.Context(), "never-written")
		require.NoError(t, err)
		require.Equal(t, "", v)
	})

	t.Run("the body holds the fence line, then the value", func(t *testing.T) {
		require.NoError(t, s.Write(t.Context(), "body", 42, "line one\nline two"))
		require.Equal(t, "lockd-fence 42\nline one\nline two", readRaw(t, m, "body"))
		v, err := s.Read(t.Context(), "body")
		require.NoError(t, err)
		require.Equal(t, "line one\nline two", v)
	})

	t.Run("Describe names the bucket, not the credentials", func(t *testing.T) {
		d := s.Describe()
		require.Equal(t, "s3 bucket fencetest at "+m.Endpoint, d)
		require.NotContains(t, d, m.SecretKey)
	})

	t.Run("Open", func(t *testing.T) {
		ctx := t.Context()
		m.SetEnv(t)
		u := strings.Replace(m.URL(), "s3://fencetest", "s3://fence-open", 1) // made by Open
		r, closeFn, err := Open(ctx, u)
		require.NoError(t, err)
		defer closeFn()
		require.Equal(t, "s3 bucket fence-open at "+m.Endpoint, r.Describe())
		w, err := r.Prepare(ctx, "k", 7)
		require.NoError(t, err)
		require.NoError(t, w(ctx, "seven"))
		w, err = r.Prepare(ctx, "k", 7)
		require.NoError(t, err)
		require.ErrorIs(t, w(ctx, "again"), ErrStale)
		v, err := r.Read(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, "seven", v)

		_, closeAgain, err := Open(ctx, u)
		require.NoError(t, err, "the bucket exists now")
		closeAgain()
	})

	t.Run("Open takes MINIO_ROOT_USER when AWS_ is unset", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		t.Setenv("MINIO_ROOT_USER", m.AccessKey)
		t.Setenv("MINIO_ROOT_PASSWORD", m.SecretKey)
		_, closeFn, err := Open(t.Context(), m.URL())
		require.NoError(t, err)
		closeFn()
	})

	t.Run("Open errors do not leak the secret", func(t *testing.T) {
		ctx := t.Context()
		t.Setenv("MINIO_ROOT_USER", "")
		t.Setenv("MINIO_ROOT_PASSWORD", "")
		t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-sekrit-key")
		_, _, err := Open(ctx, m.URL())
		require.Error(t, err, "wrong secret")
		require.NotContains(t, err.Error(), "wrong-sekrit-key")

		_, _, err = Open(ctx, "s3://"+m.AccessKey+":sekrit@fencetest?endpoint="+m.Endpoint+"&secure=false")
		require.ErrorContains(t, err, "credentials do not belong in the URL")
		require.NotContains(t, err.Error(), "sekrit")

		t.Setenv("AWS_ACCESS_KEY_ID", "")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "")
		_, _, err = Open(ctx, m.URL())
		require.ErrorContains(t, err, "no credentials")

		for _, u := range []string{"s3://?endpoint=x", "ftp://x", "s3://b?secure=maybe"} {
			_, _, err = Open(ctx, u)
			require.Error(t, err, u)
			require.True(t, strings.HasPrefix(err.Error(), "fence: "), err.Error())
		}
	})
}

// readRaw returns the whole body of an object.
func readRaw(t *testing.T, m *testserver.MinIO, key string) string {
	t.Helper()
	obj, err := m.Client.GetObject(t.Context(), m.Bucket, key, minio.GetObjectOptions{})
	require.NoError(t, err)
	defer obj.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(obj)
	require.NoError(t, err)
	return b.String()
}
