// Package classlint is the class-lint command. For now it has one
// subcommand, check, which applies the same rules lockd applies when it
// loads a class directory; the pull-request review features come later.
package classlint

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/pkg/class"
)

// Exit codes.
const (
	ExitOK         = 0
	ExitViolations = 1
	ExitUsage      = 2
)

// CheckOptions are the options of class-lint check.
type CheckOptions struct {
	Dir string
	Now func() time.Time
	Out io.Writer
}

// Main runs class-lint with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	code := ExitOK
	root := &cobra.Command{
		Use:           "class-lint",
		Short:         "Review lock-class definitions",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	check := &cobra.Command{
		Use:   "check [dir]",
		Short: "Check a class directory (default ./classes) against the class rules",
		Example: `  class-lint check
  class-lint check ./classes`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			opts := CheckOptions{Dir: "classes", Now: time.Now, Out: stdout}
			if len(args) == 1 {
				opts.Dir = args[0]
			}
			code = checkRun(opts)
			return nil
		},
	}
	root.AddCommand(check)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(stderr, "class-lint:", err)
		return ExitUsage
	}
	return code
}

func checkRun(opts CheckOptions) int {
	_, err := class.LoadDir(opts.Dir, opts.Now())
	if err == nil {
		fmt.Fprintf(opts.Out, "%s: ok\n", opts.Dir)
		return ExitOK
	}
	var le *class.LoadError
	if errors.As(err, &le) {
		for _, p := range le.Problems {
			fmt.Fprintln(opts.Out, p.Error())
		}
		return ExitViolations
	}
	fmt.Fprintln(opts.Out, err)
	return ExitUsage
}
