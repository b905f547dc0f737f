// Package classlint is the class-lint command: it reviews lock-class
// definitions (check), prices TTL changes from Prometheus (cost), posts the
// review on a Gitea pull request (comment), lists the advisory risk register
// (register) and serves the same rules as a validating admission webhook
// (webhook).
package classlint

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	// ExitOK means no violations (warnings may have been printed).
	ExitOK = 0
	// ExitViolations means at least one rule was broken.
	ExitViolations = 1
	// ExitUsage means the command line or its inputs could not be used.
	ExitUsage = 2
)

// exitError carries an exit code out of a subcommand; its message, if any,
// has already been printed.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Main runs class-lint with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:   "class-lint",
		Short: "Review lock-class definitions",
		Long: `class-lint reviews LockClass and LockGrant definitions: the rules lockd applies
when it loads them, plus the review rules (pause-test results for fenced classes,
waiver expiry, overlapping grants, CODEOWNERS), the renewal cost of a change
priced from Prometheus, and the pull-request comment that carries both.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newCheckCmd(stdout),
		newCostCmd(stdout),
		newRegisterCmd(stdout),
		newCommentCmd(stdout, stderr),
		newWebhookCmd(stderr),
	)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		if e, ok := err.(exitError); ok {
			return e.code
		}
		fmt.Fprintln(stderr, "class-lint:", err)
		return ExitUsage
	}
	return ExitOK
}
