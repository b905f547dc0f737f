// Package classlint is the class-lint command: it reviews lock-class
// definitions (check), prices TTL changes from Prometheus (cost), posts the
// review on a Gitea pull request (comment), lists the advisory risk register
// (register) and serves the same rules as a validating admission webhook
// (webhook).
package classlint

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cost"
	"github.com/lockd-dev/lockd/internal/forge"
)

// Exit codes: internal/cli's table, the one lockd and lockctl use.
const (
	// ExitOK means no violations (warnings may have been printed).
	ExitOK = cli.ExitOK
	// ExitViolations means at least one rule was broken.
	ExitViolations = cli.ExitFindings
	// ExitUsage means the command line or its inputs could not be used.
	ExitUsage = cli.ExitUsage
	// ExitUnavailable means Prometheus or Gitea could not be reached.
	ExitUnavailable = cli.ExitUnavailable
)

// Main runs class-lint with args and returns the exit code. Results go to
// stdout; every error goes to stderr as "class-lint: …".
func Main(args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:   "class-lint",
		Short: "Review lock-class definitions",
		Long: `class-lint reviews LockClass and LockGrant definitions: the rules lockd applies
when it loads them, plus the review rules (pause-test results for fenced classes,
waiver expiry, overlapping grants, CODEOWNERS), the keys a change moves to
another tier or posture (rehomes), the renewal cost of a change priced from
Prometheus, and the pull-request comment that carries them. In a cluster it
serves the same rules as an admission webhook (webhook) and runs the class
controller, which marks each LockClass fenced, or not, from its pause-test
results (controller).

Exit status: 0 success, 1 violations, 2 usage error or an input that cannot be
used, 69 Prometheus or Gitea unreachable, or the controller's leader Lease
lost. docs/class-lint.md has the table.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newCheckCmd(stdout),
		newCostCmd(stdout),
		newRegisterCmd(stdout),
		newCommentCmd(stdout, stderr),
		newWebhookCmd(stderr),
		newControllerCmd(stderr),
	)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := cli.Execute(context.Background(), root)
	if err == nil {
		return ExitOK
	}
	cmdPath := ""
	if cmd != nil {
		cmdPath = cmd.CommandPath()
	}
	return cli.Fail(stderr, "class-lint", cmdPath, classify(err))
}

// classify gives an error from a subcommand its exit code: ExitUnavailable
// when Prometheus or Gitea could not be reached (by the packages' sentinel
// errors), ExitUsage for any other error without a code of its own.
func classify(err error) error {
	var ee *cli.ExitError
	var ue *cli.UsageError
	switch {
	case errors.As(err, &ee), errors.As(err, &ue):
		return err
	case errors.Is(err, cost.ErrUnreachable), errors.Is(err, forge.ErrUnreachable), errors.Is(err, ErrHistoryUnreachable):
		return cli.Exit(ExitUnavailable, err)
	default:
		return cli.Exit(ExitUsage, err)
	}
}
