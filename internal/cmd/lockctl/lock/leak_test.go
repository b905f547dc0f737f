package lock

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// Two terminals, one identity: the first `lockctl lock` is killed -9 while
// it holds the key (its session is no longer renewed); the second, run
// with --wait, says once what it waits for, waits the crashed session out
// and runs its command.
func TestSecondRunOfTheSameIdentityWaitsOutACrashedFirst(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	bin := filepath.Join(t.TempDir(), "lockctl")
	build := exec.Command("go", "build", "-o", bin, "github.com/lockd-dev/lockd/cmd/lockctl")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/lockctl: %s", out)
	cfg := filepath.Join(t.TempDir(), "lockctl.yaml")
	require.NoError(t, clientconfig.Save(cfg, &clientconfig.Config{CurrentContext: "alice", Contexts: []clientconfig.Context{
		{Name: "alice", Server: env.Addr, InsecureIdentity: lockdtest.Alice}}}))

	first := exec.Command(bin, "--config", cfg, "lock", "t/fast/twice", "--class", "fast", "--", "sleep", "10")
	require.NoError(t, first.Start())
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	lockdtest.WaitFor(t, 15*time.Second, "the first run holds t/twice", func() bool { return !holdKeyAbsent(t, env, "t/fast/twice") })
	require.NoError(t, first.Process.Signal(syscall.SIGKILL)) // the crash: no release, no more keepalives

	opts, stdout, stderr := testOptions(t, env, "t/fast/twice", "fast", "sh", "-c", "echo ran")
	opts.Wait = 30 * time.Second
	start := time.Now()
	require.NoError(t, lockRun(opts), "stderr: %s", stderr)
	waited := time.Since(start)
	require.Equal(t, "ran\n", stdout.String())
	require.Equal(t, 1, strings.Count(stderr.String(), "is held by this same identity under session"), stderr.String())
	require.Contains(t, stderr.String(), "waiting up to 30s")
	require.Less(t, waited, 10*time.Second, "the crashed session (TTL 5s) lapses well within the wait")
}

// With the first run alive, the second times out with the timeout code and
// the leak reason; without --wait it is refused at once with its own code.
func TestSecondRunOfTheSameIdentityTimesOutWhileTheFirstLives(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	firstOpts, _, _ := testOptions(t, env, "t/fast/live", "fast", "sleep", "15")
	firstDone := make(chan error, 1)
	go func() { firstDone <- lockRun(firstOpts) }()
	lockdtest.WaitFor(t, 10*time.Second, "the first run holds t/live", func() bool { return !holdKeyAbsent(t, env, "t/fast/live") })

	opts, stdout, stderr := testOptions(t, env, "t/fast/live", "fast", "sh", "-c", "echo ran")
	opts.Wait = 7 * time.Second // past the class TTL (5s): the live session is renewed
	err := lockRun(opts)
	require.Equal(t, cli.ExitTimeout, cmdutil.ExitCodeFor(err), "%v", err)
	require.Contains(t, err.Error(), "leak")
	require.Contains(t, err.Error(), "another live process uses the same SPIFFE ID")
	require.Contains(t, stderr.String(), "is held by this same identity")
	require.Empty(t, stdout.String(), "the command must not run")

	opts, stdout, _ = testOptions(t, env, "t/fast/live", "fast", "sh", "-c", "echo ran")
	err = lockRun(opts) // --wait 0: tried once
	require.Equal(t, cli.ExitLeak, cmdutil.ExitCodeFor(err), "%v", err)
	require.Empty(t, stdout.String())
	require.NoError(t, <-firstDone, "the first run was disturbed")
}
