// Package fencetest is `lockctl fence-test`: the pause-test kit that shows
// whether a resource rejects a paused lock holder's stale write, and writes
// the PauseTestResult a fenced class needs.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	ossignal "os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/pausetest"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// ExitFailed is the exit code of a run the resource failed: no result was
// written.
const ExitFailed = 3

// exitInterrupted is the exit code after SIGINT or SIGTERM.
const exitInterrupted = 130

// EnvResource is the --resource URL from the environment, which keeps a
// database password out of the process list.
const EnvResource = "LOCKCTL_FENCE_RESOURCE"

// Options are `lockctl fence-test`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Printer func() *printer.Printer
	// Context returns the lockctl context every holder uses.
	Context func() (*clientconfig.Context, error)
	// Now is the clock for the result's ranAt.
	Now func() time.Time
	// Executable is the binary re-executed as the paused holder (this one
	// when empty).
	Executable string

	Class         string
	Key           string
	Resource      string
	Write         string
	Read          string
	Check         string
	ResourceName  string
	SchemaVersion string
	Out           string
	Margin        time.Duration
	// ToKubernetes writes the result to the cluster Kubeconfig (or
	// kubectl's, or the pod's) as well as, or instead of, a file.
	ToKubernetes bool
	Kubeconfig   string
}

