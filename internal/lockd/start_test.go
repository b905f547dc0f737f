package lockd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/spool"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestAFailedStartReleasesTheDataDir: a lockd whose arbiter cannot start
// (etcd unreachable) gives its data dir's spool back, so the same process
// can try again rather than find its own spool locked.
func TestAFailedStartReleasesTheDataDir(t *testing.T) {
	cfg := lockd.DefaultConfig()
	cfg.DataDir, cfg.ClassesDir = t.TempDir(), t.TempDir()
	lockdtest.WriteClasses(t, cfg.ClassesDir)
	cfg.Listen, cfg.MetricsListen, cfg.InsecureLoopback = "127.0.0.1:0", "127.0.0.1:0", true
	cfg.EtcdEndpoints = []string{"http://" + lockdtest.FreeAddr(t)} // nobody listens there
	cfg.Audit.Mode = lockd.AuditOff
	for attempt := range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		d, err := lockd.New(ctx, cfg)
		cancel()
		if err == nil {
			d.Close()
			t.Fatalf("attempt %d: lockd started without etcd", attempt)
		}
		if errors.Is(err, spool.ErrLocked) {
			t.Fatalf("attempt %d: %v; the failed start before kept the spool", attempt, err)
		}
	}
}
