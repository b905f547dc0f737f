package fence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
)

// S3FenceMetadata is the user-metadata key that holds an object's fence, in
// decimal; on the wire it is the header X-Amz-Meta-Lockd-Fence.
const S3FenceMetadata = "Lockd-Fence"

// s3BodyPrefix starts the first line of a fenced object's body, which holds
// the fence again: "lockd-fence <token>\n", then the value. See [S3].
const s3BodyPrefix = "lockd-fence "

// S3MaxAttempts bounds the read-decide-write rounds of [S3.Write]: each round
// after the first follows a 412 Precondition Failed, that is a write by
// someone else between this round's read and its PUT.
const S3MaxAttempts = 8

// S3 is the reference fence for an S3-compatible bucket (MinIO, AWS S3):
// the object named by the lock key holds the value, and its user metadata
// [S3FenceMetadata] holds the fence. A write reads the object's ETag and
// fence (HEAD), refuses a token that is not greater than the fence, then
// PUTs with If-Match on that ETag, or If-None-Match * when there was no
// object; a 412 means another write landed in between, and the write reads
// and decides again, at most [S3MaxAttempts] times. It never overwrites an
// object it has not read.
//
// The body is the line "lockd-fence <token>\n" followed by the value; [S3.Read]
// strips that line. The line is there because an ETag is a hash of the body
// alone: without it, a newer holder that writes the same value as the object
// already holds leaves the ETag unchanged, and a stale holder's If-Match on
// the ETag it read before would succeed and put the fence back. With the
// token in the body every accepted write changes the ETag.
//
// Objects are written in one PUT (no multipart), so a value is limited to
// the store's single-PUT size (5 GiB on S3). An existing object without
// fence metadata counts as fence 0. It is safe for concurrent use.
type S3 struct {
	client *minio.Client
	bucket string

	// beforePut, when set (by tests only), runs between the read of a round
	// and its PUT.
	beforePut func(key string)
}

// NewS3 returns the reference fence for bucket, which must exist. The
// object key is the lock key.
func NewS3(client *minio.Client, bucket string) *S3 {
	return &S3{client: client, bucket: bucket}
}

// Write is the reference fenced write for an object store: it stores value
// under key with token as the object's fence if and only if there is no
// object or the object's fence is strictly less than token, and nothing
// else wrote the object between that check and the PUT. It returns an
// error wrapping [ErrStale] when the fence rejected the write; any other
// error (including giving up after [S3MaxAttempts] lost races) is not a
// rejection and says nothing certain about whether the write happened.
// Token 0 is rejected with [ErrUnprotected] before anything is read.
func (s *S3) Write(ctx context.Context, key string, token uint64, value string) error {
	if token == 0 {
		return fmt.Errorf("fence: s3: %s/%s: %w", s.bucket, key, ErrUnprotected)
	}
	body := s3Body(token, value)
	for attempt := 0; attempt < S3MaxAttempts; attempt++ {
		st, err := s.stat(ctx, key)
		if err != nil {
			return err
		}
		if st.exists && token <= st.fence {
			return fmt.Errorf("fence: s3: %s/%s: %w", s.bucket, key, ErrStale)
		}
		opts := minio.PutObjectOptions{
			UserMetadata:     map[string]string{S3FenceMetadata: strconv.FormatUint(token, 10)},
			ContentType:      "text/plain; charset=utf-8",
			DisableMultipart: true,
		}
		if st.exists {
			opts.SetMatchETag(st.etag)
		} else {
			opts.SetMatchETagExcept("*")
		}
		if s.beforePut != nil {
			s.beforePut(key)
		}
		_, err = s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
		if err == nil {
			return nil
		}
		if !lostRace(err) {
			return fmt.Errorf("fence: s3: put %s/%s: %w", s.bucket, key, err)
		}
	}
	return fmt.Errorf("fence: s3: %s/%s: another writer changed the object between read and write %d times in a row; gave up",
		s.bucket, key, S3MaxAttempts)
}

