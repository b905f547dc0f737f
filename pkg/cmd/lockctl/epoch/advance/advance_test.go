package advance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/internal/golden"
	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/iostreams"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestNewCmdAdvanceFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		stdinTTY bool
		want     Options
		wantErr  string
	}{
		{name: "yes", args: []string{"--from", "3", "--reason", "restored from snapshot", "--yes"}, want: Options{From: 3, Reason: "restored from snapshot", Yes: true}},
		{name: "tty may confirm", args: []string{"--from", "0", "--reason", "drill"}, stdinTTY: true, want: Options{From: 0, Reason: "drill"}},
		{name: "no tty needs --yes", args: []string{"--from", "3", "--reason", "drill"}, wantErr: "refusing to advance the epoch without --yes"},
		{name: "from is required", args: []string{"--reason", "drill", "--yes"}, wantErr: "--from is required"},
		{name: "reason is required", args: []string{"--from", "3", "--yes"}, wantErr: "--reason is required"},
		{name: "blank reason", args: []string{"--from", "3", "--reason", "  ", "--yes"}, wantErr: "--reason is required"},
		{name: "bad from", args: []string{"--from", "-1", "--reason", "x", "--yes"}, wantErr: `invalid argument "-1" for "--from"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			ios.SetStdinTTY(tt.stdinTTY)
			var got *Options
			cmd := NewCmdAdvance(&cmdutil.Factory{IOStreams: ios}, func(o *Options) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				if !errors.As(err, new(*cmdutil.FlagError)) {
					// pflag's own parse errors become usage errors at the root.
					require.Contains(t, err.Error(), "invalid argument")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.From, got.From)
			require.Equal(t, tt.want.Reason, got.Reason)
			require.Equal(t, tt.want.Yes, got.Yes)
		})
	}
}

func TestPrintAdvance(t *testing.T) {
	golden.AssertPrinted(t, "advanced", NewView(&lockv1.AdvanceEpochResponse{Epoch: 4, ClusterId: 0x8e9e05c52164694d, HoldsDeleted: 17}))
}
