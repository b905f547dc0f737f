package lockctlcmd

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// testFactory fails loudly if a command reaches for config or lockd.
func testFactory(t *testing.T) (*cmdutil.Factory, *iostreams.IOStreams) {
	ios, _, _, _ := iostreams.Test()
	f := cmdutil.New()
	f.IOStreams = ios
	f.Config = func() (*clientconfig.Config, string, error) {
		t.Fatal("unexpected config load")
		return nil, "", nil
	}
	f.Client = func() (*client.Client, error) {
		t.Fatal("unexpected client")
		return nil, nil
	}
	return f, ios
}

func TestBadOutputIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", "demo/x", "-o", "xml"},
		{"-o", "xml", "sessions"},
		{"epoch", "status", "--output=csv"},
	} {
		f, _ := testFactory(t)
		cmd := NewCmdRoot(f)
		cmd.SetArgs(args)
		_, err := cmd.ExecuteC()
		var fe *cli.UsageError
		require.True(t, errors.As(err, &fe), "%v: want a usage error, got %v", args, err)
		require.Contains(t, err.Error(), "--output")
		require.Contains(t, err.Error(), "table, json, yaml")
	}
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    int
		wantErr string
	}{
		{"bad output", []string{"sessions", "-o", "xml"}, cli.ExitUsage, `invalid argument "xml" for "-o, --output" flag: must be one of table, json, yaml`},
		{"unknown command", []string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"unknown epoch command", []string{"epoch", "rewind"}, cli.ExitUsage, `unknown command "rewind"`},
		{"unknown flag", []string{"sessions", "--bogus"}, cli.ExitUsage, "unknown flag: --bogus"},
		{"lock without a command", []string{"lock", "demo/x", "--"}, cli.ExitUsage, "missing command after --"},
		{"lock without command", []string{"lock", "demo/x", "--class", "demo"}, cli.ExitUsage, "missing -- before the command"},
		{"inspect without key", []string{"inspect"}, cli.ExitUsage, "missing <key | prefix/>"},
		{"help", []string{"--help"}, cli.ExitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ios := testFactory(t)
			got := Run(f, tt.args)
			require.Equal(t, tt.want, got)
			errOut := ios.ErrOut.(interface{ String() string }).String()
			if tt.wantErr != "" {
				require.Contains(t, errOut, tt.wantErr)
				require.Contains(t, errOut, "--help' for usage")
			}
		})
	}
}

func TestOutputFromEnv(t *testing.T) {
	t.Setenv(cmdutil.EnvOutput, "xml")
	f, ios := testFactory(t)
	require.Equal(t, cli.ExitUsage, Run(f, []string{"sessions"}))
	require.Contains(t, ios.ErrOut.(interface{ String() string }).String(), "$LOCKCTL_OUTPUT")

	t.Setenv(cmdutil.EnvOutput, "yaml")
	f, _ = testFactory(t)
	NewCmdRoot(f)
	require.Equal(t, "yaml", string(f.Output))
}

func TestEveryCommandHasExamples(t *testing.T) {
	f, _ := testFactory(t)
	root := NewCmdRoot(f)
	for _, c := range allCommands(root) {
		if c.Name() == "help" || c.Name() == "completion" || c.HasParent() && c.Parent().Name() == "completion" {
			continue
		}
		require.NotEmpty(t, c.Example, "%s has no examples", c.CommandPath())
		require.NotEmpty(t, c.Long, "%s has no long help", c.CommandPath())
	}
}

func TestCompletionBash(t *testing.T) {
	f, ios := testFactory(t)
	require.Equal(t, cli.ExitOK, Run(f, []string{"completion", "bash"}))
	out := ios.Out.(interface{ String() string }).String()
	require.Contains(t, out, "bash completion V2 for lockctl")
	require.Contains(t, out, "__start_lockctl")
}