// Prepare does nothing but return a Write that calls [S3.Write] with key
// and token: the reference reads the fence only in the write itself.
func (s *S3) Prepare(_ context.Context, key string, token uint64) (Write, error) {
	return func(ctx context.Context, value string) error {
		return s.Write(ctx, key, token, value)
	}, nil
}

// Read returns the value of the object key, or "" when there is none. An
// object without fence metadata is returned whole.
func (s *S3) Read(ctx context.Context, key string) (string, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return "", fmt.Errorf("fence: s3: get %s/%s: %w", s.bucket, key, err)
	}
	defer obj.Close()
	info, err := obj.Stat()
	if isNoSuchKey(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("fence: s3: get %s/%s: %w", s.bucket, key, err)
	}
	b, err := io.ReadAll(obj)
	if err != nil {
		return "", fmt.Errorf("fence: s3: get %s/%s: %w", s.bucket, key, err)
	}
	if _, ok := metadata(info.UserMetadata, S3FenceMetadata); !ok {
		return string(b), nil
	}
	head, value, ok := strings.Cut(string(b), "\n")
	if !ok || !strings.HasPrefix(head, s3BodyPrefix) {
		return "", fmt.Errorf("fence: s3: %s/%s has fence metadata but its body does not start with the fence line", s.bucket, key)
	}
	return value, nil
}

// Fence returns the fence of the object key: the highest token it
// accepted, or 0 when there is no object or it has no fence metadata.
func (s *S3) Fence(ctx context.Context, key string) (uint64, error) {
	st, err := s.stat(ctx, key)
	return st.fence, err
}

// Describe returns "s3 bucket NAME at ENDPOINT", without credentials.
func (s *S3) Describe() string {
	return fmt.Sprintf("s3 bucket %s at %s", s.bucket, s.client.EndpointURL().Host)
}

// s3State is what a write round reads of an object.
type s3State struct {
	exists bool
	etag   string
	fence  uint64
}

// stat reads the ETag and fence of the object key.
func (s *S3) stat(ctx context.Context, key string) (s3State, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if isNoSuchKey(err) {
		return s3State{}, nil
	}
	if err != nil {
		return s3State{}, fmt.Errorf("fence: s3: stat %s/%s: %w", s.bucket, key, err)
	}
	st := s3State{exists: true, etag: info.ETag}
	if v, ok := metadata(info.UserMetadata, S3FenceMetadata); ok {
		if st.fence, err = strconv.ParseUint(v, 10, 64); err != nil {
			return s3State{}, fmt.Errorf("fence: s3: %s/%s: fence metadata is not a uint64: %w", s.bucket, key, err)
		}
	}
	return st, nil
}

// s3Body returns the body of a fenced object.
func s3Body(token uint64, value string) []byte {
	return []byte(s3BodyPrefix + strconv.FormatUint(token, 10) + "\n" + value)
}

// metadata looks name up in user metadata, ignoring case.
func metadata(m map[string]string, name string) (string, bool) {
	for k, v := range m {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// lostRace reports whether a conditional PUT failed because the object
// changed after it was read: 412 Precondition Failed, 409
// ConditionalRequestConflict (S3, a concurrent conditional write), or 404
// (the object was deleted, so If-Match had nothing to match).
func lostRace(err error) bool {
	r := s3Error(err)
	return r.StatusCode == http.StatusPreconditionFailed || r.Code == minio.PreconditionFailed ||
		r.Code == "ConditionalRequestConflict" || isNoSuchKey(err)
}

// isNoSuchKey reports whether err says the object does not exist.
func isNoSuchKey(err error) bool {
	r := s3Error(err)
	return r.Code == minio.NoSuchKey || r.StatusCode == http.StatusNotFound && r.Code != minio.NoSuchBucket
}

// s3Error returns the S3 error response err wraps, or a zero one.
func s3Error(err error) minio.ErrorResponse {
	var r minio.ErrorResponse
	errors.As(err, &r)
	return r
}
