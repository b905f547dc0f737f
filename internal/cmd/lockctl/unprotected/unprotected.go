// Package unprotected is `lockctl unprotected`: the grants lockd made
// without an etcd quorum in an outage window (token 0, for classes with
// onQuorumLoss: open), from the audit history: the list to reconcile.
package unprotected

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockkey"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Kind is the history's kind of an unprotected grant.
const Kind = "unprotected-grant"

// MaxPage is the most rows lockd returns for one History call.
const MaxPage = 10000

// shippedSlack is how long before --since the history is read: a grant is
// recorded when the tailer reads its shipment, by the tailer's clock, which
// can be behind the granting lockd's.
const shippedSlack = time.Minute

// maxCalls bounds the History calls of one run (see read).
const maxCalls = 2000

// ErrTooDense: more rows of the history were observed at one instant than
// lockd returns for one call, so the window cannot be split finer.
var ErrTooDense = errors.New("unprotected: too many history rows at one instant to list them all")

// Options are `lockctl unprotected`'s inputs.
type Options struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Now     func() time.Time
	Timeout time.Duration

	// Since and Until bound when the grants were made (the granting lockd's
	// clock): a duration before now ("2h") or an RFC 3339 time. Since is
	// required; Until defaults to now.
	Since, Until string
	// Namespace and Class ("namespace/name") narrow the listing.
	Namespace string
	Class     string
	// PageLimit is the rows asked for per History call (0 or more than
	// MaxPage: MaxPage); tests lower it to make lockd truncate.
	PageLimit int32
}

