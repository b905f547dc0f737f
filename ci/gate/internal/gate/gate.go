// Package gate is the release gate: it runs two 3-member etcd clusters (a
// coord and an entity cluster; or one serving both tiers), lockd arbiters
// and worker processes as separate OS processes, injects faults
// while the workers take locks and write a fenced store, and checks the
// recorded history with Porcupine. One violation fails the gate.
package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/auditcheck"
	"github.com/lockd-dev/lockd/ci/gate/internal/check"
	"github.com/lockd-dev/lockd/ci/gate/internal/fencedstore"
	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/ci/gate/internal/linecheck"
	"github.com/lockd-dev/lockd/ci/gate/internal/worker"
	"github.com/lockd-dev/lockd/ci/internal/classdir"
	"github.com/lockd-dev/lockd/ci/internal/cluster"
	"github.com/lockd-dev/lockd/ci/internal/proc"
	"github.com/lockd-dev/lockd/internal/pgserver"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
)

// The gate's lock namespace, class and TTLs: the class-reload fault lowers
// the TTL from TTL to LowTTL for a while.
const (
	Namespace = "gate"
	ClassName = "fenced"
	// DurableClassName is ClassName with fairness durable: the second half
	// of the keys are taken under it (durableKeys).
	DurableClassName = "fenced-durable"
	// OpenClassName is an efficiency class (advisory, so its TTL is at
	// least 30 s) declaring onQuorumLoss: open; --open-keys are taken
	// under it.
	OpenClassName = "cache"
	OpenTTL       = 30 * time.Second
	// OpenAfter is the arbiters' --open-after; RequestTimeout their
	// --request-timeout (an epoch read fails after it).
	OpenAfter      = 3 * time.Second
	RequestTimeout = 2 * time.Second
	TTL            = 6 * time.Second
	LowTTL         = 5 * time.Second
	operator       = "spiffe://gate.local/operator"
	operator2      = "spiffe://gate.local/operator-2"
)

// Errors.
var (
	ErrViolation = errors.New("gate: violations found")
	ErrTooLittle = errors.New("gate: too little work")
	ErrExpected  = errors.New("gate: a violation was expected and none was found")
	ErrUsage     = errors.New("gate: usage")
)

// Options configure one gate run.
type Options struct {
	Duration time.Duration
	Faults   []string // fault kinds; see Kinds
	Seed     uint64
	Workers  int
	Arbiters int
	Keys     int
	// Clusters is 2 (the tiers split: a coord cluster serving the durable
	// class, whose keys are the coord tier's, and an entity cluster serving
	// the others) or 1 (one cluster serving both tiers).
	Clusters int
	// Shards is how many clusters serve the entity tier in a split run: 1,
	// or 3 (the entity cluster and shard-2 in the first map, shard-3 added
	// by the first move; the move faults need them).
	Shards int
	// BrokenShard builds lockd granting on an entity shard without the
	// shard map fence (control for the map-stall fault).
	BrokenShard bool
	// BrokenRelease builds lockd releasing by key: a release compares only
	// the session, not the hold's revision (tag gate_broken_release), so a
	// retried release frees the session's newer grant.
	BrokenRelease bool
	// BrokenBatch builds lockd committing every part of a group commit but
	// the first without its own compares (control for the batch).
	BrokenBatch bool
	// OpenKeys are more keys, gate/o/<i>, taken under OpenClassName. The
	// quorum-loss fault checks what they are granted without quorum. The
	// open class's 30 s TTL lengthens every epoch advance's grace, so a
	// run with restores or rebuilds does without them.
	OpenKeys int
	Store    string // auto, postgres, memory
	Postgres string // an existing PostgreSQL URL (optional)
	Fencing  bool   // false: the negative control, the store accepts stale tokens
	Broken   bool   // build lockd with the grant's absence compare removed
	// BrokenLine builds lockd handing a durable key to the last waiter in
	// line instead of the first (control for the durable-line check).
	BrokenLine bool
	// BrokenOpen builds lockd granting every class, closed ones too, from
	// memory in its open posture (control for the quorum-loss check).
	BrokenOpen bool
	// BrokenRecovery builds lockd granting open classes through etcd as
	// soon as quorum returns, with no open grace and no hold-off, while
	// unprotected holders may not have been told yet (control for the
	// check that no consensus grant overlaps an untold unprotected holder).
	BrokenRecovery bool
	LateFence      bool // build the workers with lockctl's old supervision (SIGKILL --grace after the loss)
	Expect         bool // expect at least one violation (controls)
	// MinGrants fails a run with fewer successful grants; negative means
	// one per second of the run in which grants were possible (the run's
	// duration less the windows a restore or a rebuild closed by design).
	MinGrants int
	Artifacts string
	Netns     string // auto, on, off
	Out       io.Writer
}

