// Package forcerelease is `lockctl force-release`: two operators release a
// leaked hold, one asking and another approving.
package forcerelease

import (
	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease/approve"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease/deny"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease/list"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease/request"
)

// NewCmdForceRelease returns `lockctl force-release`.
func NewCmdForceRelease(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "force-release <command>",
		Short: "Release a leaked hold: one operator requests, another approves",
		Long: cmdutil.Doc(`
			A hold whose holder is alive and renewing but never releases it can only be
			cleared by force. It takes two operators: one requests, with a reason, and
			a different one approves. The approval releases the hold in one transaction
			and writes a force record saying who, why, and whether the class was fenced.

			Read the enforcement first. On an advisory class the resource does not check
			tokens: if the holder is still running, a force-release can let two writers
			in at once.
		`),
		Example: cmdutil.Example(`
			$ lockctl inspect payments/ledger/42
			$ lockctl force-release request payments/ledger/42 --reason "INC-1234: holder wedged"
			# a second operator:
			$ lockctl force-release list
			$ lockctl force-release approve <id>
		`),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(request.NewCmdRequest(f, nil), approve.NewCmdApprove(f, nil), deny.NewCmdDeny(f, nil), list.NewCmdList(f, nil))
	return cmd
}
