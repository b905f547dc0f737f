package lockctlcmd

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestRunExitCodesAgainstLockd runs lockctl in-process against a real lockd
// (and against nothing) and checks the exit code of each kind of failure,
// with the error on stderr prefixed "lockctl:".
func TestRunExitCodesAgainstLockd(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	// Bob holds t/held; Alice holds t/leaked under another session.
	_, err := env.Client(t, lockdtest.Bob).Acquire(t.Context(), "t/held", "std", func(*client.Lock) {})
	require.NoError(t, err)
	_, err = env.Client(t, lockdtest.Alice).Acquire(t.Context(), "t/leaked", "std", func(*client.Lock) {})
	require.NoError(t, err)
	down := lockdtest.FreeAddr(t) // nothing listens there

	factory := func(t *testing.T, addr string) (*cmdutil.Factory, *strings.Builder, *strings.Builder) {
		ios, _, _, _ := iostreams.Test()
		out, errOut := &strings.Builder{}, &strings.Builder{}
		ios.Out, ios.ErrOut = out, errOut
		f := cmdutil.New()
		f.IOStreams = ios
		f.Config = func() (*clientconfig.Config, string, error) {
			t.Fatal("unexpected config load")
			return nil, "", nil
		}
		f.Client = func() (*client.Client, error) {
			return client.New(client.WithTarget(addr), client.WithInsecureIdentity(lockdtest.Alice))
		}
		return f, out, errOut
	}
	tests := []struct {
		name    string
		addr    string
		args    []string
		want    int
		wantErr string
	}{
		{"ok", env.Addr, []string{"lock", "t/free", "--class", "std", "--", "true"}, cli.ExitOK, ""},
		{"the command's own code", env.Addr, []string{"lock", "t/free", "--class", "std", "--", "sh", "-c", "exit 3"}, 3, ""},
		{"usage", env.Addr, []string{"lock", "t/free", "--wait", "-1s", "--", "true"}, cli.ExitUsage, "--wait must not be negative"},
		{"another class's key", env.Addr, []string{"lock", "t/fast/x", "--class", "std", "--", "true"}, cli.ExitUsage,
			`key t/fast/x belongs to class t/fast (its spec.keys has "t/fast/"), not t/std`},
		{"held past --wait", env.Addr, []string{"lock", "t/held", "--class", "std", "--wait", "200ms", "--", "true"}, cli.ExitTimeout, "raise --wait"},
		{"no grant", env.Addr, []string{"lock", "other/x", "--class", "std", "--", "true"}, cli.ExitNoPerm, "permission denied"},
		{"leaked hold", env.Addr, []string{"lock", "t/leaked", "--class", "std", "--", "true"}, cli.ExitLeak, "leak"},
		{"unknown class", env.Addr, []string{"lock", "t/x", "--class", "nope", "--", "true"}, cli.ExitFailure, `no class "nope"`},
		{"lockd unreachable: lock", down, []string{"lock", "t/x", "--class", "std", "--", "true"}, cli.ExitUnavailable, "unreachable"},
		{"lockd unreachable: inspect", down, []string{"inspect", "t/x"}, cli.ExitUnavailable, "unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, out, errOut := factory(t, tt.addr)
			got := Run(f, tt.args)
			require.Equal(t, tt.want, got, "stdout %q stderr %q", out.String(), errOut.String())
			if tt.wantErr != "" {
				require.True(t, strings.HasPrefix(errOut.String(), "lockctl: "), "stderr %q", errOut.String())
				require.Contains(t, errOut.String(), tt.wantErr)
				require.Empty(t, out.String(), "errors go to stderr only")
			}
		})
	}

	t.Run("no config", func(t *testing.T) {
		ios, _, _, errOut := iostreams.Test()
		f := cmdutil.New()
		f.IOStreams = ios
		f.Config = func() (*clientconfig.Config, string, error) { return nil, "", cmdutil.ErrNoConfig }
		require.Equal(t, cli.ExitFailure, Run(f, []string{"inspect", "t/x"}))
		require.Contains(t, errOut.String(), "lockctl: no lockctl config found")
	})
}