// Summary is the run's JSON summary.
type Summary struct {
	Seed       uint64         `json:"seed"`
	Duration   string         `json:"duration"`
	Store      string         `json:"store"`
	Fencing    bool           `json:"fencing"`
	Broken     bool           `json:"brokenBuild"`
	LateFence  bool           `json:"lateFence"`
	Workers    int            `json:"workers"`
	Arbiters   int            `json:"arbiters"`
	Keys       int            `json:"keys"`
	Clusters   int            `json:"clusters"`
	Faults     int            `json:"faults"`
	FaultKinds map[string]int `json:"faultKinds"`
	// FailedFaults are injections that failed (they are not counted).
	FailedFaults []string `json:"failedFaults,omitempty"`
	// GrantsClosed is how much of the run no grant could be made in by
	// design (sealed until the epoch advanced, then the advance's grace).
	GrantsClosed string `json:"grantsClosed"`
	// Ran is how long the faulted run lasted (--duration, lengthened by
	// GrantsClosed up to twice --duration).
	Ran string `json:"ran"`
	// MinGrants is the floor the run was held to.
	MinGrants int `json:"minGrants"`
	// Windows is the work done inside the fault windows; a long window
	// with no grant fails the run (see WindowFloor).
	Windows WindowWork   `json:"windows"`
	Check   check.Result `json:"check"`
	// Audit is the audit check: the history against what was observed.
	Audit auditcheck.Result `json:"audit"`
	// Line is the durable-line check on etcd's own history.
	Line LineResult `json:"line"`
	// Split is the check of the tiers split over two clusters.
	Split *check.SplitResult `json:"split,omitempty"`
	// Moves is the check of the moves between entity shards.
	Moves *MoveResult `json:"moves,omitempty"`
	// Batch is the batch probe: bursts of grants, one for a held key.
	Batch BatchResult `json:"batch"`
	// LineProbe counts the releases the gate made with two waiters in one
	// lockd's line (the durable-line check judges them).
	LineProbe LineProbe `json:"lineProbe"`
	Artifacts string    `json:"artifacts"`
	Passed    bool      `json:"passed"`
	Reason    string    `json:"reason,omitempty"`
}

type run struct {
	o        Options
	dir      string
	exe      string
	workerEx string // the workers' binary (built with gate_late_fence for that control)
	rnd      *rand.Rand
	clusters []*etcdCluster // the coord cluster first
	// hits counts the cluster-targeted faults of each kind so far, and
	// first is the seeded cluster they start from (target).
	hits  map[string]int
	first int
	// records are the epochs the gate read from each cluster's records:
	// the advance of the entity cluster bootstrapped apart, and each
	// cluster's /sys/epoch at the end.
	records  map[string][]uint32
	arbiters []*proc.Lockd
	proxies  []*tcpproxy.Proxy // one in front of each arbiter; workers dial these
	tailers  []*tailer         // the audit tailers (lockd audit)
	workers  []*proc.Proc
	storeURL string
	rec      *history.Recorder // the gate's own operations (force-releases)
	grantOf  []string          // each worker's identity, for the class files
	openKeys []string          // the keys of the open class

	stopPG  func() error
	stopMem func()

	// lives are etcd's histories of holds and waiter keys, one per store
	// life, read before a restore or rebuild ends it and at the end;
	// lineErrs are the reads that failed.
	lives    []linecheck.Life
	lineErrs []string

	start, end int64 // the faulted run's window, on history.Now's clock
	// wallOffset is wall time less history.Now's clock, for times lockd
	// writes (plans, force records).
	wallOffset int64

	// Moves of entity ranges: the shard the workers' range is homed to,
	// whether shard-3 was added, each move, and the holds the move
	// controller ended at a drain's bound.
	home   string
	added  bool
	moves  []Move
	forced []moveForce

	mu       sync.Mutex
	faults   []history.Fault
	announce chan int // workers that just passed their check
	childRun chan int // child-mode workers whose child just started
}

