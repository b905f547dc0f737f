package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
)

const usage = `bench: lockd side by side with a raw etcd Txn lock, etcd's concurrency.Mutex
and Redis redsync (no fencing), against ONE etcd in the same run, plus
renewal at the seed's scale (40,000 sessions, 250,000 holds). Prints a
table, writes result.json, charts and lockd profiles to --out.

Examples:
  # The full run (about 15 minutes): both modes, every scenario, renewal at scale
  go run ./ci/bench

  # Only the embedded default, 10 s per system, no renewal
  go run ./ci/bench --mode embedded --duration 10s --renewal-sessions 0

  # lockd without group commit (run it and the default in ABBA order to compare)
  go run ./ci/bench --renewal-sessions 0 --systems raw,lockd --lockd-args=--max-batch=1

  # Another build of lockd (e.g. the parent commit's), to compare runs in ABBA order
  go run ./ci/bench --mode external --scenarios uncontended-w64 --systems raw,lockd --renewal-sessions 0 --lockd-bin /tmp/lockd-parent

  # CI's smoke run (seconds)
  go run ./ci/bench --smoke

  # Render a finished run again (table, report.md, charts)
  go run ./ci/bench --render bench-results/full

Flags:
`

// Main parses args and runs the benchmark; it returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	o := Options{Log: stdout}
	mode := fs.String("mode", "both", "etcd: embedded (lockd's default, etcd in lockd's process), external (etcd as its own process), or both")
	scen := fs.String("scenarios", strings.Join(AllScenarios, ","), "scenarios, comma-separated")
	systems := fs.String("systems", strings.Join(AllSystems, ","), "systems, comma-separated")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "how long each system runs in each scenario, in two passes of opposite order")
	fs.StringVar(&o.Out, "out", "", "output folder (default bench-results/<time>)")
	fs.BoolVar(&o.Profile, "profile", true, "take lockd's CPU and allocation profiles, and the load generator's CPU profile, during one scenario's lockd run")
	fs.StringVar(&o.ProfileScenario, "profile-scenario", "uncontended-w64", "the scenario to profile")
	fs.IntVar(&o.RenewalSessions, "renewal-sessions", 40000, "sessions for the renewal run (0 skips it)")
	fs.IntVar(&o.RenewalHolds, "renewal-holds", 250000, "holds for the renewal run")
	fs.DurationVar(&o.RenewalSteady, "renewal-steady", 2*time.Minute, "how long the renewal run keeps every hold alive")
	fs.StringVar(&o.LockdBin, "lockd-bin", "", "a lockd binary to run instead of building this tree's (compare two builds in runs of ABBA order)")
	lockdArgs := fs.String("lockd-args", "", "more lockd flags for the scenarios' runs, space-separated (e.g. --max-batch=1: without group commit)")
	smoke := fs.Bool("smoke", false, "a run of seconds, to keep the command from rotting (CI)")
	render := fs.String("render", "", "render the table, report.md and charts again from a finished run's folder, without running anything")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	switch *mode {
	case "both":
		o.Modes = []string{rig.Embedded, rig.External}
	case rig.Embedded, rig.External:
		o.Modes = []string{*mode}
	default:
		fmt.Fprintf(stderr, "bench: --mode must be embedded, external or both, got %q\n", *mode)
		return 2
	}
	o.LockdArgs = strings.Fields(*lockdArgs)
	o.Scenarios = strings.Split(*scen, ",")
	o.Systems = strings.Split(*systems, ",")
	if *smoke {
		o.Modes = []string{rig.Embedded}
		o.Duration = time.Second
		o.Scenarios = []string{"uncontended-w64", "contended-w64"} // uncontended-w64: the tailer and tracing comparisons run too
		o.RenewalSessions, o.RenewalHolds, o.RenewalSteady = 200, 1000, 5*time.Second
	}
	for _, s := range o.Scenarios {
		if _, err := scenarioNamed(s); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	for _, s := range o.Systems {
		if !slices.Contains(AllSystems, s) {
			fmt.Fprintf(stderr, "bench: unknown system %q; systems: %s\n", s, strings.Join(AllSystems, ","))
			return 2
		}
	}
	if o.Duration <= 0 {
		fmt.Fprintln(stderr, "bench: --duration must be positive")
		return 2
	}
	if o.Out == "" {
		o.Out = filepath.Join("bench-results", time.Now().Format("20060102-150405"))
	}
	if *render != "" {
		runs, err := Load(*render)
		if err == nil {
			err = Report(stdout, *render, runs)
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runs, err := Run(ctx, o)
	if rerr := Report(stdout, o.Out, runs); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	for _, run := range runs {
		for _, sc := range run.Scenarios {
			for _, s := range sc.Systems {
				if s.Skipped == "" && s.Grants == 0 {
					fmt.Fprintf(stderr, "bench: %s %s %s made no grant\n", run.Mode, sc.Name, s.Name)
					return 1
				}
			}
		}
		if r := run.Renewal; r != nil && r.FalseExpiries > 0 {
			fmt.Fprintf(stderr, "bench: renewal: %d false expiries\n", r.FalseExpiries)
			return 1
		}
	}
	return 0
}
