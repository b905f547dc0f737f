// Package history is `lockctl history`: who held a key (or every key under
// a prefix) and how each hold ended, from the audit history.
package history

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl history`'s inputs.
type Options struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Now     func() time.Time
	Timeout time.Duration

	// Target is a key, or a prefix when it ends in "/".
	Target string
	// Since and Until are a duration before now ("2h") or a time (RFC 3339).
	Since, Until string
	Identity     string
	Class        string
	Limit        int32
}

// NewCmdHistory returns `lockctl history`.
func NewCmdHistory(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{Client: f.Client, Printer: f.Printer, Now: f.Now, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "history <key | prefix/>",
		Short: "Show who held a key and how each hold ended",
		Long: cmdutil.Doc(`
			Show each hold of a key as the audit history recorded it: holder,
			session, class, when it started and ended, how it ended and how long it
			lasted. Ends are: released, handed off (released to the next waiter in
			one transaction), expired (the session lapsed: nobody released it),
			session closed (the holder ended its session), forced (two operators,
			with the reason), epoch advance (an advance deleted every hold). A hold
			still held has no end. Gaps, revisions the history lost to compaction,
			are shown as notes. An unprotected grant, one lockd made without an etcd
			quorum (token 0, for a class with onQuorumLoss: open), is shown as a
			hold marked unprotected, with a note; its end is not recorded.
			"lockctl unprotected" lists those of an outage. When lockd fronts entity
			shards, a move of the key's range to another shard (drained, served on
			the new shard, or failed) is a note with the plan, its two operators and
			why: tokens after it carry the new shard's higher epoch.

			An argument ending in "/" is a prefix: every key under it. Operators see
			fencing tokens; others see keys they may lock, without tokens.

			Times are when lockd's audit tailer read the change (etcd keeps no commit
			times): late by the tailer's lag, normally under a second. Denials are
			not in the history.
		`),
		Example: cmdutil.Example(`
			# Who held this key in the last two hours, and how did each hold end?
			$ lockctl history payments/ledger/42 --since 2h

			# Around an incident, as JSON
			$ lockctl history payments/ledger/42 --since 2026-12-01T02:00:00Z --until 2026-12-01T02:30:00Z -o json

			# One identity's holds under a prefix
			$ lockctl history payments/ --identity spiffe://example.org/payments/migrator
		`),
		Args: cmdutil.ExactArgs(1, "<key | prefix/>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Target = args[0]
			if opts.Limit < 0 {
				return cli.Usagef("--limit must not be negative")
			}
			if _, err := cmdutil.ParseWhen(opts.Since, opts.now()); err != nil {
				return cli.Usagef("--since: %v", err)
			}
			if _, err := cmdutil.ParseWhen(opts.Until, opts.now()); err != nil {
				return cli.Usagef("--until: %v", err)
			}
			if runF != nil {
				return runF(opts)
			}
			return historyRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Since, "since", "", "only changes at or after this: a duration before now (90m, 24h) or a time (RFC 3339)")
	fl.StringVar(&opts.Until, "until", "", "only changes before this: a duration before now or a time (RFC 3339)")
	fl.StringVar(&opts.Identity, "identity", "", "only holds of this SPIFFE ID")
	fl.StringVar(&opts.Class, "class", "", "only holds of this class (namespace/name)")
	fl.Int32Var(&opts.Limit, "limit", 0, "read at most this many history rows (default: lockd's, 1000)")
	return cmd
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func historyRun(ctx context.Context, opts *Options) error {
	now := opts.now()
	since, _ := cmdutil.ParseWhen(opts.Since, now)
	until, _ := cmdutil.ParseWhen(opts.Until, now)
	req := &lockv1.HistoryRequest{Key: opts.Target, Identity: opts.Identity, Class: opts.Class, Limit: opts.Limit}
	if !since.IsZero() {
		req.Since = timestamppb.New(since)
	}
	if !until.IsZero() {
		req.Until = timestamppb.New(until)
	}
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		resp, err := c.LockService().History(ctx, req)
		if err != nil {
			return err
		}
		return opts.Printer().Print(NewView(opts.Target, resp, strings.HasSuffix(opts.Target, "/")))
	})
}