// gateHistory is the worker id of the gate's own operations.
const gateHistory = 999

// Run runs the gate and returns its summary. The error is non-nil when the
// gate fails (violations, too little work, or a control that found none).
func Run(ctx context.Context, o Options) (Summary, error) {
	r := &run{o: o, rnd: rand.New(rand.NewPCG(o.Seed, 0x9a7e)), announce: make(chan int, 64), childRun: make(chan int, 64),
		hits: map[string]int{}, records: map[string][]uint32{}}
	s := Summary{Seed: o.Seed, Duration: o.Duration.String(), Fencing: o.Fencing, Broken: o.Broken, LateFence: o.LateFence,
		Workers: o.Workers, Arbiters: o.Arbiters, Keys: o.Keys, Clusters: max(o.Clusters, 1), FaultKinds: map[string]int{}}
	if err := r.setup(ctx, &s); err != nil {
		r.teardown()
		return s, err
	}
	s.Artifacts = r.dir
	r.logf("gate: running %s with faults %s (seed %d)", o.Duration, strings.Join(o.Faults, ","), o.Seed)
	r.start = history.Now()
	r.wallOffset = time.Now().UnixNano() - r.start
	pctx, stopProbe := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() { defer close(probed); r.probeBatches(pctx, &s.Batch, &s.LineProbe) }()
	r.inject(ctx)
	stopProbe()
	<-probed
	r.end = history.Now()
	if r.sharded() {
		s.Moves = &MoveResult{}
		r.finishMoves(ctx, s.Moves)
	}
	r.teardown()
	for _, f := range r.faults {
		if f.Err != "" {
			s.FailedFaults = append(s.FailedFaults, f.Kind+": "+f.Err)
			continue // not injected: it does not count
		}
		s.FaultKinds[f.Kind]++
		s.Faults++
	}
	return s, r.verdict(&s)
}

