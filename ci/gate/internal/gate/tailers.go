package gate

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/auditcheck"
	"github.com/lockd-dev/lockd/ci/gate/internal/check"
	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/ci/internal/proc"
	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/audit/sqlite"
)

// tailer is one `lockd audit` process: two run, one is elected.
type tailer struct {
	proc.Proc
	metrics string
}

func (r *run) historyDB() string { return filepath.Join(r.dir, "audit.db") }

// startTailers starts two audit tailers (lockd audit) on the clusters,
// both writing the one SQLite history, and waits until one is elected on
// each cluster.
func (r *run) startTailers(ctx context.Context, lockdBin string) error {
	ports, err := proc.FreePorts(2)
	if err != nil {
		return err
	}
	for i := range 2 {
		t := &tailer{metrics: fmt.Sprintf("127.0.0.1:%d", ports[i])}
		t.Name = fmt.Sprintf("tailer-%d", i)
		t.Bin = lockdBin
		t.Log = filepath.Join(r.dir, "lockd", t.Name+".log")
		t.Args = append(append([]string{"audit"}, r.etcdArgs()...), "--audit-sqlite", r.historyDB(),
			"--metrics-listen", t.metrics, "--data-dir", filepath.Join(r.dir, "lockd", t.Name), "--log-format", "text")
		if err := t.Start(); err != nil {
			return err
		}
		r.tailers = append(r.tailers, t)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range r.clusters {
		of, err := r.labelOf(ctx, c)
		if err != nil {
			return err
		}
		for r.tailerLeader(ctx, of) == nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("gate: no audit tailer was elected on cluster %s in 30s (see %s)", c.label("cluster"), filepath.Join(r.dir, "lockd", "tailer-*.log"))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	r.logf("gate: 2 audit tailers started, one elected on each of %d clusters", len(r.clusters))
	return nil
}

// labelOf is the label selector of c's audit gauges: they are by cluster
// ID, which a restore changes.
func (r *run) labelOf(ctx context.Context, c *etcdCluster) (string, error) {
	id, err := c.ID(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`{cluster="%s"}`, id), nil
}

// gauge reads one of the tailer's metrics.
func (t *tailer) gauge(ctx context.Context, name string) (float64, bool) {
	return proc.Metric(ctx, t.metrics, name)
}

// tailerLeader is the tailer elected on the cluster of the label
// selector of (labelOf), nil when none is.
func (r *run) tailerLeader(ctx context.Context, of string) *tailer {
	for _, t := range r.tailers {
		if v, ok := t.gauge(ctx, "lockd_audit_leader"+of); ok && v == 1 {
			return t
		}
	}
	return nil
}

// tailerKill SIGKILLs the elected tailer while the workers keep it busy
// (its batches are written every second, so the kill lands mid-batch or
// between a batch and its checkpoint) and restarts it.
func (r *run) tailerKill(ctx context.Context, f *history.Fault) error {
	c := r.clusters[r.rnd.IntN(len(r.clusters))]
	of, err := r.labelOf(ctx, c)
	if err != nil {
		return err
	}
	t := r.tailerLeader(ctx, of)
	if t == nil {
		return fmt.Errorf("no elected tailer of cluster %s to kill", c.label("cluster"))
	}
	f.Target, f.Start = t.Name, history.Now()
	t.Kill()
	time.Sleep(time.Duration(300+r.rnd.IntN(1200)) * time.Millisecond)
	return t.Start()
}

// drainHistory waits, after the workers and arbiters stopped, until the
// elected tailer has stored everything, then stops the tailers.
func (r *run) drainHistory(ctx context.Context) {
	for _, c := range r.clusters {
		if !r.historyCaughtUp(ctx, 30*time.Second, c) {
			r.logf("gate: the audit history did not catch up with cluster %s in 30s; the audit check will say what is missing", c.label("cluster"))
		}
	}
	for _, t := range r.tailers {
		t.Stop(5 * time.Second)
	}
}

// auditVerdict reads the history and checks it against what was observed.
func (r *run) auditVerdict(ctx context.Context, ops []history.Op) (auditcheck.Result, error) {
	sink, err := sqlite.Open(ctx, r.historyDB())
	if err != nil {
		return auditcheck.Result{}, err
	}
	defer sink.Close()
	rows, err := sink.Query(ctx, audit.Filter{})
	if err != nil {
		return auditcheck.Result{}, err
	}
	var clusterOf check.ClusterOf
	if r.split() {
		clusterOf = r.clusterOf
	}
	return auditcheck.Run(ops, rows, r.faults, clusterOf), nil
}

// historyCaughtUp waits until the tailer elected on c has read its store up
// to its revision at the call, for at most d, and reports whether it did.
// Before a fault destroys the store's log (restore, rebuild), what the
// store loses before any tailer read it is lost with the store, not missed
// by the tailer, and the audit check must tell the two apart.
//
// The tailer's gauges are per cluster ID: after a restore the store has a
// new one and revisions below the old store's, so only the gauges of the
// store's own cluster say anything. The tailer has read the store up to
// head when a probe of it saw at least head (lockd_audit_store_revision,
// set last) and the lag as of that probe, or a later one, is 0.
func (r *run) historyCaughtUp(ctx context.Context, d time.Duration, c *etcdCluster) bool {
	if len(r.tailers) == 0 {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := c.Client().Get(cctx, "/sys/epoch")
	if err != nil {
		return false
	}
	head := float64(resp.Header.Revision)
	of := fmt.Sprintf(`{cluster="%x"}`, resp.Header.ClusterId)
	for cctx.Err() == nil {
		if t := r.tailerLeader(cctx, of); t != nil {
			probed, ok := t.gauge(cctx, "lockd_audit_store_revision"+of)
			if ok && probed >= head {
				if lag, ok := t.gauge(cctx, "lockd_audit_lag_revisions"+of); ok && lag == 0 {
					return true
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
