// Package shards is `lockctl shards`: the entity tier's shard map, each
// shard's load, and the plans that move ranges between shards.
package shards

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// NewCmdShards returns `lockctl shards`.
func NewCmdShards(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards <command>",
		Short: "Show the entity shards and move ranges between them (operators)",
		Long: cmdutil.Doc(`
			When several etcd clusters serve the entity tier (its shards), each
			entity key is homed to one by the shard map on the coord cluster. "status"
			shows the map, each shard's load and the move plans; "plan" proposes a
			change of the map and previews what it moves; "move" approves a plan (a
			second operator) and follows it until it is done.
		`),
		Example: cmdutil.Example(`
			$ lockctl shards status
			$ lockctl shards plan --add entity-3 --reason "entity-1 is at 80% of its write budget (CAP-12)"
			$ lockctl shards move 20261205-180501-a1b2c3    # as another operator
		`),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(NewCmdStatus(f, nil), NewCmdPlan(f, nil), NewCmdMove(f, nil))
	return cmd
}

// StatusOptions are `lockctl shards status`' inputs.
type StatusOptions struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration
}

// NewCmdStatus returns `lockctl shards status`.
func NewCmdStatus(f *cmdutil.Factory, runF func(*StatusOptions) error) *cobra.Command {
	opts := &StatusOptions{Client: f.Client, Printer: f.Printer, Timeout: 10 * time.Second}
	return &cobra.Command{
		Use:   "status",
		Short: "Show the shard map, each shard's load and the move plans",
		Long: cmdutil.Doc(`
			Show the shard map lockd routes entity keys by (version 0 is the implicit
			map: every entity key on the first shard), each shard's weight, epoch,
			sessions, holds and this lockd's grants per second over the last
			minute, and every move plan with its state. A plan that is "blocked"
			says what to do; it goes on by itself once that is done.
		`),
		Example: cmdutil.Example(`
			$ lockctl shards status
			# The plans not yet done, for a script
			$ lockctl shards status -o json | jq '.plans[] | select(.state != "done")'
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return cmdutil.Call(cmd.Context(), opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
				resp, err := c.AdminService().ShardStatus(ctx, &lockv1.ShardStatusRequest{})
				if err != nil {
					return err
				}
				return opts.Printer().Print(NewStatusView(resp))
			})
		},
	}
}

// ShardView is one shard.
type ShardView struct {
	Name            string  `json:"name"`
	Weight          float64 `json:"weight"`
	Epoch           uint32  `json:"epoch"`
	Sessions        int64   `json:"sessions"`
	Holds           int64   `json:"holds"`
	GrantsPerSecond float64 `json:"grants_per_second"`
	Error           string  `json:"error,omitempty"`
}

// StatusView is `lockctl shards status`.
type StatusView struct {
	Version int64       `json:"version"`
	Map     string      `json:"map"`
	Shards  []ShardView `json:"shards"`
	Plans   []*PlanView `json:"plans"`
}

// NewStatusView converts a ShardStatusResponse.
func NewStatusView(r *lockv1.ShardStatusResponse) *StatusView {
	v := &StatusView{Version: r.GetVersion(), Map: r.GetMapJson(), Shards: []ShardView{}, Plans: []*PlanView{}}
	for _, s := range r.GetShards() {
		v.Shards = append(v.Shards, ShardView{Name: s.GetName(), Weight: s.GetWeight(), Epoch: s.GetEpoch(), Sessions: s.GetSessions(),
			Holds: s.GetHolds(), GrantsPerSecond: s.GetGrantsPerSecond(), Error: s.GetError()})
	}
	for _, p := range r.GetPlans() {
		v.Plans = append(v.Plans, NewPlanView(p))
	}
	return v
}

// WriteTable implements printer.Tabular.
func (v *StatusView) WriteTable(t *printer.Table) {
	t.Field("Map version", printer.Cell{Text: strconv.FormatInt(v.Version, 10)})
	for _, s := range v.Shards {
		if s.Error != "" {
			t.Field("Shard "+s.Name, printer.Cell{Text: "unreachable: " + s.Error, Style: printer.Red})
			continue
		}
		weight := "not in the map"
		if s.Weight > 0 {
			weight = "weight " + strconv.FormatFloat(s.Weight, 'g', -1, 64)
		}
		t.Field("Shard "+s.Name, printer.Cell{Text: fmt.Sprintf("%s, epoch %d, %d sessions, %d holds, %.1f grants/s",
			weight, s.Epoch, s.Sessions, s.Holds, s.GrantsPerSecond)})
	}
	for _, p := range v.Plans {
		t.Field("Plan "+p.ID, p.summary())
	}
}

// PlanView is a move plan.
type PlanView struct {
	ID            string     `json:"id"`
	From          int64      `json:"from_version"`
	Map           string     `json:"map"`
	State         string     `json:"state"`
	Requester     string     `json:"requester"`
	Approver      string     `json:"approver,omitempty"`
	Reason        string     `json:"reason"`
	Moves         []MoveView `json:"moves"`
	Stragglers    []MoveView `json:"stragglers,omitempty"`
	Remaining     int32      `json:"remaining"`
	ExpectedDrain float64    `json:"expected_drain_seconds"`
	Blocked       string     `json:"blocked,omitempty"`
	Error         string     `json:"error,omitempty"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

// MoveView is one range changing shard.
type MoveView struct {
	Range string `json:"range"`
	From  string `json:"from"`
	To    string `json:"to"`
	Live  int32  `json:"live"`
}

// NewPlanView converts a ShardPlan.
func NewPlanView(p *lockv1.ShardPlan) *PlanView {
	v := &PlanView{ID: p.GetId(), From: p.GetFromVersion(), Map: p.GetMapJson(), State: p.GetState(), Requester: p.GetRequester(),
		Approver: p.GetApprover(), Reason: p.GetReason(), Moves: []MoveView{}, Remaining: p.GetRemaining(),
		ExpectedDrain: cmdutil.Seconds(p.GetExpectedDrain()), Blocked: p.GetBlocked(), Error: p.GetError(),
		UpdatedAt: cmdutil.Time(p.GetUpdatedAt())}
	conv := func(ms []*lockv1.RangeMove) (out []MoveView) {
		for _, m := range ms {
			out = append(out, MoveView{Range: m.GetRange(), From: m.GetFrom(), To: m.GetTo(), Live: m.GetLive()})
		}
		return out
	}
	v.Moves, v.Stragglers = append(v.Moves, conv(p.GetMoves())...), conv(p.GetStragglers())
	return v
}

// summary is the plan on one line.
func (v *PlanView) summary() printer.Cell {
	text := fmt.Sprintf("%s, version %d to %d", v.State, v.From, v.From+1)
	style := printer.Style(0)
	switch {
	case v.Error != "":
		text, style = text+": "+v.Error, printer.Red
	case v.Blocked != "":
		text, style = text+", blocked: "+v.Blocked, printer.Yellow
	case v.State == "draining" || v.State == "settling":
		text += fmt.Sprintf(", %d holds and waiters left", v.Remaining)
	}
	return printer.Cell{Text: text, Style: style}
}

// WriteTable implements printer.Tabular.
func (v *PlanView) WriteTable(t *printer.Table) {
	t.Field("Plan", printer.Cell{Text: v.ID})
	t.Field("State", v.summary())
	t.Field("Requester", printer.Cell{Text: v.Requester})
	if v.Approver != "" {
		t.Field("Approver", printer.Cell{Text: v.Approver})
	}
	t.Field("Reason", printer.Cell{Text: v.Reason})
	t.Field("Map", printer.Cell{Text: v.Map})
	if len(v.Moves) == 0 {
		t.Field("Live ranges", printer.Cell{Text: "none: no moving range has holds or waiters now"})
	}
	for _, m := range v.Moves {
		t.Field("Moves "+m.Range, printer.Cell{Text: fmt.Sprintf("%s to %s, %d holds and waiters", m.From, m.To, m.Live)})
	}
	for _, m := range v.Stragglers {
		t.Field("Straggler "+m.Range, printer.Cell{Text: fmt.Sprintf("%s to %s: closed on %s until released on %s", m.From, m.To, m.To, m.From)})
	}
	if len(v.Moves)+len(v.Stragglers) > 0 {
		t.Field("Expected drain", printer.Cell{Text: "at most " + t.Duration(time.Duration(v.ExpectedDrain*float64(time.Second))) + " (the longest class TTL among them), sooner as holders release"})
	}
}

// Notes implements printer.Noter.
func (v *PlanView) Notes() []string {
	if v.State == "proposed" {
		return []string{"a different operator must approve: lockctl shards move " + v.ID}
	}
	return nil
}

// PlanOptions are `lockctl shards plan`'s inputs.
type PlanOptions struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	Add, Remove, Pin, Unpin []string
	Reason                  string
}

// NewCmdPlan returns `lockctl shards plan`.
func NewCmdPlan(f *cmdutil.Factory, runF func(*PlanOptions) error) *cobra.Command {
	opts := &PlanOptions{Client: f.Client, Printer: f.Printer, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "plan [--add NAME[=WEIGHT]] [--remove NAME] [--pin PREFIX=SHARD] [--unpin PREFIX] --reason <text>",
		Short: "Propose a change of the shard map, and preview what it moves",
		Long: cmdutil.Doc(`
			Propose the stored shard map changed by the flags, and show what the
			change moves now: each moving range that has holds or waiters, and the
			longest its drain can take. Ranges nobody holds move at once. Nothing
			moves until a different operator approves with "lockctl shards move".

			Adding a shard moves only the ranges it now wins (about 1/N of them);
			--pin sends every key under a prefix to one shard (a large tenant).
			A shard must be an entity cluster of lockd's topology.
		`),
		Example: cmdutil.Example(`
			$ lockctl shards plan --add entity-3 --reason "entity-1 at 80% of its write budget (CAP-12)"
			$ lockctl shards plan --add entity-3=2 --reason "a larger cluster, twice the ranges"
			$ lockctl shards plan --pin payments/=entity-3 --reason "payments gets its own shard (CAP-20)"
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Reason = strings.TrimSpace(opts.Reason)
			if opts.Reason == "" {
				return cli.Usagef("--reason is required: say why, it is recorded with the plan")
			}
			if len(opts.Add)+len(opts.Remove)+len(opts.Pin)+len(opts.Unpin) == 0 {
				return cli.Usagef("say what changes: --add, --remove, --pin or --unpin")
			}
			req, err := opts.request()
			if err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return cmdutil.Call(cmd.Context(), opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
				resp, err := c.AdminService().ProposeShardPlan(ctx, req)
				if err != nil {
					return err
				}
				return opts.Printer().Print(NewPlanView(resp.GetPlan()))
			})
		},
	}
	cmd.Flags().StringArrayVar(&opts.Add, "add", nil, "a shard to add, or re-weigh: NAME or NAME=WEIGHT (repeatable)")
	cmd.Flags().StringArrayVar(&opts.Remove, "remove", nil, "a shard to remove (repeatable)")
	cmd.Flags().StringArrayVar(&opts.Pin, "pin", nil, "pin the keys under a prefix to a shard: PREFIX=SHARD (repeatable)")
	cmd.Flags().StringArrayVar(&opts.Unpin, "unpin", nil, "remove the pin of a prefix (repeatable)")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, recorded with the plan (required)")
	return cmd
}

// request builds the ProposeShardPlanRequest, naming the flag a bad value
// came from.
func (o *PlanOptions) request() (*lockv1.ProposeShardPlanRequest, error) {
	req := &lockv1.ProposeShardPlanRequest{Remove: o.Remove, Unpin: o.Unpin, Reason: o.Reason}
	for _, a := range o.Add {
		name, w, hasW := strings.Cut(a, "=")
		sw := &lockv1.ShardWeight{Name: name}
		if hasW {
			f, err := strconv.ParseFloat(w, 64)
			if err != nil || f <= 0 {
				return nil, cli.Usagef("--add %s: the weight must be a positive number", a)
			}
			sw.Weight = f
		}
		req.Add = append(req.Add, sw)
	}
	for _, p := range o.Pin {
		prefix, shard, ok := strings.Cut(p, "=")
		if !ok || prefix == "" || shard == "" {
			return nil, cli.Usagef("--pin %s: must be PREFIX=SHARD, like payments/=entity-3", p)
		}
		req.Pin = append(req.Pin, &lockv1.ShardPin{Prefix: prefix, Shard: shard})
	}
	return req, nil
}

// MoveOptions are `lockctl shards move`'s inputs.
type MoveOptions struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration

	ID     string
	NoWait bool
	Poll   time.Duration
}

// NewCmdMove returns `lockctl shards move`.
func NewCmdMove(f *cmdutil.Factory, runF func(*MoveOptions) error) *cobra.Command {
	opts := &MoveOptions{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Timeout: 15 * time.Minute, Poll: 500 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "move <plan-id>",
		Short: "Approve a proposed plan (a second operator) and follow it until done",
		Long: cmdutil.Doc(`
			Approve a plan proposed by another operator with "lockctl shards plan";
			lockd's move controller then carries it out: it drains the moving
			ranges that have holds (no new grants or waiters there; holders keep
			their locks until they release, or an operator force-releases), checks
			that every receiving shard's epoch is above the others', publishes the
			new map on every shard and flips it. This command follows the plan
			until it is done or fails, showing its progress on a terminal; with
			--no-wait it returns once the plan is approved. It exits 1 if the plan
			failed.
		`),
		Example: cmdutil.Example(`
			$ lockctl shards move 20261205-180501-a1b2c3
			$ lockctl shards move 20261205-180501-a1b2c3 --no-wait -o json
		`),
		Args: cmdutil.ExactArgs(1, "the plan's id, from lockctl shards plan or status"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(opts)
			}
			return moveRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.NoWait, "no-wait", false, "return once the plan is approved")
	return cmd
}

func moveRun(ctx context.Context, opts *MoveOptions) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		resp, err := c.AdminService().ApproveShardPlan(ctx, &lockv1.ApproveShardPlanRequest{Id: opts.ID})
		if err != nil {
			return err
		}
		p := resp.GetPlan()
		last := ""
		for !opts.NoWait && p.GetState() != "done" && p.GetState() != "failed" {
			if line := NewPlanView(p).summary().Text; line != last && opts.IO.IsStderrTTY() {
				fmt.Fprintf(opts.IO.ErrOut, "plan %s: %s\n", p.GetId(), line)
				last = line
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(opts.Poll):
			}
			st, err := c.AdminService().ShardStatus(ctx, &lockv1.ShardStatusRequest{})
			if err != nil {
				return err
			}
			for _, q := range st.GetPlans() {
				if q.GetId() == opts.ID {
					p = q
				}
			}
		}
		if err := opts.Printer().Print(NewPlanView(p)); err != nil {
			return err
		}
		if p.GetState() == "failed" {
			return cli.Exit(1, fmt.Errorf("plan %s failed: %s", p.GetId(), p.GetError()))
		}
		return nil
	})
}