// grantsClosed is how much of [start, end] lies in the union of the
// faults' windows in which no grant can be made by design.
func grantsClosed(faults []history.Fault, start, end int64) time.Duration {
	var ws [][2]int64
	for _, f := range faults {
		if f.Err == "" && f.GrantsClosedUntil > f.Start {
			ws = append(ws, [2]int64{max(f.Start, start), min(f.GrantsClosedUntil, end)})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i][0] < ws[j][0] })
	var total, reach int64 = 0, start
	for _, w := range ws {
		lo := max(w[0], reach)
		if w[1] > lo {
			total += w[1] - lo
			reach = w[1]
		}
	}
	return time.Duration(total)
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.o.Out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func (r *run) setup(ctx context.Context, s *Summary) error {
	o := r.o
	stamp := time.Now().Format("20060102-150405")
	r.dir = filepath.Join(o.Artifacts, fmt.Sprintf("%s-seed%d", stamp, o.Seed))
	for _, d := range []string{"bin", "lockd", "histories", "classes"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r.exe = exe

	// lockd, built from this tree (with the broken grant when asked).
	lockd := filepath.Join(r.dir, "bin", "lockd")
	// Always with the gate's failpoints (a stalled map watch); a control
	// adds the tag of its broken build.
	tags := "gate_failpoints"
	switch {
	case o.Broken:
		tags += ",gate_broken_grant"
	case o.BrokenLine:
		tags += ",gate_broken_line"
	case o.BrokenOpen:
		tags += ",gate_broken_open"
	case o.BrokenRecovery:
		tags += ",gate_broken_recovery"
	case o.BrokenShard:
		tags += ",gate_broken_shard"
	case o.BrokenBatch:
		tags += ",gate_broken_batch"
	case o.BrokenRelease:
		tags += ",gate_broken_release"
	}
	args := []string{"build", "-tags", tags, "-o", lockd, "github.com/lockd-dev/lockd/cmd/lockd"}
	r.logf("gate: go %s", strings.Join(args, " "))
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("gate: building lockd: %v\n%s", err, out)
	}
	r.workerEx = r.exe
	if o.LateFence {
		r.workerEx = filepath.Join(r.dir, "bin", "gate-late-fence")
		args := []string{"build", "-tags", "gate_late_fence", "-o", r.workerEx, "github.com/lockd-dev/lockd/ci/gate"}
		r.logf("gate: go %s", strings.Join(args, " "))
		if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("gate: building the late-fence workers: %v\n%s", err, out)
		}
	}
	if r.rec, err = history.Create(filepath.Join(r.dir, "histories", "worker-gate.jsonl"), gateHistory); err != nil {
		return err
	}

	// The fenced store.
	keys := gateKeys(o.Keys)
	r.openKeys = openKeys(o.OpenKeys)
	if err := r.startStore(ctx, append(slices.Clone(keys), r.openKeys...), s); err != nil {
		return err
	}

	// etcd.
	useNetns := o.Netns == "on"
	if o.Netns == "auto" {
		if err := cluster.NetnsAvailable(); err == nil {
			useNetns = true
		} else if slices.Contains(o.Faults, KindLeaderIsolate) {
			return fmt.Errorf("%w (needed by %s; run as root, or leave it out of --faults)", err, KindLeaderIsolate)
		}
	}
	names := []string{""}
	if o.Clusters > 1 {
		names = []string{CoordCluster, EntityCluster}
		if o.Shards > 1 {
			names = append(names, Shard2, Shard3)
		}
	}
	for _, name := range names {
		ports, err := proc.FreePorts(6)
		if err != nil {
			return err
		}
		cl, err := cluster.Start(ctx, cluster.Config{Dir: filepath.Join(r.dir, "etcd", cmp.Or(name, "main")), Exe: r.exe, Netns: useNetns, Ports: ports})
		if err != nil {
			return err
		}
		r.clusters = append(r.clusters, &etcdCluster{Cluster: cl, name: name})
		r.logf("gate: etcd cluster %s up: %s (netns %v)", cmp.Or(name, "main"), strings.Join(cl.Endpoints(), ","), useNetns)
	}
	r.first = r.rnd.IntN(len(r.clusters))

	// lockd arbiters.
	for i := range o.Workers {
		r.grantOf = append(r.grantOf, workerID(i))
	}
	// The gate's own holds: the batch probe's, a move's drain, and the
	// map-stall probe.
	r.grantOf = append(r.grantOf, Mover, Prober, Prober2)
	if err := r.writeClasses(TTL, -1); err != nil {
		return err
	}
	aports, err := proc.FreePorts(2 * o.Arbiters)
	if err != nil {
		return err
	}
	clusterID, err := r.coord().ID(ctx)
	if err != nil {
		return err
	}
	if r.split() {
		if err := r.bootstrapApart(ctx, lockd); err != nil {
			return err
		}
	}
	for i := range o.Arbiters {
		a := &proc.Lockd{Addr: fmt.Sprintf("127.0.0.1:%d", aports[2*i]), Metrics: fmt.Sprintf("127.0.0.1:%d", aports[2*i+1])}
		a.Name = fmt.Sprintf("lockd-%d", i)
		a.Bin = lockd
		a.Log = filepath.Join(r.dir, "lockd", a.Name+".log")
		a.Env = []string{stallEnv + "=" + r.stallFile(a.Name)}
		a.Args = append(r.etcdArgs(), "--insecure-loopback", "--listen", a.Addr, "--metrics-listen", a.Metrics, "--classes", filepath.Join(r.dir, "classes"),
			"--operators", operator+","+operator2, "--data-dir", filepath.Join(r.dir, "lockd", a.Name), "--request-timeout", RequestTimeout.String(),
			"--open-after", OpenAfter.String(),
			// A first deployment: epoch 1 on the coord cluster only. After
			// the store-rebuild fault (same cluster ID, empty store) it does
			// nothing: every lockd's data dir then records an epoch.
			"--bootstrap-epoch-cluster-id", clusterID)
		if err := a.Start(); err != nil {
			return err
		}
		r.arbiters = append(r.arbiters, a)
		p, err := tcpproxy.Start(a.Addr)
		if err != nil {
			return err
		}
		r.proxies = append(r.proxies, p)
	}
	for _, a := range r.arbiters {
		if err := a.WaitReady(ctx, 30*time.Second); err != nil {
			return err
		}
	}
	r.logf("gate: %d lockd arbiters ready", len(r.arbiters))
	if r.split() {
		if err := r.advanceApart(ctx); err != nil {
			return err
		}
	}
	if r.sharded() {
		if err := r.initShards(ctx); err != nil {
			return err
		}
	}
	if err := r.startTailers(ctx, lockd); err != nil {
		return err
	}

	// Workers.
	for i := range o.Workers {
		w := &proc.Proc{Name: fmt.Sprintf("worker-%d", i), Bin: r.workerEx, Log: filepath.Join(r.dir, "histories", fmt.Sprintf("worker-%d.log", i))}
		idx := i
		w.OnLine = func(line string) {
			ch := r.announce
			switch {
			case strings.HasPrefix(line, worker.Announcement):
			case strings.HasPrefix(line, worker.ChildStarted):
				// Only units that outlast the TTL: a short one ends by itself
				// before anyone else could be granted its key.
				f := strings.Fields(line)
				if d, err := time.ParseDuration(f[len(f)-1]); err != nil || d < TTL {
					return
				}
				ch = r.childRun
			default:
				return
			}
			select {
			case ch <- idx:
			default:
			}
		}
		w.Args = []string{"worker", "--id", strconv.Itoa(i), "--target", r.proxies[i%len(r.arbiters)].Addr(),
			"--identity", workerID(i), "--keys", strings.Join(keys, ","), "--class", Namespace + "/" + ClassName,
			"--durable-keys", strings.Join(durableKeys(keys), ","), "--durable-class", Namespace + "/" + DurableClassName,
			"--history", filepath.Join(r.dir, "histories", fmt.Sprintf("worker-%d.jsonl", i)),
			"--store", r.storeURL, "--seed", strconv.FormatUint(o.Seed, 10)}
		if len(r.openKeys) > 0 {
			w.Args = append(w.Args, "--open-keys", strings.Join(r.openKeys, ","), "--open-class", Namespace+"/"+OpenClassName)
		}
		switch {
		case childWorker(i):
			w.Args = append(w.Args, "--child")
		case i == 0 && r.split():
			w.Args = append(w.Args, "--straddle") // one worker often holds a key on each cluster
		case slices.Contains(o.Faults, KindReentrant):
			w.Args = append(w.Args, "--reentrant")
		}
		if slices.Contains(o.Faults, KindRetriedRelease) && !childWorker(i) {
			w.Args = append(w.Args, "--retry-release")
		}
		if err := w.Start(); err != nil {
			return err
		}
		r.workers = append(r.workers, w)
	}
	r.logf("gate: %d workers started", len(r.workers))
	return nil
}