// NewCmdUnprotected returns `lockctl unprotected`.
func NewCmdUnprotected(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{Client: f.Client, Printer: f.Printer, Now: f.Now, Timeout: 2 * time.Minute}
	cmd := &cobra.Command{
		Use:   "unprotected --since <when> [--until <when>]",
		Short: "List the grants lockd made without an etcd quorum in an outage window",
		Long: cmdutil.Doc(`
			List the unprotected grants of an outage: while lockd has no etcd quorum,
			a class with onQuorumLoss: open is granted from lockd's memory, with
			token 0 (every fence rejects it), and another holder may hold the same
			key at the same time. lockd ships each such grant to etcd when quorum
			returns, and the audit history records it then. This is the list to
			reconcile: who held what, from which lockd (ARBITER, SEQ name the grant
			in its spool), and the revision it was shipped at (SHIPPED).

			--since (required) and --until bound when the grants were MADE, by the
			granting lockd's clock (--until defaults to now). The history's own
			times are when a grant was shipped, after quorum returned, so lockctl
			reads the history from --since on, without an end, and keeps the grants
			made in the window.

			Without --namespace or --class, every namespace with history since
			--since is read. Operators see every grant; others see the keys they
			may lock, and are told which namespaces they may not read. Gaps,
			revisions the history lost to compaction, are shown as notes: grants
			shipped in them are missing from the list. The audit history must be
			on (lockd --audit).

			On a terminal the times are relative; piped, or with -o json, they are
			exact (RFC 3339).
		`),
		Example: cmdutil.Example(`
			# The grants made during last night's outage
			$ lockctl unprotected --since 2026-12-01T02:00:00Z --until 2026-12-01T03:00:00Z

			# In the last two hours, one namespace, as JSON
			$ lockctl unprotected --since 2h --namespace payments -o json

			# One class
			$ lockctl unprotected --since 2h --class payments/ledger
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := opts.window(); err != nil {
				return err
			}
			if err := opts.validateScope(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return unprotectedRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Since, "since", "", "grants made at or after this (required): a duration before now (90m, 24h) or a time (RFC 3339)")
	fl.StringVar(&opts.Until, "until", "", "grants made before this (default now): a duration before now or a time (RFC 3339)")
	fl.StringVar(&opts.Namespace, "namespace", "", "only this namespace")
	fl.StringVar(&opts.Class, "class", "", "only this class (namespace/name)")
	return cmd
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// window is [since, until) of the grants, until defaulting to now.
func (o *Options) window() (since, until time.Time, err error) {
	now := o.now()
	if o.Since == "" {
		return since, until, cli.Usagef("--since is required: when the outage began, a duration before now (2h) or an RFC 3339 time")
	}
	if since, err = cmdutil.ParseWhen(o.Since, now); err != nil {
		return since, until, cli.Usagef("--since: %v", err)
	}
	if until, err = cmdutil.ParseWhen(o.Until, now); err != nil {
		return since, until, cli.Usagef("--until: %v", err)
	}
	if until.IsZero() {
		until = now
	}
	if !until.After(since) {
		return since, until, cli.Usagef("--until (%s) must be after --since (%s)", until.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
	}
	return since.UTC(), until.UTC(), nil
}

func (o *Options) validateScope() error {
	if o.Namespace != "" && !lockkey.IsDNSLabel(o.Namespace) {
		return cli.Usagef("--namespace %q: must be a DNS label ([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)", o.Namespace)
	}
	if o.Class == "" {
		return nil
	}
	ns, name, ok := strings.Cut(o.Class, "/")
	if !ok || name == "" || !lockkey.IsDNSLabel(ns) {
		return cli.Usagef("--class %q: want namespace/name", o.Class)
	}
	if o.Namespace != "" && o.Namespace != ns {
		return cli.Usagef("--class %s is not in --namespace %s", o.Class, o.Namespace)
	}
	return nil
}

func unprotectedRun(ctx context.Context, opts *Options) error {
	since, until, err := opts.window()
	if err != nil {
		return err
	}
	from := since.Add(-shippedSlack)
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		svc := c.LockService()
		namespaces, err := opts.namespaces(ctx, svc, from)
		if err != nil {
			return err
		}
		r := &reader{svc: svc, class: opts.Class, page: opts.PageLimit, now: opts.now()}
		if r.page <= 0 || r.page > MaxPage {
			r.page = MaxPage
		}
		var rows []*lockv1.HistoryEvent
		var read, denied []string
		for _, ns := range namespaces {
			r.rows = nil
			err := r.read(ctx, ns+"/", from, time.Time{})
			if errors.Is(client.Decode(err), client.ErrDenied) && opts.Namespace == "" && opts.Class == "" {
				denied = append(denied, ns) // found, not asked for: said in a note
				continue
			}
			if err != nil {
				return err
			}
			read, rows = append(read, ns), append(rows, r.rows...)
		}
		return opts.Printer().Print(NewView(since, until, read, denied, rows))
	})
}

// namespaces are the namespaces to read: the one asked for, or every one
// with a class in the history observed since from.
func (o *Options) namespaces(ctx context.Context, svc lockv1.LockServiceClient, from time.Time) ([]string, error) {
	if o.Class != "" {
		ns, _, _ := strings.Cut(o.Class, "/")
		return []string{ns}, nil
	}
	if o.Namespace != "" {
		return []string{o.Namespace}, nil
	}
	stats, err := svc.HistoryStats(ctx, &lockv1.HistoryStatsRequest{Since: timestamppb.New(from)})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range stats.GetClasses() {
		if ns := c.GetNamespace(); ns != "" && !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out, nil
}

// reader reads every history row under a prefix in a window of observed
// times. History returns at most page rows, the first in the history's
// order (cluster, epoch, revision, key), which is not the order of observed
// times across clusters or epochs; so a truncated answer is not paged
// through but its window split in two and each half read again, until no
// answer is truncated.
type reader struct {
	svc   lockv1.LockServiceClient
	class string
	page  int32
	now   time.Time // where an open window is split
	calls int
	rows  []*lockv1.HistoryEvent
}

// read adds the rows under prefix observed in [lo, hi) (hi zero: no end).
func (r *reader) read(ctx context.Context, prefix string, lo, hi time.Time) error {
	if r.calls++; r.calls > maxCalls {
		return fmt.Errorf("%w: more than %d history calls for %s; narrow --since/--until or use --class", ErrTooDense, maxCalls, prefix)
	}
	// Only unprotected grants (and gaps, which always come); a lockd older
	// than kinds sends every row, and run keeps only these.
	req := &lockv1.HistoryRequest{Key: prefix, Class: r.class, Kinds: []string{Kind}, Since: timestamppb.New(lo), Limit: r.page}
	if !hi.IsZero() {
		req.Until = timestamppb.New(hi)
	}
	resp, err := r.svc.History(ctx, req)
	if err != nil {
		return err
	}
	if !resp.GetTruncated() {
		r.rows = append(r.rows, resp.GetEvents()...)
		return nil
	}
	var mid time.Time
	if hi.IsZero() {
		mid = lo.Add(max(r.now.Sub(lo)/2, time.Second))
	} else {
		mid = lo.Add(hi.Sub(lo) / 2)
		if !mid.After(lo) {
			return fmt.Errorf("%w: more than %d rows under %s observed at %s", ErrTooDense, r.page, prefix, lo.UTC().Format(time.RFC3339Nano))
		}
	}
	if err := r.read(ctx, prefix, lo, mid); err != nil {
		return err
	}
	return r.read(ctx, prefix, mid, hi)
}
