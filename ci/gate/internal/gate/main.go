package gate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lockd-dev/lockd/internal/audit"
)

const usage = `gate: the release gate. Runs a 3-member etcd cluster, lockd arbiters and
workers as separate processes, injects faults, and checks every recorded
operation with Porcupine. Exit 0: no violation and enough work; 1: a
violation, too little work, or a control that found nothing; 2: usage.

Examples:
  # The gate (about a minute), every fault kind:
  go run ./ci/gate --duration 60s --faults all

  # The long mode before a release:
  go run ./ci/gate --duration 30m --faults all --seed 42

  # Negative control: the store accepts stale tokens; must find a violation
  go run ./ci/gate --duration 30s --faults worker-pause --fencing=false --expect-violation

  # A lockd whose grant skips the absence compare; must find a violation
  go run ./ci/gate --duration 20s --faults none --broken-build --expect-violation

  # A lockd that hands a durable key to the last waiter in line; must find
  # a violation of the durable line
  go run ./ci/gate --duration 30s --faults none --broken-line --expect-violation

  # Workers whose supervised children outlive their lock (lockctl's old
  # supervision) while their lockd is stopped; must find a violation (two
  # keys: someone is waiting for the child's key when its session expires)
  go run ./ci/gate --duration 60s --faults arbiter-stop --late-fence --keys 2 --expect-violation

  # Quorum loss, with keys of a class open on quorum loss
  go run ./ci/gate --duration 60s --faults quorum-loss,member-kill-leader,arbiter-kill,worker-pause,reentrant --open-keys 2

  # Entity shards: a coord cluster, two shards and a third added mid-run;
  # the workers' range moves between them with faults during the moves
  go run ./ci/gate --duration 180s --faults all

  # A lockd that grants on a shard without the shard map fence; must find
  # a violation when a lockd's map watch stalls across a move
  go run ./ci/gate --duration 60s --faults map-stall,shard-move --broken-shard --expect-violation

  # A lockd that grants open classes through etcd as soon as quorum
  # returns; must find a consensus grant over an untold unprotected holder
  go run ./ci/gate --duration 60s --faults quorum-loss --open-keys 2 --broken-recovery --expect-violation

Flags:
`

