package testserver

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestStartPostgres(t *testing.T) {
	var dsn string
	t.Run("started", func(t *testing.T) {
		dsn = StartPostgres(t)
		conn, err := pgx.Connect(t.Context(), dsn)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var v string
		require.NoError(t, conn.QueryRow(t.Context(), "SHOW server_version").Scan(&v))
		t.Logf("PostgreSQL %s at %s", v, dsn)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := pgx.Connect(ctx, dsn)
	require.Error(t, err, "stopped when the test ended")
}

func TestStartMinIO(t *testing.T) {
	var endpoint string
	t.Run("started", func(t *testing.T) {
		m := StartMinIO(t)
		endpoint = m.Endpoint
		ok, err := m.Client.BucketExists(t.Context(), m.Bucket)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "s3://fencetest?endpoint="+strings.ReplaceAll(m.Endpoint, ":", "%3A")+"&secure=false", m.URL())
	})
	client := &http.Client{Timeout: 2 * time.Second}
	_, err := client.Get("http://" + endpoint + "/minio/health/live")
	require.Error(t, err, "stopped when the test ended")
}

func TestMinIOBinaryMissing(t *testing.T) {
	t.Setenv("LOCKD_MINIO", filepath.Join(t.TempDir(), "minio"))
	_, err := MinIOBinary()
	require.ErrorContains(t, err, "LOCKD_MINIO")

	t.Setenv("LOCKD_MINIO", "")
	t.Setenv("LOCKD_TOOLS", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	_, err = MinIOBinary()
	require.ErrorContains(t, err, "bash ci/tools.sh minio")
}
