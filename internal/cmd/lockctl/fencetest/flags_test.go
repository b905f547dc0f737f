package fencetest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/fencetest"
	"github.com/lockd-dev/lockd/internal/pausetest"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

func TestFlags(t *testing.T) {
	t.Setenv("LOCKCTL_CLASS", "")
	t.Setenv(fencetest.EnvResource, "")
	tests := []struct {
		name    string
		args    []string
		env     string // $LOCKCTL_FENCE_RESOURCE
		wantErr string
		check   func(t *testing.T, o *fencetest.Options)
	}{
		{name: "resource", args: []string{"--class", "fast", "--key", "t/x", "--resource", "postgres://h/db?table=t", "--schema-version", "7", "--out", "r.yaml"},
			check: func(t *testing.T, o *fencetest.Options) {
				require.Equal(t, "fast", o.Class)
				require.Equal(t, "t/x", o.Key)
				require.Equal(t, "postgres://h/db?table=t", o.Resource)
				require.Equal(t, "7", o.SchemaVersion)
				require.Equal(t, "r.yaml", o.Out)
				require.Equal(t, pausetest.DefaultMargin, o.Margin)
			}},
		{name: "commands", args: []string{"--class", "t/fast", "--key", "t/x", "--write", "w", "--read", "r", "--check", "c", "--resource-name", "db", "--margin", "3s"},
			check: func(t *testing.T, o *fencetest.Options) {
				require.Equal(t, []string{"w", "r", "c", "db"}, []string{o.Write, o.Read, o.Check, o.ResourceName})
				require.Empty(t, o.Resource)
				require.Equal(t, 3*time.Second, o.Margin)
			}},
		{name: "resource from the environment", env: "s3://b?endpoint=h:1", args: []string{"--class", "fast", "--key", "t/x"},
			check: func(t *testing.T, o *fencetest.Options) { require.Equal(t, "s3://b?endpoint=h:1", o.Resource) }},
		{name: "commands override the environment", env: "s3://b", args: []string{"--class", "fast", "--key", "t/x", "--write", "w", "--read", "r"},
			check: func(t *testing.T, o *fencetest.Options) { require.Empty(t, o.Resource) }},
		{name: "no class", args: []string{"--key", "t/x", "--resource", "u"}, wantErr: "--class is required"},
		{name: "no key", args: []string{"--class", "fast", "--resource", "u"}, wantErr: "--key is required"},
		{name: "no resource", args: []string{"--class", "fast", "--key", "t/x"}, wantErr: "no resource: give --resource"},
		{name: "both", args: []string{"--class", "fast", "--key", "t/x", "--resource", "u", "--write", "w", "--read", "r"}, wantErr: "exclude each other"},
		{name: "write without read", args: []string{"--class", "fast", "--key", "t/x", "--write", "w"}, wantErr: "--read is required"},
		{name: "check without write", args: []string{"--class", "fast", "--key", "t/x", "--check", "c", "--read", "r"}, wantErr: "--write is required"},
		{name: "negative margin", args: []string{"--class", "fast", "--key", "t/x", "--resource", "u", "--margin", "-1s"}, wantErr: "--margin"},
		{name: "to kubernetes", args: []string{"--class", "fast", "--key", "t/x", "--resource", "u", "--to-kubernetes", "--kubeconfig", "k.yaml"},
			check: func(t *testing.T, o *fencetest.Options) {
				require.True(t, o.ToKubernetes)
				require.Equal(t, "k.yaml", o.Kubeconfig)
				require.Empty(t, o.Out)
			}},
		{name: "kubeconfig without --to-kubernetes", args: []string{"--class", "fast", "--key", "t/x", "--resource", "u", "--kubeconfig", "k.yaml"}, wantErr: "add --to-kubernetes"},
		{name: "positional argument", args: []string{"t/x", "--class", "fast", "--resource", "u"}, wantErr: "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(fencetest.EnvResource, tt.env)
			ios, _, _, _ := iostreams.Test()
			f := cmdutil.New()
			f.IOStreams = ios
			f.Config = func() (*clientconfig.Config, string, error) {
				t.Fatal("flag parsing must not load the config")
				return nil, "", nil
			}
			var got *fencetest.Options
			cmd := fencetest.NewCmdFenceTest(f, func(o *fencetest.Options) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SetOut(ios.Out)
			cmd.SetErr(ios.ErrOut)
			err := cmd.Execute()
			if tt.wantErr != "" {
				var fe *cli.UsageError
				require.True(t, errors.As(err, &fe), "want a usage error, got %v", err)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, got)
		})
	}
}