// startStore starts the fenced store: a real PostgreSQL table, or the
// in-process store served over HTTP.
func (r *run) startStore(ctx context.Context, keys []string, s *Summary) error {
	kind := r.o.Store
	url := r.o.Postgres
	if kind == "auto" {
		kind = "memory"
		if url != "" || postgresInstalled() {
			kind = "postgres"
		}
	}
	s.Store = kind
	switch kind {
	case "postgres":
		if url == "" {
			u, stop, err := pgserver.Start(ctx, filepath.Join(r.dir, "postgres"), true)
			if err != nil {
				return err
			}
			url = u
			r.stopPG = stop
		}
		if err := fencedstore.SetupPostgres(ctx, url, keys, r.o.Fencing); err != nil {
			return err
		}
		r.storeURL = url
		r.logf("gate: fenced store: PostgreSQL table gate_store (fencing %v)", r.o.Fencing)
	case "memory":
		mem := fencedstore.NewMemory(r.o.Fencing)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: mem.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		r.stopMem = func() { _ = srv.Close() }
		r.storeURL = "http://" + l.Addr().String()
		r.logf("gate: fenced store: in-process, served at %s (fencing %v)", r.storeURL, r.o.Fencing)
	default:
		return fmt.Errorf("%w: --store must be auto, postgres or memory, got %q", ErrUsage, kind)
	}
	return nil
}

