// Package advance is `lockctl epoch advance`: two operators start a new
// epoch, one asking and another approving.
package advance

import (
	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/epoch/advance/approve"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/epoch/advance/request"
)

// NewCmdAdvance returns `lockctl epoch advance`.
func NewCmdAdvance(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "advance <command>",
		Short: "Start a new epoch and delete every hold: one operator requests, another approves",
		Long: cmdutil.Doc(`
			An epoch advance unseals a lockd whose store was restored. It deletes every
			hold, so it takes two operators: one requests it with the epoch to advance
			from and a reason, and a different one approves it.
		`),
		Example: cmdutil.Example(`
			$ lockctl epoch status
			$ lockctl epoch advance request --from 3 --reason "restored etcd from the 02:00 snapshot (INC-1234)"
			# a second operator:
			$ lockctl epoch advance approve <id>
		`),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(request.NewCmdRequest(f, nil), approve.NewCmdApprove(f, nil))
	return cmd
}
