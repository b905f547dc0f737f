package cli

import (
	"context"

	"github.com/spf13/cobra"
)

// Execute runs root with ctx and returns the command that ran (or was
// found) and its error. An error cobra returns before any command's Run
// started — an unknown command or flag, a missing required flag, a wrong
// number of arguments — is returned as a usage error: it is recognised by
// when it happened, not by its text.
func Execute(ctx context.Context, root *cobra.Command) (*cobra.Command, error) {
	started := false
	markStart(root, &started)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && !started {
		err = Usage(err)
	}
	return cmd, err
}

// markStart wraps the Run of every command under c so that it sets
// *started before it runs.
func markStart(c *cobra.Command, started *bool) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			*started = true
			return run(cmd, args)
		}
	} else if run := c.Run; run != nil {
		c.Run = func(cmd *cobra.Command, args []string) {
			*started = true
			run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		markStart(sub, started)
	}
}