func (r *run) teardown() {
	for _, w := range r.workers {
		w.Stop(10 * time.Second)
	}
	for _, p := range r.proxies {
		p.Close()
	}
	for _, a := range r.arbiters {
		a.Stop(5 * time.Second)
	}
	r.drainHistory(context.Background())
	if len(r.clusters) > 0 {
		r.readLine(context.Background())
		r.readRecords(context.Background())
	}
	if r.rec != nil {
		_ = r.rec.Close()
	}
	for _, c := range r.clusters {
		c.Close()
	}
	if r.stopPG != nil {
		_ = r.stopPG()
	}
	if r.stopMem != nil {
		r.stopMem()
	}
}

func (r *run) recordFault(f history.Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
	if f.Err != "" {
		r.logf("fault: %s %s FAILED: %s", f.Kind, f.Target, f.Err)
		return
	}
	r.logf("fault: %s %s (%.1fs) %s", f.Kind, f.Target, float64(f.End-f.Start)/1e9, f.Note)
}

func (r *run) verdict(s *Summary) error {
	paths, _ := filepath.Glob(filepath.Join(r.dir, "histories", "worker-*.jsonl"))
	sort.Strings(paths)
	ops, err := history.ParseFiles(paths)
	if err != nil {
		return err
	}
	var clusterOf check.ClusterOf
	if r.split() {
		clusterOf = r.clusterOf
	}
	if r.sharded() {
		// The holds a move's drain ended are force-releases the gate did
		// not make: add them as its own, so the lock model lets their
		// holders check only until told.
		ops = append(ops, r.moveForceOps(ops, r.clusterOf)...)
	}
	res, err := check.Run(ops, check.Options{Timeout: 2 * time.Minute, ArtifactsDir: r.dir, Faults: r.faults, OpenKeys: r.openKeys, OpenTTL: OpenTTL,
		ClusterOf: clusterOf})
	if err != nil {
		return err
	}
	s.Check = res
	if slices.Contains(r.o.Faults, KindReentrant) {
		// Re-entrant workers are a behaviour, not a scheduled fault: count
		// the re-entries that happened.
		s.FaultKinds[KindReentrant] = res.Reenters
		s.Faults += res.Reenters
	}
	retried := slices.Contains(r.o.Faults, KindRetriedRelease)
	if retried {
		s.FaultKinds[KindRetriedRelease] = res.RetriedReleases
		s.Faults += res.RetriedReleases
	}
	fb, _ := json.MarshalIndent(r.faults, "", "  ")
	_ = os.WriteFile(filepath.Join(r.dir, "faults.json"), fb, 0o644)
	ares, err := r.auditVerdict(context.Background(), ops)
	if err != nil {
		return fmt.Errorf("gate: reading the audit history: %w", err)
	}
	s.Audit = ares

	s.Line = r.lineVerdict()
	if s.Moves != nil {
		r.checkMoves(s.Moves)
	}
	var split check.SplitResult
	if r.split() {
		split = check.Split(ops, r.faults, check.SplitOptions{ClusterOf: r.clusterOf, Coord: CoordCluster, Records: r.records, Floor: BlastFloor,
			Start: r.start, End: r.end})
		s.Split = &split
	}

	s.Windows = windowWork(ops, r.faults)
	closed := grantsClosed(r.faults, r.start, r.end)
	s.GrantsClosed = closed.Round(time.Second).String()
	s.Ran = time.Duration(r.end - r.start).Round(time.Second).String()
	s.MinGrants = r.o.MinGrants
	if s.MinGrants < 0 {
		s.MinGrants = int((time.Duration(r.end-r.start) - closed).Seconds())
	}
	q := res.QuorumLoss
	quorumRun := q.Outages > 0 && len(r.openKeys) > 0
	var verr error
	switch {
	case r.o.Expect && r.o.BrokenRecovery && len(q.Overlaps) == 0:
		verr = fmt.Errorf("%w: no consensus grant overlapped an untold unprotected holder (%d other violations)", ErrExpected, res.Violations)
	case r.o.Expect && res.Violations == 0 && len(s.Line.Violations) == 0 && split.Passed() && (s.Moves == nil || len(s.Moves.Details) == 0) && len(s.Batch.Details) == 0:
		verr = ErrExpected
	case r.o.Expect:
		verr = nil
	case !res.Passed():
		verr = fmt.Errorf("%w: %d (inconclusive %d)", ErrViolation, res.Violations, res.Inconclusive)
	case len(s.Line.Violations) > 0:
		verr = fmt.Errorf("%w: the durable line: %d, the first: %s", ErrViolation, len(s.Line.Violations), s.Line.Violations[0])
	case len(s.Line.ReadErrors) > 0:
		verr = fmt.Errorf("%w: the durable line could not be checked: %s", ErrViolation, s.Line.ReadErrors[0])
	case !split.Passed():
		verr = fmt.Errorf("%w: the split topology: %d, the first: %s", ErrViolation, len(split.Details), split.Details[0])
	case len(s.Batch.Details) > 0:
		verr = fmt.Errorf("%w: the batch probe: %d, the first: %s", ErrViolation, len(s.Batch.Details), s.Batch.Details[0])
	case s.Batch.Refused == 0:
		verr = fmt.Errorf("%w: the batch probe: %d bursts (%d skipped), none refused the held key beside grants: the group commit was not checked", ErrTooLittle, s.Batch.Rounds, s.Batch.Skipped)
	case s.Moves != nil && len(s.Moves.Details) > 0:
		verr = fmt.Errorf("%w: the shard moves: %d, the first: %s", ErrViolation, len(s.Moves.Details), s.Moves.Details[0])
	case r.sharded() && len(missingMoves(r.o.Faults, s.FaultKinds)) > 0:
		verr = fmt.Errorf("%w: move faults not injected: %s", ErrTooLittle, strings.Join(missingMoves(r.o.Faults, s.FaultKinds), ", "))
	case r.split() && r.clusterOutages() > 0 && split.BlastWindows == 0:
		verr = fmt.Errorf("%w: no restore, rebuild or quorum loss of the entity cluster: the blast radius was not checked", ErrTooLittle)
	case quorumRun && q.Unprotected == 0:
		verr = fmt.Errorf("%w: %d quorum losses and no unprotected grant of an open key: the open posture was not exercised", ErrTooLittle, q.Outages)
	case quorumRun && slices.Contains(q.CheckedUsablePerOutage, 0):
		verr = fmt.Errorf("%w: unprotected grants checked still usable %s after the grant, per outage: %v; an outage with none checked nothing",
			ErrTooLittle, 2*OpenTTL/3, q.CheckedUsablePerOutage)
	case quorumRun && (q.MismatchesInside == 0 || q.MismatchesOutside == 0):
		verr = fmt.Errorf("%w: acquires naming a class that does not own the key, refused: %d without quorum, %d with; each needs one",
			ErrTooLittle, q.MismatchesInside, q.MismatchesOutside)
	case retried && res.RetriesRefused == 0:
		verr = fmt.Errorf("%w: %d retried releases and none refused: a release retried after the same session took the key again was not checked", ErrTooLittle, res.RetriedReleases)
	case s.Line.Contested == 0:
		verr = fmt.Errorf("%w: no durable key was granted with waiters in line: the durable-line check checked nothing", ErrTooLittle)
	case !ares.Passed():
		verr = fmt.Errorf("%w: the audit history: %d problems, the first: %s", ErrViolation, len(ares.Problems), ares.Problems[0])
	case len(s.Windows.Idle) > 0:
		verr = fmt.Errorf("%w: %d fault windows of %s or more open for grants granted nothing, the first: %s",
			ErrTooLittle, len(s.Windows.Idle), WindowFloor, s.Windows.Idle[0])
	case res.Grants < s.MinGrants:
		verr = fmt.Errorf("%w: %d grants, at least %d needed (one per second of the run outside the %s closed by restores and rebuilds)",
			ErrTooLittle, res.Grants, s.MinGrants, s.GrantsClosed)
	}
	s.Passed = verr == nil
	if verr != nil {
		s.Reason = verr.Error()
	}
	sb, _ := json.MarshalIndent(s, "", "  ")
	_ = os.WriteFile(filepath.Join(r.dir, "summary.json"), append(sb, '\n'), 0o644)
	// Keep the histories, the faults, the summary, any visualisation and
	// the etcd members' logs (a lease etcd expired early is read there);
	// the stores' data is not needed to read a violation.
	snapshots, _ := filepath.Glob(filepath.Join(r.dir, "etcd", "*.db"))
	dataDirs, _ := filepath.Glob(filepath.Join(r.dir, "etcd", "*", "*"))
	for _, d := range append(snapshots, dataDirs...) {
		if filepath.Base(d) != "logs" {
			_ = os.RemoveAll(d)
		}
	}
	_ = os.RemoveAll(filepath.Join(r.dir, "postgres"))
	_ = os.RemoveAll(filepath.Join(r.dir, "bin"))
	return verr
}