// Main parses args, runs the gate and prints the summary line. It returns
// the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	o := Options{Out: stdout}
	faults := fs.String("faults", "all", "comma-separated fault kinds, \"all\" (every kind; quorum-loss and the move kinds only with --clusters 2) or \"none\": "+strings.Join(Kinds, ", "))
	fs.DurationVar(&o.Duration, "duration", 60*time.Second, "how long workers run under faults")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed for the schedule and the workers (0: from the clock; printed)")
	fs.IntVar(&o.Workers, "workers", 6, "worker processes")
	fs.IntVar(&o.Arbiters, "arbiters", 2, "lockd processes")
	fs.IntVar(&o.Keys, "keys", 4, "keys the workers contend on")
	fs.IntVar(&o.Clusters, "clusters", 2, "etcd clusters: 2 splits the tiers (the durable class's keys are the coord tier's, on a cluster of their own), 1 serves both tiers from one")
	fs.IntVar(&o.Shards, "shards", 0, "clusters serving the entity tier with --clusters 2: 1, or 3 (the entity cluster and shard-2 in the first map, shard-3 added by the first move); default 3 when a move fault is asked for, else 1")
	fs.BoolVar(&o.BrokenShard, "broken-shard", false, "build lockd granting on an entity shard without the shard map fence (control for the map-stall fault)")
	fs.BoolVar(&o.BrokenRelease, "broken-release", false, "build lockd releasing by key, not by the hold's revision (control for the retried release: a retried release frees the same session's newer grant)")
	fs.BoolVar(&o.BrokenBatch, "broken-batch", false, "build lockd committing every grant and release of a batch but the first without its own compares (control for the group commit)")
	fs.IntVar(&o.OpenKeys, "open-keys", 0, "more keys, under an efficiency class open on quorum loss (for the quorum-loss fault)")
	fs.StringVar(&o.Store, "store", "auto", "fenced store: postgres, memory, or auto (postgres when installed)")
	fs.StringVar(&o.Postgres, "postgres", "", "an existing PostgreSQL URL for the store (default: start one)")
	fs.BoolVar(&o.Fencing, "fencing", true, "false: the store accepts writes without comparing tokens (negative control)")
	fs.BoolVar(&o.Broken, "broken-build", false, "build lockd with the grant's absence compare removed (control)")
	fs.BoolVar(&o.BrokenLine, "broken-line", false, "build lockd handing a durable key to the last waiter in line, not the first (control)")
	fs.BoolVar(&o.BrokenOpen, "broken-open", false, "build lockd granting closed classes from memory too while it has no quorum (control for the quorum-loss check)")
	fs.BoolVar(&o.BrokenRecovery, "broken-recovery", false, "build lockd granting open classes through etcd as soon as quorum returns, over unprotected holders not yet told (control; with --expect-violation it must find such a grant)")
	fs.BoolVar(&o.LateFence, "late-fence", false, "build the workers with lockctl's old supervision, SIGKILL --grace after the lock is lost (control)")
	fs.BoolVar(&o.Expect, "expect-violation", false, "pass only if a violation is found (for the controls)")
	fs.IntVar(&o.MinGrants, "min-grants", -1, "fail with fewer successful grants (default: one per second of --duration outside the windows restores and rebuilds close by design)")
	fs.StringVar(&o.Artifacts, "artifacts", "gate-artifacts", "folder for histories, summaries and visualisations")
	fs.StringVar(&o.Netns, "netns", "auto", "network namespaces for etcd members: on, off, auto")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gate: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	switch *faults {
	case "all":
		o.Faults = All()
		if o.Clusters > 1 && o.OpenKeys == 0 {
			// A split run's quorum losses are short (no open keys to
			// exercise): the entity cluster's first, then the coord's.
			o.Faults = append(o.Faults, KindQuorumLoss)
		}
		if o.Clusters > 1 && o.Shards != 1 {
			o.Faults = append(o.Faults, MoveKinds...)
		}
	case "none", "":
	default:
		for _, k := range strings.Split(*faults, ",") {
			if !slices.Contains(Kinds, k) {
				fmt.Fprintf(stderr, "gate: --faults: unknown kind %q; kinds: %s\n", k, strings.Join(Kinds, ", "))
				return 2
			}
			o.Faults = append(o.Faults, k)
		}
	}
	if o.Netns != "auto" && o.Netns != "on" && o.Netns != "off" {
		fmt.Fprintf(stderr, "gate: --netns must be on, off or auto, got %q\n", o.Netns)
		return 2
	}
	moves := slices.ContainsFunc(o.Faults, isMove)
	if o.Shards == 0 {
		o.Shards = 1
		if moves {
			o.Shards = 3
		}
	}
	if (moves || o.Shards != 1) && (o.Clusters != 2 || o.Shards != 3) {
		fmt.Fprintln(stderr, "gate: the move faults and --shards 3 go together, with --clusters 2")
		return 2
	}
	if o.Workers < 2 || o.Arbiters < 1 || o.Keys < 1 || o.Duration <= 0 || o.Clusters < 1 || o.Clusters > 2 {
		fmt.Fprintln(stderr, "gate: --workers must be at least 2, --arbiters and --keys at least 1, --clusters 1 or 2, --duration positive")
		return 2
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := Run(ctx, o)
	c := s.Check
	fmt.Fprintf(stdout, "ops=%d grants=%d writes=%d accepted=%d rejected=%d unknown=%d faults=%d violations=%d seed=%d store=%s fencing=%v\n",
		c.Ops, c.Grants, c.Writes, c.Accepted, c.Rejected, c.Unknown, s.Faults, c.Violations, s.Seed, s.Store, s.Fencing)
	fmt.Fprintf(stdout, "run %s, of which grants closed by design %s; floor %d grants\n", s.Ran, s.GrantsClosed, s.MinGrants)
	if len(s.Windows.Kinds) > 0 {
		fmt.Fprintf(stdout, "grants inside fault windows (floor: one per window open %s or more): %s\n", WindowFloor, s.Windows)
	}
	a := s.Audit
	fmt.Fprintf(stdout, "audit: rows=%d grants=%d releases=%d forces=%d checked (%d revoking the session, ending %d other holds), shard moves noted %d, lost with the store=%d (advances %d), problems=%d\n",
		a.Rows, a.Grants, a.Releases, a.Forces, a.Revokes, a.RevokedHolds, a.ByKind[string(audit.KindMove)], a.RolledBack, a.AdvancesLost, len(a.Problems))
	for i, p := range a.Problems {
		if i == 5 {
			fmt.Fprintf(stdout, "  … %d more in summary.json\n", len(a.Problems)-5)
			break
		}
		fmt.Fprintf(stdout, "  audit: %s\n", p)
	}
	if rv := c.Revokes; rv.Revokes > 0 {
		fmt.Fprintf(stdout, "revokes: %d force-releases revoked the session, which held %d other holds (%d on another cluster); none released after the approval: %v\n",
			rv.Revokes, rv.Others, rv.OtherCluster, len(rv.Details) == 0)
	}
	l := s.Line
	fmt.Fprintf(stdout, "durable line: %d store lives, %d grants of durable keys, %d with waiters in line, %d violations; line probe: %d releases with two waiters in one lockd's line (%d skipped)\n",
		l.Lives, l.Grants, l.Contested, len(l.Violations), s.LineProbe.Rounds, s.LineProbe.Skipped)
	for i, v := range l.Violations {
		if i == 5 {
			fmt.Fprintf(stdout, "  … %d more in summary.json\n", len(l.Violations)-5)
			break
		}
		fmt.Fprintf(stdout, "  violation: durable line: %s\n", v)
	}
	q := c.QuorumLoss
	if q.Outages > 0 {
		fmt.Fprintf(stdout, "quorum loss: %d outages, %d grants inside them, %d unprotected grants (%d checked in the history)\n",
			q.Outages, q.Inside, q.Unprotected, a.Unprotected)
		fmt.Fprintf(stdout, "  unprotected holds: %d told, %d released first, %d with no end; consensus grants over an untold holder: %d; still usable %s after the grant: %d checked (per outage %v)\n",
			q.Told, q.Released, q.Unended, len(q.Overlaps), 2*OpenTTL/3, q.CheckedUsable, q.CheckedUsablePerOutage)
	}
	if sp := s.Split; sp != nil {
		fmt.Fprintf(stdout, "split: epochs per cluster %v; entity outages %d (%.1fs), coord grants in them %d (%.2f/s, floor %.2f/s; elsewhere %.2f/s); workers holding on both as one began %d, fenced on the failed cluster only %d\n",
			sp.Epochs, sp.BlastWindows, sp.BlastSeconds, sp.CoordGrants, sp.CoordGrantsPerSecond, sp.Floor, sp.CoordGrantsPerSecondElsewhere, sp.Straddles, sp.FencedOnFailedOnly)
		for _, d := range sp.Details {
			fmt.Fprintf(stdout, "  violation: %s\n", d)
		}
	}
	b := s.Batch
	fmt.Fprintf(stdout, "batch probe: %d bursts of %d keys and a held one (%d skipped), the held key refused beside grants in %d, %d other grants, %d violations\n",
		b.Rounds, batchBurst, b.Skipped, b.Refused, b.Granted, len(b.Details))
	for _, d := range b.Details {
		fmt.Fprintf(stdout, "  violation: batch: %s\n", d)
	}
	if mv := s.Moves; mv != nil {
		fmt.Fprintf(stdout, "moves: %d of %s between %d shards, holds ended at a drain's bound %d\n", len(mv.Moves), movedPrefix, o.Shards, mv.Forced)
		for _, m := range mv.Moves {
			fmt.Fprintf(stdout, "  move %-17s %s -> %s: %d live, drain %s (limit %s), %d stragglers (settle %s)\n", m.Kind, m.From, m.To, m.Live,
				m.Drain.Round(100*time.Millisecond), m.Bound+MoveSlack+m.Allow.Round(100*time.Millisecond), m.Stragglers, m.Settle.Round(100*time.Millisecond))
			if m.Probe != "" && !m.StaleGrant {
				fmt.Fprintf(stdout, "    probe: %s\n", m.Probe)
			}
		}
		for _, d := range mv.Details {
			fmt.Fprintf(stdout, "  violation: %s\n", d)
		}
	}
	fmt.Fprintf(stdout, "class mismatches refused: %d without quorum, %d with quorum (%d denied during a class-reload)\n",
		q.MismatchesInside, q.MismatchesOutside, q.MismatchesExcused)
	if s.Check.RetriedReleases > 0 {
		fmt.Fprintf(stdout, "retried releases: %d sent after the same session took the key again, %d refused\n",
			s.Check.RetriedReleases, s.Check.RetriesRefused)
	}
	for _, k := range Kinds {
		if n := s.FaultKinds[k]; n > 0 {
			fmt.Fprintf(stdout, "  fault %-22s x%d\n", k, n)
		}
	}
	for _, f := range s.FailedFaults {
		fmt.Fprintf(stdout, "  not injected: %s\n", f)
	}
	for _, d := range c.Details {
		fmt.Fprintf(stdout, "  violation: %s\n", d)
	}
	for _, v := range c.Visualizations {
		fmt.Fprintf(stdout, "  visualisation: %s\n", v)
	}
	if s.Artifacts != "" {
		fmt.Fprintf(stdout, "artifacts: %s\n", s.Artifacts)
	}
	if err != nil {
		fmt.Fprintf(stderr, "FAIL: %v\n", err)
		return 1
	}
	if o.Expect {
		fmt.Fprintln(stdout, "PASS: the control found the violation it must find")
	} else {
		fmt.Fprintln(stdout, "PASS")
	}
	return 0
}
