package classlint

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cost"
)

// CostOptions are the options of class-lint cost.
type CostOptions struct {
	// Dir is the class directory, inside a git work tree.
	Dir string
	// Base is the git ref to compare with ("" for origin/main with
	// fallbacks).
	Base string
	// Prometheus is the URL of the Prometheus server that scrapes lockd.
	Prometheus string
	// Output is text, json or markdown.
	Output string
	// Out receives the report.
	Out io.Writer
}

func newCostCmd(stdout io.Writer) *cobra.Command {
	opts := CostOptions{Dir: "classes", Output: "text", Out: stdout}
	cmd := &cobra.Command{
		Use:   "cost --prometheus URL [--base REF] [--dir DIR] [-o text|json|markdown]",
		Short: "Price the renewal cost of class changes from Prometheus",
		Long: `Cost compares the class directory in the work tree with the same directory at a
git ref (default origin/main, or main, or HEAD when that is missing; the merge
base with HEAD is used) and, for every class added (+), removed (−) or changed
(~), prices it with the load Prometheus reports now:

  keepalives/s     sessions × 1/(TTL/3): lockd's client renews every TTL/3
  liveness bound   TTL + 2s: how long a holder that died can keep the next one waiting
  durable writes/s up to 2 consensus writes per waiter × the waiter rate (fairness
                   durable): 1 to join the line, 1 more to leave it without the key

and flags advisory classes with a TTL under 60s. Sessions come from
lockd_sessions (by the namespace of the identity); a namespace Prometheus has no
data for is priced at zero and named in the output. Classes that break a rule
(a lapsed waiver) are priced all the same.

It also lists the rehomes: for every prefix a class owns (spec.keys) at the base
or in the work tree, the keys whose class (the class owning their longest
prefix) moves to another tier, turns from closed to open on quorum loss, or is
no more. A change of class applies to each key from its next grant; a hold made
before keeps its class, and cluster, until it ends.

Exit status: 0 priced, 2 usage error or git error, 69 Prometheus unreachable
(refused, no such host, timed out or a 5xx).`,
		Example: `  class-lint cost --prometheus http://prometheus:9090
  class-lint cost --prometheus http://prometheus:9090 --base origin/release-1.2 -o markdown
  class-lint cost --prometheus http://prometheus:9090 -o json | jq '.changes[] | {class, after}'
  class-lint cost --prometheus http://prometheus:9090 -o json | jq '.rehomes[].messages[]'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("base") {
				opts.Base = "" // the default, with its fallbacks
			}
			return costRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Prometheus, "prometheus", "", "URL of the Prometheus server that scrapes lockd (required), e.g. http://prometheus:9090")
	f.StringVar(&opts.Base, "base", cost.DefaultBase, "git ref to compare with; when the default is missing, main and then HEAD are used")
	f.StringVar(&opts.Dir, "dir", opts.Dir, "class directory, inside a git work tree")
	f.StringVarP(&opts.Output, "output", "o", opts.Output, "output format: text, json or markdown")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json", "markdown"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// costRun prices the changes and prints them. Its errors exit 2 (Main's
// classify), except an unreachable Prometheus (69).
func costRun(ctx context.Context, opts CostOptions) error {
	switch opts.Output {
	case "text", "json", "markdown":
	default:
		return cli.Usagef("-o must be text, json or markdown, got %q", opts.Output)
	}
	if opts.Prometheus == "" {
		return cli.Usagef("--prometheus is required: the URL of the Prometheus server that scrapes lockd, e.g. http://prometheus:9090")
	}
	rep, err := cost.Compare(ctx, cost.Options{Dir: opts.Dir, Base: opts.Base, Prometheus: opts.Prometheus})
	if err != nil {
		return err
	}
	switch opts.Output {
	case "json":
		return rep.WriteJSON(opts.Out)
	case "markdown":
		_, err := io.WriteString(opts.Out, rep.Markdown())
		return err
	default:
		return rep.WriteText(opts.Out)
	}
}
