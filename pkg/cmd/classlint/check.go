package classlint

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/pkg/class"
)

// CheckOptions are the options of class-lint check.
type CheckOptions struct {
	Dir string
	Now func() time.Time
	Out io.Writer
}

func newCheckCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
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
			if code := checkRun(opts); code != ExitOK {
				return exitError{code}
			}
			return nil
		},
	}
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