// NewCmdFenceTest returns `lockctl fence-test`. runF, when set, replaces the
// run function (tests).
func NewCmdFenceTest(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Printer: f.Printer, Now: f.Now, Context: func() (*clientconfig.Context, error) {
		cfg, path, err := f.Config()
		if err != nil {
			return nil, err
		}
		cx, err := cfg.Context(f.ContextName)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return cx, nil
	}}
	cmd := &cobra.Command{
		Use:   "fence-test --class <class> --key <key> (--resource <url> | --write <cmd> --read <cmd> [--check <cmd>])",
		Short: "Run the pause test: does the resource reject a paused holder's stale write?",
		Long: cmdutil.Docf(`
			Run the pause test against the resource a class guards. A class may
			declare enforcement: fenced only with a passing result committed next to
			it (class-lint checks). Any class may be tested; the report shows the
			class's enforcement today.

			The test, with three holders of your identity (the current context):
			  1. holder C takes <key>-2 and keeps it: the oldest token;
			  2. holder A, a child process, takes <key>, writes (must be accepted)
			     and releases; takes <key> again and prepares a write (CanStart,
			     --check);
			  3. A is stopped (SIGSTOP) until lockd shows its hold ended (the class
			     TTL, plus --margin at most);
			  4. holder B takes <key> with a greater token and writes (accepted);
			     B's token is presented again (must be rejected: a fence that
			     compares with <= accepts it);
			  5. A is resumed and writes with its old token: must be rejected, and
			     the record must still hold B's value;
			  6. C writes its own record with its older token: must be accepted (a
			     fence kept per table rejects it).

			The resource: --resource tests a reference fence of pkg/fence:
			postgres://…?table=NAME, or s3://BUCKET?endpoint=HOST:PORT&secure=false
			with credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
			$%[1]s sets it without putting a password on the
			command line. --write, --read and --check test your own write path
			(docs/fencing.md): each runs under sh -c with
			  LOCK_KEY          the lock key, which names the record
			  LOCK_TOKEN        the token (write and check)
			  FENCE_TEST_VALUE  the value to write (write)
			--write exits 0 when the resource accepted the write and non-zero when it
			rejected it (its stderr goes into the report); --read prints the value
			the record holds; --check, if your write path checks the fence in a step
			of its own, runs when a holder decides to write (before the pause) and
			refuses with a non-zero exit. The test writes the records <key> and
			<key>-2: use test keys, on a copy of the resource at the same schema.

			On a PASS the result is written to --out (default
			./pausetest-<class>.yaml): commit it next to the class in the class
			repository. It records the class's spec.resource (from lockd, or
			--resource-name if the class names none yet) and --schema-version, which
			must equal the class's spec.resourceSchemaVersion for class-lint to count
			the result; it counts for a year. A PASS proves that this resource
			rejected this stale write under this pause; it cannot prove that every
			write path to the resource is fenced. The report and the result show the
			test's own tokens: they are evidence, and no longer capabilities once the
			test released its holds. On a FAIL nothing is written and the report says
			what went wrong.

			With --to-kubernetes a PASS creates the result in the cluster instead,
			as PauseTestResult <class> in the class's namespace (replacing an
			earlier run's), where the class controller (class-lint controller)
			reads it: a class declared fenced is marked fenced while the result
			matches its resource and schema version and has not expired. The file
			is then written only if --out is given. The cluster is --kubeconfig's, else $KUBECONFIG's or
			~/.kube/config's, else, in a pod (a Job), its service account's, which
			needs create, get and update on pausetestresults in that namespace.
			When the class repository is synced to the cluster (Argo CD), commit
			the file as well, so that the repository keeps the result.

			Output: -o table (the report, as text), -o json or -o yaml. Progress
			lines go to stderr on a terminal.

			Exit codes:
			  0   PASS: the result was written
			  3   FAIL: the resource failed the test; no result
			  77  permission denied: no grant for this identity, key and class, or
			      the API server refused the PauseTestResult (RBAC, admission)
			  69  lockd or its store is unavailable, or lockd is sealed, or the API
			      server cannot be reached (--to-kubernetes)
			  130 interrupted: holds released, the paused holder killed
			  2   usage error
			  1   any other error (the test could not run)
		`, EnvResource),
		Example: cmdutil.Example(`
			# The reference PostgreSQL fence (the table is created if missing)
			$ export LOCKCTL_FENCE_RESOURCE='postgres://ledger:…@db-staging:5432/ledger?table=ledger_fence_test'
			$ lockctl fence-test --class ledger-writes --key payments/ledger/fence-test --schema-version 3

			# Your own write path: write.sql ends in "… WHERE id = :'key' AND fence < :tok RETURNING 1"
			$ lockctl fence-test --class ledger-writes --key payments/ledger/fence-test --schema-version 3 \
			    --write 'psql "$LEDGER_DB" -X -q -tA -v ON_ERROR_STOP=1 -v key="$LOCK_KEY" -v tok="$LOCK_TOKEN" -v val="$FENCE_TEST_VALUE" -f write.sql | grep -qx 1' \
			    --read 'psql "$LEDGER_DB" -X -q -tA -v ON_ERROR_STOP=1 -v key="$LOCK_KEY" -f read.sql'

			# An S3 bucket on MinIO, the report as JSON for CI
			$ lockctl fence-test --class exports --key platform/exports/fence-test \
			    --resource 's3://exports?endpoint=minio.internal:9000&secure=false' -o json

			# In a Kubernetes Job: the result goes to the cluster, as PauseTestResult payments/ledger-writes
			$ lockctl fence-test --class ledger-writes --key payments/ledger/fence-test --schema-version 3 --to-kubernetes

			# From a workstation, to the cluster and to a file to commit
			$ lockctl fence-test --class ledger-writes --key payments/ledger/fence-test --schema-version 3 \
			    --to-kubernetes --kubeconfig ~/.kube/staging.yaml --out classes/payments/pausetest-ledger-writes.yaml
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("resource") && (opts.Write != "" || opts.Read != "" || opts.Check != "") {
				opts.Resource = "" // commands given: ignore $LOCKCTL_FENCE_RESOURCE
			}
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return fenceTestRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Class, "class", cmdutil.Getenv("LOCKCTL_CLASS"), "lock class, \"name\" in the key's namespace or \"namespace/name\" (required; env LOCKCTL_CLASS)")
	fl.StringVar(&opts.Key, "key", "", "a test key of the class; <key>-2 is used too (required)")
	fl.StringVar(&opts.Resource, "resource", cmdutil.Getenv(EnvResource), "a reference fence: postgres://…?table=NAME or s3://BUCKET?endpoint=HOST:PORT (env "+EnvResource+")")
	fl.StringVar(&opts.Write, "write", "", "your guarded write, run by sh -c: exit 0 = accepted, non-zero = rejected")
	fl.StringVar(&opts.Read, "read", "", "prints the value the record LOCK_KEY holds (with --write)")
	fl.StringVar(&opts.Check, "check", "", "your separate fence check, run when a holder decides to write (with --write)")
	fl.StringVar(&opts.ResourceName, "resource-name", "", "the class's spec.resource, if lockd does not know it yet")
	fl.StringVar(&opts.SchemaVersion, "schema-version", "", "the resource's schema version: must equal the class's spec.resourceSchemaVersion")
	fl.StringVar(&opts.Out, "out", "", "where to write the result on a PASS (default ./pausetest-<class>.yaml)")
	fl.DurationVar(&opts.Margin, "margin", pausetest.DefaultMargin, "how long past the class TTL to wait for the paused holder's hold to end")
	fl.BoolVar(&opts.ToKubernetes, "to-kubernetes", false, "on a PASS, create the PauseTestResult in the class's namespace of the cluster (the file only with --out)")
	fl.StringVar(&opts.Kubeconfig, "kubeconfig", "", "the cluster for --to-kubernetes (default: $KUBECONFIG, ~/.kube/config, or the pod's service account)")
	_ = cmd.MarkFlagFilename("out", "yaml", "yml")
	_ = cmd.MarkFlagFilename("kubeconfig")
	return cmd
}

func (o *Options) validate() error {
	cmds := o.Write != "" || o.Read != "" || o.Check != ""
	switch {
	case o.Class == "":
		return cli.Usagef("--class is required: the lock class to test (see classes/<namespace>/)")
	case o.Key == "":
		return cli.Usagef("--key is required: a test key of the class; the test writes its record and that of <key>-2")
	case o.Resource != "" && cmds:
		return cli.Usagef("--resource and --write/--read/--check exclude each other: test a reference fence by URL, or your own write path by commands")
	case o.Resource == "" && !cmds:
		return cli.Usagef("no resource: give --resource <url> (postgres://…, s3://…) or --write and --read commands")
	case o.Resource == "" && o.Write == "":
		return cli.Usagef("--write is required with --read and --check: the guarded write under test")
	case o.Resource == "" && o.Read == "":
		return cli.Usagef("--read is required with --write: the test reads the record back")
	case o.Margin < 0:
		return cli.Usagef("--margin must not be negative")
	case o.Kubeconfig != "" && !o.ToKubernetes:
		return cli.Usagef("--kubeconfig names the cluster for --to-kubernetes: add --to-kubernetes to write the result there")
	}
	return nil
}

func fenceTestRun(ctx context.Context, opts *Options) error {
	cx, err := opts.Context()
	if err != nil {
		return err
	}
	// The cluster's configuration is loaded before the test runs, so a
	// broken one does not cost a run.
	var (
		kube     dynamic.Interface
		kubeHost string
	)
	if opts.ToKubernetes {
		cfg, err := KubeConfig(opts.Kubeconfig)
		if err != nil {
			return err
		}
		if kube, err = dynamic.NewForConfig(cfg); err != nil {
			return cli.Usage(fmt.Errorf("--to-kubernetes: %w", err))
		}
		kubeHost = cfg.Host
	}
	ctx, stop := ossignal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var progress io.Writer
	if opts.IO.IsStderrTTY() {
		progress = opts.IO.ErrOut
	}
	rep, err := pausetest.Run(ctx, pausetest.Config{
		Context: cx, Key: opts.Key, Class: opts.Class,
		Resource:     pausetest.Spec{URL: opts.Resource, Write: opts.Write, Read: opts.Read, Check: opts.Check},
		ResourceName: opts.ResourceName, SchemaVersion: opts.SchemaVersion,
		Now: opts.Now, Progress: progress, Executable: opts.Executable, Margin: opts.Margin,
	})
	if err != nil {
		code := cmdutil.ExitCodeFor(err)
		if errors.Is(err, context.Canceled) {
			code = exitInterrupted
		}
		return &cli.ExitError{Code: code, Err: errors.New(cmdutil.Describe(err, cx.Server))}
	}
	view := &ReportView{Report: *rep}
	toFile := !opts.ToKubernetes || opts.Out != ""
	path := opts.Out
	if path == "" {
		path = pausetest.Result{Class: rep.Class.Name}.FileName()
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	var writeErr, kubeErr error
	if res, ok := rep.Result(); ok {
		if toFile {
			if writeErr = os.WriteFile(path, res.YAML(), 0o644); writeErr == nil {
				view.ResultFile = path
			}
		}
		if kube != nil {
			var created bool
			if created, kubeErr = WriteResult(ctx, kube, res); kubeErr == nil {
				view.ResultObject, view.ResultCreated, view.ResultCluster = res.Namespace+"/"+res.Class, created, kubeHost
			}
		}
	} else if _, err := os.Stat(path); err == nil && toFile {
		view.EarlierResult = path
	}
	if err := opts.Printer().Print(view); err != nil {
		return err
	}
	switch {
	case writeErr != nil:
		return fmt.Errorf("the test passed, but the result could not be written: %w", writeErr)
	case kubeErr != nil:
		return &cli.ExitError{Code: kubeExitCode(kubeErr),
			Err: fmt.Errorf("the test passed, but the result could not be written to the cluster at %s: %w", kubeHost, kubeErr)}
	case !rep.Passed():
		return &cli.ExitError{Code: ExitFailed, Silent: true}
	}
	return nil
}