// LineResult is the durable-line check over every store life.
type LineResult struct {
	linecheck.Result
	Lives      int      `json:"lives"`
	ReadErrors []string `json:"readErrors,omitempty"`
}

// readLine reads the durable keys' store's history of holds and waiter
// keys (its life so far); the gate calls it before a restore or a rebuild
// of that store ends a life, and at the end.
func (r *run) readLine(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	life, err := linecheck.Read(ctx, r.lineCluster().Client())
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.lineErrs = append(r.lineErrs, err.Error())
		return
	}
	r.lives = append(r.lives, life)
}

// lineVerdict checks every life read.
func (r *run) lineVerdict() LineResult {
	out := LineResult{Lives: len(r.lives), ReadErrors: r.lineErrs}
	for _, life := range r.lives {
		out.Add(linecheck.Check(life))
	}
	return out
}

// classes are the gate's classes: which keys each owns is decided by their
// spec.keys (classdir), and every key the workers take is its class's.
var classes = classdir.Fenced{Namespace: Namespace, Name: ClassName, DurableName: DurableClassName, OpenName: OpenClassName}

// gateKeys are the n keys of the fenced classes: the first half under the
// fenced class, gate/k<i>, the second half under the durable class's
// prefix, gate/d/k<i>.
func gateKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/k%d", Namespace, i)
		if i >= n/2 {
			keys[i] = fmt.Sprintf("%sk%d", classes.DurablePrefix(), i)
		}
	}
	return keys
}

// openKeys are the n keys taken under the open class, gate/o/<i>.
func openKeys(n int) []string {
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("%s%d", classes.OpenPrefix(), i))
	}
	return keys
}

// durableKeys are the keys taken under the durable class: the second half.
func durableKeys(keys []string) []string { return keys[len(keys)/2:] }

// postgresInstalled reports whether this machine has PostgreSQL's server
// binaries.
func postgresInstalled() bool {
	if _, err := exec.LookPath("initdb"); err == nil {
		return true
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	return len(m) > 0
}
