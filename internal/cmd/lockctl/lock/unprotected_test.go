package lock

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestLockUnderAnUnprotectedLockRunsWhileItsKeepalivesAreAnswered: without
// a quorum, lockctl lock of an open class's key gets an unprotected lock
// (CanStart is always false for one) and says so; the command then runs as
// long as lockd answers its keepalives, past the first deadline (TTL − 1 s),
// and is not killed: supervision follows the lock's state and deadline, as
// for any lock.
func TestLockUnderAnUnprotectedLockRunsWhileItsKeepalivesAreAnswered(t *testing.T) {
	cluster := lockdtest.StartCluster(t, t.TempDir())
	b, err := store.ConnectExternal(store.ExternalConfig{Endpoints: cluster.Endpoints()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	env := lockdtest.Start(t, lockdtest.Options{Backend: b, FreshStore: true, Classes: lockdtest.OpenClasses(),
		OpenAfter: 2 * time.Second, RequestTimeout: time.Second})
	cluster.Stop(1)
	cluster.Stop(2)
	lockdtest.WaitFor(t, 30*time.Second, "the open posture", func() bool { return env.Arbiter.Posture() == "open" })
	t.Cleanup(func() { cluster.Restart(1, 2) })

	// The class TTL is 30 s: the first deadline is 29 s after the grant.
	opts, out, errOut := testOptions(t, env, "t/cache/job", "", "sh", "-c", "sleep 33; echo finished")
	start := time.Now()
	err = lockRun(opts)
	require.Equal(t, 0, cmdutil.ExitCodeFor(err), "lockctl lock: %v\nstderr: %s", err, errOut.String())
	require.Equal(t, "finished\n", out.String())
	require.GreaterOrEqual(t, time.Since(start), 33*time.Second)
	require.Contains(t, errOut.String(), "was granted without an etcd quorum (class t/cache is open on quorum loss): unprotected, token 0")
	require.False(t, strings.Contains(errOut.String(), "SIGKILL") || strings.Contains(errOut.String(), "are failing"),
		"supervision acted on a lock whose keepalives were answered: %s", errOut.String())
	require.Equal(t, "open", env.Arbiter.Posture(), "the outage ended early: the test proves nothing")
}
