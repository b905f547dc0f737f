// Package bench runs lockd side by side with a raw etcd Txn lock, etcd's
// concurrency.Mutex and Redis redsync against ONE etcd (and one Redis) in
// the same run, and lockd's renewal at the seed's scale. Absolute figures
// on shared machines are noise; same-run ratios are not.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockd-dev/lockd/ci/bench/internal/renewal"
	"github.com/lockd-dev/lockd/ci/bench/internal/report"
	"github.com/lockd-dev/lockd/ci/bench/internal/result"
	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	"github.com/lockd-dev/lockd/ci/internal/proc"
)

// Options configure a run.
type Options struct {
	Modes     []string // rig.Embedded, rig.External
	Duration  time.Duration
	Scenarios []string
	Systems   []string
	Out       string
	Profile   bool
	// ProfileScenario is the scenario whose lockd run is profiled.
	ProfileScenario string
	// LockdArgs are more flags for lockd in the scenarios' runs (e.g.
	// --max-batch=1, to measure without group commit).
	LockdArgs []string
	// LockdBin, when set, is the lockd binary to run instead of one built
	// from this tree (e.g. a build of another commit, to compare two
	// builds run after run in ABBA order).
	LockdBin string
	// Renewal at scale; Sessions 0 skips it.
	RenewalSessions, RenewalHolds int
	RenewalSteady                 time.Duration
	Log                           io.Writer
}

// Scenario names.
var AllScenarios = []string{"uncontended-w1", "uncontended-w16", "uncontended-w64", "contended-w64", "zipf-w64"}

// AllSystems in the order they run in each scenario.
var AllSystems = []string{result.Raw, result.EtcdMutex, result.Lockd, result.LockdDurable, result.Redsync}

// ErrUsage: bad options.
var ErrUsage = errors.New("bench: usage")

type scenario struct {
	name    string
	workers int
	keys    int
	key     func(worker int, rnd *rand.Rand) string
}

func scenarioNamed(name string) (scenario, error) {
	own := func(w int, _ *rand.Rand) string { return fmt.Sprintf("u/%d", w) }
	switch name {
	case "uncontended-w1":
		return scenario{name, 1, 1, own}, nil
	case "uncontended-w16":
		return scenario{name, 16, 16, own}, nil
	case "uncontended-w64":
		return scenario{name, 64, 64, own}, nil
	case "contended-w64":
		return scenario{name, 64, 1, func(int, *rand.Rand) string { return "c" }}, nil
	case "zipf-w64":
		const keys = 1000
		return scenario{name, 64, keys, nil}, nil
	}
	return scenario{}, fmt.Errorf("%w: unknown scenario %q; scenarios: %v", ErrUsage, name, AllScenarios)
}

