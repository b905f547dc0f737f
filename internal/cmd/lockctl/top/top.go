// Package top is `lockctl top`: contention at a glance, per namespace and
// class, with a drill-down to the hottest keys, the way k9s shows a
// cluster.
package top

import (
	"context"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
)

// Options are `lockctl top`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Now     func() time.Time

	Prefix   string
	Filter   string
	Sort     string
	Interval time.Duration
	Once     bool
	Limit    int
	Group    string
}

// Groupings of the table.
const (
	GroupClass = "class"
	GroupShard = "shard"
)

// NewCmdTop returns `lockctl top`.
func NewCmdTop(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Now: f.Now}
	cmd := &cobra.Command{
		Use:   "top [--prefix <ns/>] [--filter <text>] [--sort contention|holds|name] [--group class|shard] [--once]",
		Short: "Contention at a glance: holds, waiters and the hottest keys per class",
		Long: cmdutil.Doc(`
			Show, per namespace and class you may see:
			- the holds, and the waiters queued behind them;
			- the share of holds anyone waits for, and the longest hold;
			- and, from the lockd you are connected to since it started, the grants,
			  their p99 latency and the sessions that expired without release.

			With no --prefix, every namespace you may see is listed.

			When lockd fronts several etcd clusters (entity shards), --group shard (or
			tab in the console) groups the same holds by the cluster they are on
			instead: a shard with waiters piling up, or sealed, stands out; enter
			opens its hottest keys. A class's keys then say their shard.

			On a terminal it is a console: up/down (j/k) move, / filters as you type,
			s cycles the sort, enter opens a class's hottest keys and then a key (its
			holder, the session's time left counting down, the waiters in order), esc
			goes back, f on a key requests a force-release, ? lists every key, q quits.
			The class under the cursor shows sparklines of grants/s, grant p99 and
			waiters over the last 60 refreshes. Red is contention, yellow a session
			expiring soon; banners say when lockd is sealed, in epoch grace or
			unreachable, or has made unprotected grants (without an etcd quorum),
			and the last good data stays on screen. NO_COLOR turns colour off.

			The figures come from lockd's hold listing, the same as "lockctl inspect",
			not from metrics. Waiters are counted on the lockd you are connected to.

			--once prints one snapshot as a table (or -o json|yaml) for scripts. It is
			also what you get when stdout is not a terminal.
		`),
		Example: cmdutil.Example(`
			$ lockctl top
			$ lockctl top --prefix payments/ --sort holds
			$ lockctl top --once -o json | jq '.classes[] | select(.waiters > 0)'
			$ lockctl top --once --group shard
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch opts.Sort {
			case SortContention, SortHolds, SortName:
			default:
				return cli.Usagef("--sort must be contention, holds or name, got %q", opts.Sort)
			}
			if opts.Group != GroupClass && opts.Group != GroupShard {
				return cli.Usagef("--group must be class or shard, got %q", opts.Group)
			}
			if opts.Interval < 500*time.Millisecond {
				return cli.Usagef("--interval must be at least 500ms, got %s", opts.Interval)
			}
			if runF != nil {
				return runF(opts)
			}
			return run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Prefix, "prefix", "", "only keys under this prefix (e.g. payments/)")
	cmd.Flags().StringVar(&opts.Filter, "filter", "", "only keys or classes containing this text")
	cmd.Flags().StringVar(&opts.Sort, "sort", SortContention, "order classes by contention, holds or name")
	cmd.Flags().DurationVar(&opts.Interval, "interval", 2*time.Second, "refresh interval")
	cmd.Flags().BoolVar(&opts.Once, "once", false, "print one snapshot and exit (for scripts)")
	cmd.Flags().IntVar(&opts.Limit, "limit", 10000, "at most this many holds are listed per refresh")
	cmd.Flags().StringVar(&opts.Group, "group", GroupClass, "group the table by class or by shard (the etcd cluster holds are on)")
	return cmd
}

func run(ctx context.Context, opts *Options) error {
	if opts.Once || !opts.IO.IsStdoutTTY() {
		return cmdutil.Call(ctx, opts.Client, 30*time.Second, func(ctx context.Context, c *client.Client) error {
			d, err := NewSource(c, opts.Prefix, opts.Limit).Fetch(ctx)
			if err != nil {
				return err
			}
			s := Build(opts.Now(), d, opts.Filter, opts.Sort, 10)
			if opts.Group == GroupShard {
				return opts.Printer().Print(ByShard{s})
			}
			return opts.Printer().Print(s)
		})
	}
	c, err := opts.Client()
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	m := newModel(NewSource(c, opts.Prefix, opts.Limit), opts.Now, opts.Interval, opts.Filter, opts.Sort,
		newStyles(opts.IO.ColorEnabled()))
	m.secrets = []string{cmdutil.Getenv(cmdutil.EnvOperatorToken)}
	m.byShard = opts.Group == GroupShard
	p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx), tea.WithInput(opts.IO.In), tea.WithOutput(opts.IO.Out))
	_, err = p.Run()
	return err
}
