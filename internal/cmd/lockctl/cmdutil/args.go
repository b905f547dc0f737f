package cmdutil

import (
	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
)

// ExactArgs is cobra.ExactArgs returning a usage error that names what is
// missing.
func ExactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return cli.Usagef("%s: missing %s", cmd.CommandPath(), what)
		case len(args) > n:
			return cli.Usagef("%s: unexpected argument %q (takes %s)", cmd.CommandPath(), args[n], what)
		}
		return nil
	}
}

// NoArgs refuses positional arguments with a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("%s: unexpected argument %q", cmd.CommandPath(), args[0])
	}
	return nil
}
