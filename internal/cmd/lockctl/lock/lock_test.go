package lock

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
)

func TestNewCmdLockFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Options
		wantErr string
	}{
		{
			name: "defaults",
			args: []string{"demo/x", "--class", "demo", "--", "sh", "-c", "echo $LOCK_TOKEN"},
			want: Options{Key: "demo/x", Class: "demo", Grace: 10 * time.Second, Command: []string{"sh", "-c", "echo $LOCK_TOKEN"}},
		},
		{
			name: "wait and grace",
			args: []string{"--wait", "30s", "demo/x", "--grace=2s", "--class=demo/demo-fast", "--", "make", "-j4"},
			want: Options{Key: "demo/x", Class: "demo/demo-fast", Wait: 30 * time.Second, Grace: 2 * time.Second, Command: []string{"make", "-j4"}},
		},
		{
			name: "flags after -- belong to the command",
			args: []string{"demo/x", "--class", "demo", "--", "ls", "--class", "-o", "json"},
			want: Options{Key: "demo/x", Class: "demo", Grace: 10 * time.Second, Command: []string{"ls", "--class", "-o", "json"}},
		},
		{name: "class is optional", args: []string{"demo/x", "--", "true"}, want: Options{Key: "demo/x", Grace: 10 * time.Second, Command: []string{"true"}}},
		{name: "command is required", args: []string{"demo/x", "--class", "demo", "--"}, wantErr: "missing command after --"},
		{name: "-- is required", args: []string{"demo/x", "--class", "demo", "true"}, wantErr: "missing -- before the command"},
		{name: "key is required", args: []string{"--class", "demo", "--", "true"}, wantErr: "missing <key> before --"},
		{name: "nothing", args: []string{}, wantErr: "missing <key>"},
		{name: "one key only", args: []string{"demo/x", "demo/y", "--class", "demo", "--", "true"}, wantErr: `unexpected argument "demo/y"`},
		{name: "negative wait", args: []string{"demo/x", "--class", "demo", "--wait", "-1s", "--", "true"}, wantErr: "--wait must not be negative"},
		{name: "bad duration", args: []string{"demo/x", "--class", "demo", "--wait", "soon", "--", "true"}, wantErr: `invalid argument "soon" for "--wait"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			f := &cmdutil.Factory{IOStreams: ios}
			var got *Options
			cmd := NewCmdLock(f, func(o *Options) error { got = o; return nil })
			cmd.SetFlagErrorFunc(func(_ *cobraCommand, err error) error { return &cli.UsageError{Err: err} })
			cmd.SetArgs(tt.args)
			cmd.SetOut(ios.ErrOut)
			cmd.SetErr(ios.ErrOut)
			cmd.SilenceUsage = true
			err := cmd.Execute()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				var fe *cli.UsageError
				require.True(t, errors.As(err, &fe), "want a usage error (exit 2), got %T", err)
				require.Equal(t, cli.ExitUsage, cmdutil.ExitCodeFor(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.Key, got.Key)
			require.Equal(t, tt.want.Class, got.Class)
			require.Equal(t, tt.want.Wait, got.Wait)
			require.Equal(t, tt.want.Grace, got.Grace)
			require.Equal(t, tt.want.Command, got.Command)
		})
	}
}
