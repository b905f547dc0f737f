// Package testserver starts the real servers the fence, audit and metrics
// tests write to or read from: a throwaway PostgreSQL cluster, MinIO
// server, ClickHouse server and Prometheus, each on a free loopback port and
// stopped when the test ends. A
// missing server binary fails the test with the command that installs it;
// nothing is skipped.
package testserver

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/pgserver"
)

// StartPostgres initialises a throwaway PostgreSQL cluster in a fresh
// directory under os.TempDir (searchable by the user postgres, which
// t.TempDir's are not), starts it on 127.0.0.1 with trust authentication
// and fsync off, and returns the URL of the database "postgres" as the user
// "postgres". As root, initdb and pg_ctl run as postgres (runuser). The
// server is stopped and its directory removed when the test ends. It fails
// the test if the server binaries are missing.
func StartPostgres(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencetest-pg-")
	if err != nil {
		t.Fatalf("fencetest: postgres: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, stop, err := pgserver.Start(ctx, dir, false)
	if err != nil {
		t.Fatalf("fencetest: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("fencetest: postgres: %v", err)
		}
	})
	return url
}
