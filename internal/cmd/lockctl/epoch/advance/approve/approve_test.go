package approve

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestNewCmdApproveFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		stdinTTY bool
		want     Options
		wantErr  string
	}{
		{name: "yes", args: []string{"5d1e", "--yes"}, want: Options{ID: "5d1e", Yes: true}},
		{name: "tty may confirm", args: []string{"5d1e"}, stdinTTY: true, want: Options{ID: "5d1e"}},
		{name: "no tty needs --yes", args: []string{"5d1e"}, wantErr: "refusing to advance the epoch without --yes"},
		{name: "id is required", args: []string{"--yes"}, wantErr: "request id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			ios.SetStdinTTY(tt.stdinTTY)
			var got *Options
			cmd := NewCmdApprove(&cmdutil.Factory{IOStreams: ios}, func(o *Options) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.ID, got.ID)
			require.Equal(t, tt.want.Yes, got.Yes)
		})
	}
}

func TestPrintAdvance(t *testing.T) {
	golden.AssertPrinted(t, "advanced", NewView(&lockv1.ApproveEpochAdvanceResponse{Epoch: 4, ClusterId: 0x8e9e05c52164694d, HoldsDeleted: 17,
		Requester: "spiffe://example.org/ops/alice", Approver: "spiffe://example.org/ops/bob", GrantsResumeIn: durationpb.New(16 * time.Second)}))
}
