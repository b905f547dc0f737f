package request

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestNewCmdRequestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Options
		wantErr string
	}{
		{name: "ok", args: []string{"--from", "3", "--reason", "restored from snapshot"}, want: Options{From: 3, Reason: "restored from snapshot"}},
		{name: "from is required", args: []string{"--reason", "drill"}, wantErr: "--from is required"},
		{name: "reason is required", args: []string{"--from", "3"}, wantErr: "--reason is required"},
		{name: "blank reason", args: []string{"--from", "3", "--reason", "  "}, wantErr: "--reason is required"},
		{name: "bad from", args: []string{"--from", "-1", "--reason", "x"}, wantErr: `invalid argument "-1" for "--from"`},
		{name: "initialise", args: []string{"--from", "0", "--to", "8", "--reason", "rebuilt"}, want: Options{From: 0, To: 8, Reason: "rebuilt"}},
		{name: "from 0 needs to", args: []string{"--from", "0", "--reason", "rebuilt"}, wantErr: "--to is required with --from 0"},
		{name: "to above from", args: []string{"--from", "3", "--to", "3", "--reason", "x"}, wantErr: "--to 3 must be above --from 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			var got *Options
			cmd := NewCmdRequest(&cmdutil.Factory{IOStreams: ios}, func(o *Options) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want.From, got.From)
			require.Equal(t, tt.want.To, got.To)
			require.Equal(t, tt.want.Reason, got.Reason)
		})
	}
}

func TestPrintRequest(t *testing.T) {
	golden.AssertPrinted(t, "requested", NewView(&lockv1.RequestEpochAdvanceResponse{Id: "5d1e0c9a2b3f4a77", FromEpoch: 3, ToEpoch: 4,
		Requester: "spiffe://example.org/ops/alice", Reason: "restored etcd (INC-1234)", ExpiresAt: timestamppb.New(golden.Now.Add(50 * 60e9))}))
}
