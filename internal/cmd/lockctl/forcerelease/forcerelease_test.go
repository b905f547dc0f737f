package forcerelease

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// run executes `lockctl force-release <args>` as identity against env,
// with stdin and a TTY flag, and returns stdout, stderr and the error.
func run(t *testing.T, env *lockdtest.Env, identity string, tty bool, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ios, in, out, errOut := iostreams.Test()
	ios.SetStdinTTY(tty)
	in.WriteString(stdin)
	f := &cmdutil.Factory{IOStreams: ios, Now: time.Now, Output: printer.FormatJSON}
	f.Client = func() (*client.Client, error) {
		return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(identity))
	}
	cmd := NewCmdForceRelease(f)
	cmd.SetArgs(args)
	cmd.SetIn(in)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// TestForceReleaseWalkThrough is the README's walk-through against a real
// lockd: one operator requests, the same one cannot approve, a second one
// sees the request, is asked to confirm, and releases the hold.
func TestForceReleaseWalkThrough(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice := env.Client(t, lockdtest.Alice)
	l, err := alice.Acquire(t.Context(), "t/wedged", "std", func(*client.Lock) {})
	require.NoError(t, err)

	out, _, err := run(t, env, lockdtest.Operator, false, "", "request", "t/wedged", "--reason", "INC-7: wedged")
	require.NoError(t, err)
	var req struct {
		ID, Key, Holder, Enforcement, Requester string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &req))
	require.Equal(t, "t/wedged", req.Key)
	require.Equal(t, lockdtest.Alice, req.Holder)
	require.Equal(t, "fenced", req.Enforcement)
	require.NotEmpty(t, req.ID)

	_, _, err = run(t, env, lockdtest.Operator, false, "", "approve", req.ID)
	require.ErrorContains(t, err, "without --yes", "a pipe cannot confirm")
	_, _, err = run(t, env, lockdtest.Operator, false, "", "approve", req.ID, "--yes")
	require.ErrorContains(t, err, "different operator")

	out, _, err = run(t, env, lockdtest.Operator2, false, "", "list")
	require.NoError(t, err)
	require.Contains(t, out, req.ID)

	// On a terminal the approver sees the request and must type yes.
	_, errOut, err := run(t, env, lockdtest.Operator2, true, "no\n", "approve", req.ID)
	require.Error(t, err)
	require.Contains(t, errOut, "Holder:       "+lockdtest.Alice)
	require.Contains(t, errOut, "Enforcement:  fenced")
	require.Contains(t, errOut, "INC-7: wedged")
	got, _ := env.Backend.Client.Get(t.Context(), "/l/t/wedged")
	require.Len(t, got.Kvs, 1, "answering no released the hold")

	out, _, err = run(t, env, lockdtest.Operator2, true, "yes\n", "approve", req.ID)
	require.NoError(t, err)
	require.Contains(t, out, `"approver": "`+lockdtest.Operator2+`"`)
	got, _ = env.Backend.Client.Get(t.Context(), "/l/t/wedged")
	require.Empty(t, got.Kvs, "the approved force-release left the hold")
	held, err := l.ReleaseHeld(t.Context())
	require.NoError(t, err)
	require.False(t, held, "the old holder's release still found its hold")
}