// Run runs the benchmark and writes the report; it returns the run.
func Run(ctx context.Context, o Options) ([]*result.Run, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	lockd := o.LockdBin
	if lockd == "" {
		lockd = filepath.Join(o.Out, "bin", "lockd")
		logf(o.Log, "building lockd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", lockd, "github.com/lockd-dev/lockd/cmd/lockd").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("bench: building lockd: %v\n%s", err, out)
		}
	}
	redisAddr, stopRedis, redisWhy := startRedis(o.Out, slices.Contains(o.Systems, result.Redsync))
	defer stopRedis()

	var runs []*result.Run
	for mi, mode := range o.Modes {
		run := &result.Run{Started: time.Now().UTC(), Mode: mode, Duration: o.Duration.String(),
			Machine: fmt.Sprintf("%d CPUs, %s %s/%s", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)}
		dir := filepath.Join(o.Out, mode)
		r, err := rig.Start(ctx, rig.Config{Dir: dir, Mode: mode, Exe: exe, Lockd: lockd, Identities: 64, Pprof: o.Profile, LockdArgs: o.LockdArgs})
		if err != nil {
			return runs, err
		}
		logf(o.Log, "%s: etcd %v, lockd %s", mode, r.EtcdEndpoints, r.Lockd.Addr)
		for _, name := range o.Scenarios {
			sc, err := scenarioNamed(name)
			if err != nil {
				r.Close()
				return runs, err
			}
			out := &result.Scenario{Name: sc.name, Workers: sc.workers, Keys: sc.keys, Ratios: map[string]float64{}}
			// Two passes in opposite orders (ABBA), half the duration each:
			// whatever one system leaves behind in etcd, or any drift of
			// the machine, weighs on every system alike.
			half := o.Duration / 2
			parts := map[string][]measured{}
			order := append([]string(nil), o.Systems...)
			for pass := range 2 {
				if pass == 1 {
					slices.Reverse(order)
				}
				for _, sys := range order {
					var stopProf func() []string
					if pass == 0 && o.Profile && (sys == result.Lockd || sys == result.LockdDurable) && sc.name == o.ProfileScenario {
						stopProf = profileBoth(r, filepath.Join(o.Out, mode+"-"+sc.name+"-"+sys), half)
					}
					parts[sys] = append(parts[sys], measure(ctx, half, r, sc, sys, redisAddr, redisWhy))
					if stopProf != nil {
						run.Profiles = append(run.Profiles, stopProf()...)
					}
				}
			}
			for _, sys := range o.Systems {
				s := merge(sys, parts[sys])
				logf(o.Log, "%s %-16s %-10s %8.0f grants/s  p50 %-9s p99 %-9s errors %d %s", mode, sc.name, sys,
					s.GrantsPerSec, s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond), s.Errors, s.Skipped)
				out.Systems = append(out.Systems, s)
			}
			ratios(out)
			run.Scenarios = append(run.Scenarios, out)
		}
		r.Close()
		if o.RenewalSessions > 0 && mi == len(o.Modes)-1 {
			// On a lockd of its own, with the audit tailer on: every
			// session open, grant and close goes into the history while
			// the renewals must hold.
			rr, err := rig.Start(ctx, rig.Config{Dir: filepath.Join(o.Out, mode+"-renewal"), Mode: mode, Exe: exe, Lockd: lockd,
				Identities: 64, Audit: "on", LockdArgs: o.LockdArgs})
			if err != nil {
				return runs, err
			}
			logf(o.Log, "%s: renewal at scale: %d sessions, %d holds, %s steady, audit tailer on", mode, o.RenewalSessions, o.RenewalHolds, o.RenewalSteady)
			ren, err := renewal.Run(ctx, renewal.Config{Addr: rr.Lockd.Addr, EtcdURL: rr.EtcdEndpoints[0],
				LockdPID: rr.LockdPID(), EtcdPID: rr.EtcdPID(), Identities: 64, Sessions: o.RenewalSessions,
				Holds: o.RenewalHolds, Steady: o.RenewalSteady, Log: o.Log})
			if err != nil {
				logf(o.Log, "renewal: %v", err)
			}
			if ren != nil {
				ren.Audit = true
			}
			run.Renewal = ren
			rr.Close()
		}
		// The tailer's and tracing's costs are measured on uncontended W=64:
		// only when that scenario is asked for.
		if mode == rig.Embedded && slices.Contains(o.Systems, result.Lockd) && slices.Contains(o.Scenarios, tracingScenario) {
			if run.Audit, err = auditCompare(ctx, o, exe, lockd); err != nil {
				return runs, err
			}
			if run.Tracing, err = tracingCompare(ctx, o, exe, lockd); err != nil {
				return runs, err
			}
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// Report prints the table and writes JSON and charts for each run.
func Report(w io.Writer, out string, runs []*result.Run) error {
	for _, run := range runs {
		report.Table(w, run)
		dir := filepath.Join(out, run.Mode)
		if err := report.WriteJSON(filepath.Join(dir, "result.json"), run); err != nil {
			return err
		}
		charts, err := report.Charts(filepath.Join(dir, "charts"), run)
		if err != nil {
			return err
		}
		var md strings.Builder
		report.Markdown(&md, run)
		if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(w, "\n%s: %s, %d charts in %s\n", run.Mode, filepath.Join(dir, "result.json"), len(charts), filepath.Join(dir, "charts"))
		for _, p := range run.Profiles {
			fmt.Fprintf(w, "profile: %s  (go tool pprof -top %s)\n", p, p)
		}
	}
	return nil
}

func ratios(sc *result.Scenario) {
	l, raw, mu := sc.Find(result.Lockd), sc.Find(result.Raw), sc.Find(result.EtcdMutex)
	if l == nil || l.Skipped != "" {
		return
	}
	if raw != nil && raw.Skipped == "" && raw.GrantsPerSec > 0 {
		sc.Ratios["lockd/raw"] = l.GrantsPerSec / raw.GrantsPerSec
		sc.Ratios["lockd-raw p50 ms"] = float64(l.P50-raw.P50) / float64(time.Millisecond)
	}
	if d := sc.Find(result.LockdDurable); d != nil && d.Skipped == "" && l.GrantsPerSec > 0 {
		sc.Ratios["lockd-durable/lockd"] = d.GrantsPerSec / l.GrantsPerSec
	}
	if mu != nil && mu.Skipped == "" && mu.GrantsPerSec > 0 {
		sc.Ratios["lockd/etcd-mutex"] = l.GrantsPerSec / mu.GrantsPerSec
		if d := sc.Find(result.LockdDurable); d != nil && d.Skipped == "" {
			sc.Ratios["lockd-durable/etcd-mutex"] = d.GrantsPerSec / mu.GrantsPerSec
		}
	}
}

func newSystem(name string, sc scenario, r *rig.Rig, redisAddr, redisWhy string) (system, string, error) {
	switch name {
	case result.Raw:
		s, err := newRaw(r.EtcdEndpoints)
		return s, "", err
	case result.EtcdMutex:
		s, err := newMutex(r.EtcdEndpoints)
		return s, "", err
	case result.Lockd:
		return &lockdSystem{addr: r.Lockd.Addr, class: rig.Class, prefix: rig.Namespace + "/", shared: sc.keys == sc.workers, opts: r.ClientOptions}, "", nil
	case result.LockdDurable:
		return &lockdSystem{addr: r.Lockd.Addr, class: rig.DurableClass, prefix: rig.DurablePrefix, shared: sc.keys == sc.workers, opts: r.ClientOptions}, "", nil
	case result.Redsync:
		if redisAddr == "" {
			return nil, redisWhy, nil
		}
		return newRedsync(redisAddr), "", nil
	}
	return nil, "", fmt.Errorf("%w: unknown system %q; systems: %v", ErrUsage, name, AllSystems)
}

// measure runs one system in one scenario for the run's duration: each
// worker takes a key, records the time to the grant, and releases at once.
// measured is one pass of one system: its figures and its latencies.
type measured struct {
	sys *result.System
	lat []time.Duration
}

// merge adds up a system's passes.
func merge(name string, parts []measured) *result.System {
	out := &result.System{Name: name, Fencing: name != result.Redsync}
	var lat []time.Duration
	var lockdCPU, etcdCPU, writes, batched, fsync float64
	for _, p := range parts {
		if p.sys.Skipped != "" {
			out.Skipped = p.sys.Skipped
			return out
		}
		out.Grants += p.sys.Grants
		out.Errors += p.sys.Errors
		out.Elapsed += p.sys.Elapsed
		writes += p.sys.WritesPerGrant * float64(p.sys.Grants)
		batched += p.sys.MeanBatch * float64(p.sys.Grants)
		lockdCPU += p.sys.LockdCPU * p.sys.Elapsed.Seconds()
		fsync += float64(p.sys.EtcdFsyncMean) * p.sys.Elapsed.Seconds()
		out.Batches = mergeBatches(out.Batches, p.sys.Batches)
		etcdCPU += p.sys.EtcdCPU * p.sys.Elapsed.Seconds()
		lat = append(lat, p.lat...)
	}
	if out.Elapsed > 0 {
		out.GrantsPerSec = float64(out.Grants) / out.Elapsed.Seconds()
		out.LockdCPU = lockdCPU / out.Elapsed.Seconds()
		out.EtcdCPU = etcdCPU / out.Elapsed.Seconds()
		out.EtcdFsyncMean = time.Duration(fsync / out.Elapsed.Seconds())
	}
	if out.Grants > 0 {
		out.WritesPerGrant = writes / float64(out.Grants)
		out.MeanBatch = batched / float64(out.Grants)
		if name == result.Lockd || name == result.LockdDurable {
			out.LockdCPUPerGrant = time.Duration(lockdCPU / float64(out.Grants) * float64(time.Second))
		}
	}
	out.Summarize(lat)
	return out
}

func measure(ctx context.Context, d time.Duration, r *rig.Rig, sc scenario, name, redisAddr, redisWhy string) measured {
	out := &result.System{Name: name, Fencing: name != result.Redsync}
	sys, skip, err := newSystem(name, sc, r, redisAddr, redisWhy)
	if err != nil || skip != "" {
		out.Skipped = skip
		if err != nil {
			out.Skipped = err.Error()
		}
		return measured{sys: out}
	}
	defer sys.close()
	lockers := make([]locker, sc.workers)
	for i := range lockers {
		if lockers[i], err = sys.worker(ctx, i); err != nil {
			out.Skipped = fmt.Sprintf("worker %d: %v", i, err)
			for _, l := range lockers[:i] {
				l.close()
			}
			return measured{sys: out}
		}
	}
	defer func() {
		for _, l := range lockers {
			l.close()
		}
	}()
	lu0, _ := rig.ReadUsage(r.LockdPID())
	eu0, _ := rig.ReadUsage(r.EtcdPID())
	w0, _ := proposals(ctx, r)
	b0, bn0 := batches(ctx, r)
	hist0 := batchHistogram(ctx, r)
	f0, fn0 := fsyncs(ctx, r)
	start := time.Now()
	deadline := start.Add(d)
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), 42))
			zipf := rand.NewZipf(rnd, 1.1, 1, uint64(sc.keys-1))
			var lat []time.Duration
			var errs int
			for time.Now().Before(deadline) && ctx.Err() == nil {
				key := ""
				if sc.key != nil {
					key = sc.key(i, rnd)
				} else {
					key = fmt.Sprintf("z/%d", zipf.Uint64())
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				t0 := time.Now()
				release, err := l.lock(cctx, key)
				d := time.Since(t0)
				if err != nil {
					cancel()
					errs++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				lat = append(lat, d)
				if err := release(cctx); err != nil {
					errs++
				}
				cancel()
			}
			mu.Lock()
			all = append(all, lat...)
			out.Errors += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.Elapsed = time.Since(start)
	lu1, _ := rig.ReadUsage(r.LockdPID())
	eu1, _ := rig.ReadUsage(r.EtcdPID())
	w1, ok := proposals(ctx, r)
	if f1, fn1 := fsyncs(ctx, r); fn1 > fn0 {
		out.EtcdFsyncMean = time.Duration((f1 - f0) / (fn1 - fn0) * float64(time.Second))
	}
	if b1, bn1 := batches(ctx, r); (name == result.Lockd || name == result.LockdDurable) && bn1 > bn0 {
		out.MeanBatch = (b1 - b0) / (bn1 - bn0)
		out.Batches = batchSpread(hist0, batchHistogram(ctx, r))
	}
	out.Grants = len(all)
	if ok && out.Grants > 0 {
		out.WritesPerGrant = (w1 - w0) / float64(out.Grants)
	}
	out.GrantsPerSec = float64(out.Grants) / out.Elapsed.Seconds()
	out.LockdCPU = (lu1.CPU - lu0.CPU).Seconds() / out.Elapsed.Seconds()
	if r.EtcdPID() != r.LockdPID() {
		out.EtcdCPU = (eu1.CPU - eu0.CPU).Seconds() / out.Elapsed.Seconds()
	}
	if (name == result.Lockd || name == result.LockdDurable) && out.Grants > 0 {
		out.LockdCPUPerGrant = (lu1.CPU - lu0.CPU) / time.Duration(out.Grants)
	}
	return measured{sys: out, lat: all}
}

// batchHistogram reads lockd_commit_batch_size's cumulative bucket counts
// by upper bound, over every cluster.
func batchHistogram(ctx context.Context, r *rig.Rig) map[float64]float64 {
	out := map[float64]float64{}
	for series, v := range proc.Series(ctx, r.Lockd.Metrics, "lockd_commit_batch_size_bucket") {
		_, le, ok := strings.Cut(series, `le="`)
		if !ok {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		if bound, err := strconv.ParseFloat(le, 64); err == nil { // +Inf too
			out[bound] += v
		}
	}
	return out
}

// batchSpread is the transactions of each bucket between two readings of
// batchHistogram, smallest bound first; buckets with none are left out.
func batchSpread(before, after map[float64]float64) []result.BatchBucket {
	bounds := slices.Sorted(maps.Keys(after))
	var out []result.BatchBucket
	prev, from := 0.0, 1
	for _, b := range bounds {
		cum := after[b] - before[b]
		if n := cum - prev; n > 0 && !math.IsInf(b, 1) {
			out = append(out, result.BatchBucket{From: from, UpTo: int(b), Txns: n})
		}
		prev, from = cum, int(b)+1
	}
	return out
}

// fsyncs reads etcd's WAL fsync histogram: the seconds spent and the
// fsyncs made.
func fsyncs(ctx context.Context, r *rig.Rig) (secs, n float64) {
	if len(r.EtcdEndpoints) == 0 {
		return 0, 0
	}
	addr := strings.TrimPrefix(r.EtcdEndpoints[0], "http://")
	secs, _ = proc.Metric(ctx, addr, "etcd_disk_wal_fsync_duration_seconds_sum")
	n, _ = proc.Metric(ctx, addr, "etcd_disk_wal_fsync_duration_seconds_count")
	return secs, n
}

// mergeBatches adds b's buckets to a's.
func mergeBatches(a, b []result.BatchBucket) []result.BatchBucket {
	n := map[int]result.BatchBucket{}
	for _, x := range slices.Concat(a, b) {
		m := n[x.UpTo]
		m.From, m.UpTo, m.Txns = x.From, x.UpTo, m.Txns+x.Txns
		n[x.UpTo] = m
	}
	var out []result.BatchBucket
	for _, up := range slices.Sorted(maps.Keys(n)) {
		out = append(out, n[up])
	}
	return out
}

// batches reads lockd's group commit histogram: the grants and releases
// its transactions carried, and the transactions.
func batches(ctx context.Context, r *rig.Rig) (parts, txns float64) {
	parts, _ = proc.Metric(ctx, r.Lockd.Metrics, "lockd_commit_batch_size_sum")
	txns, _ = proc.Metric(ctx, r.Lockd.Metrics, "lockd_commit_batch_size_count")
	return parts, txns
}

// proposals reads etcd's count of committed proposals (consensus writes)
// from its metrics, on its client URL.
func proposals(ctx context.Context, r *rig.Rig) (float64, bool) {
	if len(r.EtcdEndpoints) == 0 {
		return 0, false
	}
	return proc.Metric(ctx, strings.TrimPrefix(r.EtcdEndpoints[0], "http://"), "etcd_server_proposals_committed_total")
}

// profileBoth starts lockd's CPU profile (prefix-lockd-cpu.pprof, then its
// allocations) and the load generator's own (prefix-client-cpu.pprof, the
// client side of lockd) for about d; the function it returns waits for
// them and returns the files written.
func profileBoth(r *rig.Rig, prefix string, d time.Duration) func() []string {
	prof := startProfile(r.Lockd.Metrics, prefix+"-lockd", d)
	clientProf, err := os.Create(prefix + "-client-cpu.pprof")
	if err == nil && pprof.StartCPUProfile(clientProf) != nil {
		_ = clientProf.Close()
		clientProf = nil
	}
	return func() []string {
		paths := prof.finish()
		if clientProf != nil {
			pprof.StopCPUProfile()
			_ = clientProf.Close()
			paths = append(paths, clientProf.Name())
		}
		return paths
	}
}

// profiler takes lockd's CPU profile while a run goes on, then its
// allocation profile.
type profiler struct {
	metrics string
	prefix  string
	done    chan []string
}

func startProfile(metrics, prefix string, d time.Duration) *profiler {
	p := &profiler{metrics: metrics, prefix: prefix, done: make(chan []string, 1)}
	secs := max(1, int(d.Seconds())-1)
	go func() {
		var paths []string
		if err := fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", metrics, secs), prefix+"-cpu.pprof"); err == nil {
			paths = append(paths, prefix+"-cpu.pprof")
		}
		p.done <- paths
	}()
	return p
}

func (p *profiler) finish() []string {
	paths := <-p.done
	if err := fetch(fmt.Sprintf("http://%s/debug/pprof/allocs", p.metrics), p.prefix+"-allocs.pprof"); err == nil {
		paths = append(paths, p.prefix+"-allocs.pprof")
	}
	return paths
}

func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// startRedis starts a local redis-server for redsync, or says why not.
func startRedis(out string, want bool) (addr string, stop func(), why string) {
	stop = func() {}
	if !want {
		return "", stop, "not selected"
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", stop, "redis-server is not installed (apt-get install -y redis-server)"
	}
	ports, err := proc.FreePorts(1)
	if err != nil {
		return "", stop, err.Error()
	}
	addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	p := &proc.Proc{Name: "redis-server", Bin: bin, Log: filepath.Join(out, "redis.log"),
		Args: []string{"--bind", "127.0.0.1", "--port", fmt.Sprint(ports[0]), "--save", "", "--appendonly", "no"}}
	if err := p.Start(); err != nil {
		return "", stop, err.Error()
	}
	for range 100 {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, func() { p.Stop(5 * time.Second) }, ""
}

func logf(w io.Writer, format string, args ...any) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// Load reads the result.json files of a finished run folder, to render
// them again (--render).
func Load(out string) ([]*result.Run, error) {
	var runs []*result.Run
	for _, mode := range []string{rig.Embedded, rig.External} {
		b, err := os.ReadFile(filepath.Join(out, mode, "result.json"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var run result.Run
		if err := json.Unmarshal(b, &run); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", out, err)
		}
		runs = append(runs, &run)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%w: no result.json under %s/{embedded,external}", ErrUsage, out)
	}
	return runs, nil
}
