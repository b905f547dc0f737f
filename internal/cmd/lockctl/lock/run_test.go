package lock

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// These tests run `lockctl lock` against a real lockd on an embedded etcd.

func testOptions(t *testing.T, env *lockdtest.Env, key, class string, command ...string) (*Options, *strings.Builder, *strings.Builder) {
	ios, _, _, _ := iostreams.Test()
	out, errOut := &strings.Builder{}, &strings.Builder{}
	ios.Out, ios.ErrOut = out, errOut
	return &Options{
		IO: ios,
		Client: func() (*client.Client, error) {
			return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(lockdtest.Alice))
		},
		Describe: func(err error) string { return cmdutil.Describe(err, env.Addr) },
		Environ:  func() []string { return []string{"PATH=/usr/bin:/bin", "LOCK_TOKEN=stale"} },
		Key:      key, Class: class, Grace: time.Second, Command: command,
	}, out, errOut
}

func holdKeyAbsent(t *testing.T, env *lockdtest.Env, key string) bool {
	got, err := env.Backend.Client.Get(t.Context(), "/l/"+key)
	require.NoError(t, err)
	return len(got.Kvs) == 0
}

func TestLockRunPassesTokenAndExitCode(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	opts, out, _ := testOptions(t, env, "t/x", "std", "sh", "-c", `echo "$LOCK_TOKEN $LOCK_KEY $LOCK_EPOCH"; env | grep -c '^LOCK_TOKEN='; exit 3`)
	err := lockRun(opts)
	require.Equal(t, 3, cmdutil.ExitCodeFor(err))
	fields := strings.Fields(out.String())
	require.Len(t, fields, 4, "output %q", out.String())
	tok, perr := strconv.ParseUint(fields[0], 10, 64)
	require.NoError(t, perr)
	require.Equal(t, uint64(1), tok>>48, "epoch 1 in the top bits")
	require.Equal(t, []string{"t/x", "1", "1"}, fields[1:], "key, epoch, and exactly one LOCK_TOKEN")
	require.True(t, holdKeyAbsent(t, env, "t/x"), "the lock is released when the command exits")
}

func TestLockRunSignalledChild(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	opts, _, _ := testOptions(t, env, "t/x", "std", "sh", "-c", "kill -KILL $$")
	require.Equal(t, 128+9, cmdutil.ExitCodeFor(lockRun(opts)))
}

