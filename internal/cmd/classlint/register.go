package classlint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/audit/clickhouse"
	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cost"
	"github.com/lockd-dev/lockd/internal/riskregister"
)

// RegisterOptions are the options of class-lint register.
type RegisterOptions struct {
	// Dir is the class directory.
	Dir string
	// Prometheus, when set, adds the grants of the last 24 hours.
	Prometheus string
	// HistoryClickHouse, when set, adds them from the audit history in
	// ClickHouse instead (clickhouse://host:port/database).
	HistoryClickHouse string
	// Output is table, markdown, csv or json.
	Output string
	// Now is the clock days left are counted from.
	Now func() time.Time
	// Out receives the register.
	Out io.Writer
	// ErrOut receives the notes of the csv output, which has no place
	// for them.
	ErrOut io.Writer
}

func newRegisterCmd(stdout io.Writer) *cobra.Command {
	opts := RegisterOptions{Dir: "classes", Output: "table", Now: time.Now, Out: stdout}
	cmd := &cobra.Command{
		Use:   "register [dir] [--prometheus URL | --history-clickhouse URL] [-o table|markdown|csv|json]",
		Short: "List the advisory risk register: advisory classes, risk owners and waivers",
		Long: `Register lists every advisory class of the class directory (default ./classes):
classes whose resource does not check fencing tokens, so a paused holder can
overlap the next one. For each it shows the risk owner, the waiver's expiry
date, the days left (negative once lapsed) and a status: ok, expiring (within
30 days), expired, or missing (no waiver). Classes lockd would refuse, such as
one with a lapsed waiver, are listed all the same. The most urgent come first.

With --prometheus it adds the holds granted in the last 24 hours
(increase of lockd_grants_total). With --history-clickhouse it counts them in
the audit history instead (docs/audit.md): every grant the tailer recorded,
across lockd restarts and arbiters, as the nightly register does.

Exit status: 0 listed, 2 usage error or a directory that cannot be read, 69
Prometheus or ClickHouse unreachable (refused, no such host, timed out or a 5xx).`,
		Example: `  class-lint register
  class-lint register ./classes --prometheus http://prometheus:9090 -o markdown
  class-lint register --history-clickhouse clickhouse://clickhouse:9000/lockd_audit -o json
  class-lint register -o csv > register.csv`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Dir = args[0]
			}
			opts.ErrOut = cmd.ErrOrStderr()
			return registerRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Prometheus, "prometheus", "", "URL of the Prometheus server that scrapes lockd, to add grants in the last 24h")
	f.StringVar(&opts.HistoryClickHouse, "history-clickhouse", "", "the audit history's ClickHouse (clickhouse://host:9000/db), to add grants in the last 24h from it")
	f.Var(&nowFlag{now: &opts.Now}, "now", "count days from this RFC 3339 time instead of the clock (for reproducible reports)")
	f.StringVarP(&opts.Output, "output", "o", opts.Output, "output format: table, markdown, csv or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "markdown", "csv", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// registerRun builds the register and prints it. Its errors exit 2 (Main's
// classify), except an unreachable Prometheus (69).
func registerRun(ctx context.Context, opts RegisterOptions) error {
	switch opts.Output {
	case "table", "markdown", "csv", "json":
	default:
		return cli.Usagef("-o must be table, markdown, csv or json, got %q", opts.Output)
	}
	if opts.Prometheus != "" && opts.HistoryClickHouse != "" {
		return cli.Usagef("--prometheus and --history-clickhouse both count grants: give one")
	}
	reg, err := riskregister.Load(opts.Dir, opts.Now())
	if err != nil {
		return err
	}
	if opts.HistoryClickHouse != "" {
		counts, err := historyGrants(ctx, opts.HistoryClickHouse, opts.Now())
		if err != nil {
			return err
		}
		reg.SetGrants(counts)
	}
	if opts.Prometheus != "" {
		p, err := cost.NewPrometheus(opts.Prometheus)
		if err != nil {
			return err
		}
		counts, err := p.Grants(ctx)
		if err != nil {
			return err
		}
		byClass := make(map[riskregister.Key]float64, len(counts))
		for k, v := range counts {
			byClass[riskregister.Key{Namespace: k.Namespace, Class: k.Class}] = v
		}
		reg.SetGrants(byClass)
	}
	switch opts.Output {
	case "markdown":
		_, err = io.WriteString(opts.Out, reg.Markdown())
	case "csv":
		if err = reg.WriteCSV(opts.Out); err == nil && opts.ErrOut != nil {
			for _, n := range reg.Notes {
				fmt.Fprintln(opts.ErrOut, "class-lint register:", n)
			}
		}
	case "json":
		err = reg.WriteJSON(opts.Out)
	default:
		err = reg.WriteTable(opts.Out)
	}
	return err
}

// ErrHistoryUnreachable: the audit history's ClickHouse did not answer.
var ErrHistoryUnreachable = errors.New("class-lint: the audit history is unreachable")

// historyGrants counts each class's grants of the 24 hours before now in
// the audit history.
func historyGrants(ctx context.Context, url string, now time.Time) (map[riskregister.Key]float64, error) {
	sink, err := clickhouse.Open(ctx, url)
	if err != nil {
		if errors.Is(err, audit.ErrConfig) {
			return nil, cli.Usagef("--history-clickhouse: %v", err)
		}
		return nil, fmt.Errorf("%w: %w", ErrHistoryUnreachable, err)
	}
	defer sink.Close()
	stats, err := sink.Stats(ctx, now.Add(-24*time.Hour), now)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHistoryUnreachable, err)
	}
	out := make(map[riskregister.Key]float64, len(stats))
	for _, s := range stats {
		ns, name, _ := strings.Cut(s.Class, "/")
		out[riskregister.Key{Namespace: ns, Class: name}] = float64(s.Grants)
	}
	return out, nil
}
