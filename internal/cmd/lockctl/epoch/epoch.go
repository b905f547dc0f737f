// Package epoch is `lockctl epoch`: the operator's view of the epoch that
// guards tokens across a restore of the store.
package epoch

import (
	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/epoch/advance"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/epoch/status"
)

// NewCmdEpoch returns `lockctl epoch`.
func NewCmdEpoch(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "epoch <command>",
		Short: "Show or advance the token epoch (operators)",
		Long: cmdutil.Doc(`
			Every fencing token carries an epoch, bound to the etcd cluster ID it was
			minted for. When the store is restored from a backup its cluster ID
			changes, lockd seals itself and refuses every grant: tokens issued after
			the backup could otherwise be issued again. An operator checks the state
			with "epoch status" and, once the restore is deliberate, runs "epoch
			advance", which starts a new epoch and deletes every hold.
		`),
		Example: cmdutil.Example(`
			$ lockctl epoch status
			$ lockctl epoch advance request --from 3 --reason "restored etcd from the 02:00 snapshot (INC-1234)"
		`),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(status.NewCmdStatus(f, nil))
	cmd.AddCommand(advance.NewCmdAdvance(f))
	return cmd
}
