// Package lockctlcmd is lockctl, the SRE's terminal for lockd: the root
// command, its persistent flags, and Main, which turns errors into exit
// codes.
package lockctlcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/clusters"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/epoch"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/fencetest"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/history"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/inspect"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/lock"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/login"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/register"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/sessions"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/shards"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/top"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/unprotected"
	"github.com/lockd-dev/lockd/internal/pausetest"
)

// Main runs lockctl with the process's arguments and returns its exit
// code. Only main calls os.Exit.
func Main() int {
	if pausetest.IsHolder() { // re-executed by fence-test as its paused holder
		return pausetest.HolderMain()
	}
	return Run(cmdutil.New(), os.Args[1:])
}

// Run executes lockctl with args and returns the exit code. Errors go to
// stderr as "lockctl: …", a gRPC status described with what to do about it.
func Run(f *cmdutil.Factory, args []string) int {
	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetIn(f.IOStreams.In)
	root.SetOut(f.IOStreams.Out)
	root.SetErr(f.IOStreams.ErrOut)
	cmd, err := cli.Execute(context.Background(), root)
	if err == nil {
		return cli.ExitOK
	}
	code := cmdutil.ExitCodeFor(err)
	var ee *cli.ExitError
	if !errors.As(err, &ee) {
		err = &described{err: err, msg: f.Describe(err)}
	}
	cmdPath := ""
	if cmd != nil {
		cmdPath = cmd.CommandPath()
	}
	cli.PrintError(f.IOStreams.ErrOut, "lockctl", cmdPath, err)
	return code
}

// described is err shown as msg: its message with what to do about it.
type described struct {
	err error
	msg string
}

func (d *described) Error() string { return d.msg }
func (d *described) Unwrap() error { return d.err }

// NewCmdRoot returns the lockctl command tree.
func NewCmdRoot(f *cmdutil.Factory) *cobra.Command {
	var envOutputErr error
	if v := cmdutil.Getenv(cmdutil.EnvOutput); v != "" {
		if err := f.Output.Set(v); err != nil {
			envOutputErr = cli.Usagef("$%s=%q: %v", cmdutil.EnvOutput, v, err)
		}
	}
	if f.ContextName == "" {
		f.ContextName = cmdutil.Getenv(cmdutil.EnvContext)
	}
	root := &cobra.Command{
		Use:   "lockctl <command>",
		Short: "Take, inspect and administer lockd locks",
		Long: cmdutil.Docf(`
			lockctl talks to lockd, the lock service: run a command under a lock,
			see who holds what, list sessions, and (operators) manage the token epoch.

			Config: contexts like kubectl's, read from the first of
			  --config, $%[1]s, ~/%[2]s, ./%[3]s
			(a dev lockd writes the last one when it starts). --context or
			$%[4]s picks a context; the default is the file's current-context.

			Output: -o table (default; aligned with relative times on a terminal,
			tab-separated with RFC 3339 times when piped), -o json or -o yaml
			(stable field names; tokens and session IDs are decimal strings).
			$%[5]s sets the default.

			Exit status: 0 success, 1 failure, 2 usage error, 69 lockd or its
			store unavailable or lockd sealed, 75 timed out (not granted within
			--wait), 77 permission denied, 79 lock lost, 80 leaked hold; lockctl
			lock passes on its command's own code. docs/lockctl.md has the table.
		`, cmdutil.EnvConfig, cmdutil.UserConfigPath, cmdutil.DevConfigPath, cmdutil.EnvContext, cmdutil.EnvOutput),
		Example: cmdutil.Example(`
			$ lockctl lock demo/x --class demo -- sh -c 'echo "token $LOCK_TOKEN"'
			$ lockctl inspect demo/
			$ lockctl sessions -o json
			$ lockctl epoch status
			$ lockctl --context prod inspect payments/ledger/migrate

			# Shell completion (bash; see "lockctl completion --help" for others)
			$ source <(lockctl completion bash)
		`),
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if envOutputErr != nil && !cmd.Flags().Changed("output") {
				return envOutputErr
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &cli.UsageError{Err: err} })

	pf := root.PersistentFlags()
	pf.StringVar(&f.ConfigFlag, "config", "", fmt.Sprintf("config file (env %s; default ~/%s, then ./%s)", cmdutil.EnvConfig, cmdutil.UserConfigPath, cmdutil.DevConfigPath))
	pf.StringVar(&f.ContextName, "context", f.ContextName, fmt.Sprintf("context in the config file (env %s; default its current-context)", cmdutil.EnvContext))
	pf.VarP(&f.Output, "output", "o", fmt.Sprintf("output format: %s (env %s)", strings.Join(printer.FormatNames(), ", "), cmdutil.EnvOutput))

	_ = root.MarkPersistentFlagFilename("config", "yaml", "yml")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(printer.FormatNames(), cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("context", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return f.ContextNames(), cobra.ShellCompDirectiveNoFileComp
	})

	root.AddCommand(lock.NewCmdLock(f, nil))
	root.AddCommand(inspect.NewCmdInspect(f, nil))
	root.AddCommand(history.NewCmdHistory(f, nil))
	root.AddCommand(unprotected.NewCmdUnprotected(f, nil))
	root.AddCommand(sessions.NewCmdSessions(f, nil))
	root.AddCommand(clusters.NewCmdClusters(f, nil))
	root.AddCommand(epoch.NewCmdEpoch(f))
	root.AddCommand(shards.NewCmdShards(f))
	root.AddCommand(forcerelease.NewCmdForceRelease(f))
	root.AddCommand(top.NewCmdTop(f, nil))
	root.AddCommand(login.NewCmdLogin(f, nil))
	root.AddCommand(register.NewCmdRegister(f, nil))
	root.AddCommand(fencetest.NewCmdFenceTest(f, nil))
	return root
}