// TestLockRunLostLock revokes the session's lease in etcd while the command
// runs: the next keepalive finds it expired and lockctl stops the command.
func TestLockRunLostLock(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	opts, _, errOut := testOptions(t, env, "t/fast/lost", "fast", "sh", "-c", "sleep 30 & wait")
	go func() {
		for {
			got, err := env.Backend.Client.Get(t.Context(), "/l/t/fast/lost")
			if err != nil {
				return
			}
			if len(got.Kvs) == 1 {
				_, _ = env.Backend.Client.Revoke(t.Context(), clientv3.LeaseID(got.Kvs[0].Lease))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	err := lockRun(opts)
	require.Equal(t, cli.ExitLockLost, cmdutil.ExitCodeFor(err))
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	require.Len(t, lines, 1, "one line: %q", errOut.String())
	require.Contains(t, lines[0], "lock t/fast/lost lost while the command ran (session expired at lockd)")
	require.NotContains(t, errOut.String(), "LOCK_TOKEN")
}

func TestLockRunAcquireErrors(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	// Bob holds t/held, so Alice times out waiting for it.
	bob := env.Client(t, lockdtest.Bob)
	_, err := bob.Acquire(t.Context(), "t/held", "std", func(*client.Lock) {})
	require.NoError(t, err)
	tests := []struct {
		name, key, class string
		wait             time.Duration
		want             int
		msg              string
	}{
		{"timed out waiting", "t/held", "std", 300 * time.Millisecond, cli.ExitTimeout, "wait deadline passed"},
		{"permission denied", "other/x", "std", 0, cli.ExitNoPerm, "permission denied"},
		{"unknown class", "t/x", "nope", 0, cli.ExitFailure, `no class "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, out, _ := testOptions(t, env, tt.key, tt.class, "sh", "-c", "echo ran")
			opts.Wait = tt.wait
			err := lockRun(opts)
			require.Equal(t, tt.want, cmdutil.ExitCodeFor(err), "%v", err)
			require.Contains(t, err.Error(), "cannot lock "+tt.key+": ")
			require.Contains(t, err.Error(), tt.msg)
			require.Empty(t, out.String(), "the command must not run")
		})
	}
	t.Run("lockd stopped", func(t *testing.T) {
		env.Stop()
		opts, out, _ := testOptions(t, env, "t/x", "std", "sh", "-c", "echo ran")
		err := lockRun(opts)
		require.Equal(t, cli.ExitUnavailable, cmdutil.ExitCodeFor(err), "%v", err)
		require.Empty(t, out.String())
	})
}

func TestLockRunCommandNotFound(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	opts, _, _ := testOptions(t, env, "t/x", "std", "/nonexistent/command")
	err := lockRun(opts)
	require.Equal(t, cli.ExitFailure, cmdutil.ExitCodeFor(err))
	require.ErrorContains(t, err, `cannot run "/nonexistent/command": no such file or directory`)
	require.True(t, holdKeyAbsent(t, env, "t/x"), "released after the failed start")
}

// TestLockedCommandIsDeadByTheLocksDeadline: keepalives stop reaching
// lockd while a command that ignores SIGTERM runs. The command must be
// dead (SIGKILL at the local deadline) before the store expires the hold
// and could grant the key to someone else (before: SIGTERM at the fence and
// SIGKILL --grace later, so it ran past the expiry).
func TestLockedCommandIsDeadByTheLocksDeadline(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy, err := tcpproxy.Start(env.Addr)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	started := filepath.Join(t.TempDir(), "started")
	opts, _, errOut := testOptions(t, env, "t/fast/child", "fast", "sh", "-c",
		`trap '' TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; while :; do sleep 0.1; done`, started)
	opts.Grace = 10 * time.Second // the default: more than the time left
	opts.Client = func() (*client.Client, error) {
		return client.New(client.WithTarget(proxy.Addr()), client.WithInsecureIdentity(lockdtest.Alice))
	}
	expired := make(chan time.Time, 1)
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		for resp := range env.Backend.Client.Watch(wctx, "/l/t/fast/child", clientv3.WithFilterPut()) {
			if len(resp.Events) > 0 {
				expired <- time.Now()
				return
			}
		}
	}()
	ran := make(chan error, 1)
	go func() { ran <- lockRun(opts) }()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(started)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	stalled := time.Now()
	proxy.Stall(tcpproxy.Both)
	exitAt := waitGone(t, pid, 30*time.Second)
	var expiryAt time.Time
	select {
	case expiryAt = <-expired:
	case <-time.After(15 * time.Second):
		t.Fatal("the store never expired the hold")
	}
	t.Logf("after the stall: command dead at +%s, store expiry at +%s; stderr: %s",
		exitAt.Sub(stalled).Round(time.Millisecond), expiryAt.Sub(stalled).Round(time.Millisecond), errOut.String())
	require.True(t, exitAt.Before(expiryAt), "the command outlived the lock: dead at %s, hold expired at %s", exitAt, expiryAt)
	select {
	case err := <-ran:
		require.Equal(t, cli.ExitLockLost, cmdutil.ExitCodeFor(err))
	case <-time.After(15 * time.Second):
		t.Fatal("lockctl did not return after the command died")
	}
}

// waitGone waits until process pid no longer exists and returns when it
// first saw it gone.
func waitGone(t *testing.T, pid int, d time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d still runs after %s", pid, d)
	return time.Time{}
}

// TestLockedCommandGoesOnWhenKeepalivesRecoverBeforeSIGTERM: a blip in the
// keepalives shorter than the time to SIGTERM cancels both signals.
func TestLockedCommandGoesOnWhenKeepalivesRecoverBeforeSIGTERM(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy, err := tcpproxy.Start(env.Addr)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	started := filepath.Join(t.TempDir(), "started")
	opts, _, errOut := testOptions(t, env, "t/blip", "std", "sh", "-c", `touch "$0"; sleep 13`, started)
	opts.Grace = time.Second
	opts.Client = func() (*client.Client, error) {
		return client.New(client.WithTarget(proxy.Addr()), client.WithInsecureIdentity(lockdtest.Alice))
	}
	done := make(chan error, 1)
	go func() { done <- lockRun(opts) }()
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 10*time.Second, 20*time.Millisecond)
	proxy.Stall(tcpproxy.Both)
	time.Sleep(7 * time.Second) // a keepalive (every 5s) fails; SIGTERM would come at 13s
	proxy.Resume()
	select {
	case err := <-done:
		require.NoError(t, err, "stderr: %s", errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("lockctl did not finish")
	}
	require.Contains(t, errOut.String(), "keepalives for t/blip are failing")
	require.Contains(t, errOut.String(), "recovered")
}
