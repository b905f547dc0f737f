package fence

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Open builds a reference fence from a URL and returns it with a function
// that releases its connections:
//
//   - postgres://user:pass@host:port/db?table=NAME (or postgresql://): a
//     [Postgres] on table NAME, created by EnsureSchema if missing. Every
//     other query parameter goes to pgx (sslmode=disable, for instance).
//   - s3://bucket?endpoint=host:port&secure=false&region=R: an [S3] on
//     bucket, made if missing. endpoint defaults to s3.amazonaws.com and
//     secure to true. The credentials come from the environment:
//     AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else MINIO_ROOT_USER and
//     MINIO_ROOT_PASSWORD; never from the URL.
//
// Errors never contain a password or a secret key.
func Open(ctx context.Context, rawURL string) (Resource, func(), error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A *url.Error repeats the URL, password included: keep only why.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, fmt.Errorf("fence: open: not a URL: %w", err)
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return openPostgres(ctx, u)
	case "s3":
		return openS3(ctx, u)
	default:
		return nil, nil, fmt.Errorf("fence: open %s: scheme %q is not postgres or s3", u.Redacted(), u.Scheme)
	}
}

func openPostgres(ctx context.Context, u *url.URL) (Resource, func(), error) {
	q := u.Query()
	table := q.Get("table")
	if table == "" {
		return nil, nil, fmt.Errorf("fence: open %s: missing ?table=NAME", u.Redacted())
	}
	q.Del("table") // pgx would send it to the server as a setting
	dsn := *u
	dsn.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(dsn.String()) // pgx redacts the password in its errors
	if err != nil {
		return nil, nil, fmt.Errorf("fence: open %s: %w", u.Redacted(), err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("fence: open %s: %w", u.Redacted(), err)
	}
	p, err := NewPostgres(pool, table)
	if err == nil {
		err = p.EnsureSchema(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("fence: open %s: %w", u.Redacted(), err)
	}
	return p, pool.Close, nil
}

func openS3(ctx context.Context, u *url.URL) (Resource, func(), error) {
	if u.User != nil {
		return nil, nil, errors.New("fence: open s3: credentials do not belong in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	bucket := u.Host
	if bucket == "" {
		return nil, nil, fmt.Errorf("fence: open %s: missing bucket (s3://BUCKET?endpoint=HOST:PORT)", u)
	}
	q := u.Query()
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	secure := true
	if v := q.Get("secure"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, fmt.Errorf("fence: open %s: secure=%q is not a boolean", u, v)
		}
		secure = b
	}
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" && secret == "" {
		id, secret = os.Getenv("MINIO_ROOT_USER"), os.Getenv("MINIO_ROOT_PASSWORD")
	}
	if id == "" || secret == "" {
		return nil, nil, fmt.Errorf("fence: open %s: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or MINIO_ROOT_USER and MINIO_ROOT_PASSWORD)", u)
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(id, secret, ""),
		Secure: secure,
		Region: q.Get("region"),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("fence: open %s: %w", u, err)
	}
	ok, err := client.BucketExists(ctx, bucket)
	if err == nil && !ok {
		err = client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: q.Get("region")})
		if s3Error(err).Code == "BucketAlreadyOwnedByYou" { // made meanwhile by another Open
			err = nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fence: open %s: bucket: %w", u, err)
	}
	return NewS3(client, bucket), func() {}, nil
}
