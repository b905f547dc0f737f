package gate

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/auditcheck"
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

// startTailers starts two audit tailers (lockd audit) on the cluster, both
// writing the one SQLite history, and waits until one is elected.
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
		t.Args = []string{"audit", "--etcd-endpoints", strings.Join(r.cl.Endpoints(), ","), "--audit-sqlite", r.historyDB(),
			"--metrics-listen", t.metrics, "--data-dir", filepath.Join(r.dir, "lockd", t.Name), "--log-format", "text"}
		if err := t.Start(); err != nil {
			return err
		}
		r.tailers = append(r.tailers, t)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r.tailerLeader(ctx) != nil {
			r.logf("gate: 2 audit tailers started, one elected")
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("gate: no audit tailer was elected in 30s (see %s)", filepath.Join(r.dir, "lockd", "tailer-*.log"))
}

// gauge reads one of the tailer's metrics.
func (t *tailer) gauge(ctx context.Context, name string) (float64, bool) {
	return proc.Metric(ctx, t.metrics, name)
}

func (r *run) tailerLeader(ctx context.Context) *tailer {
	for _, t := range r.tailers {
		if v, ok := t.gauge(ctx, "lockd_audit_leader"); ok && v == 1 {
			return t
		}
	}
	return nil
}

// tailerKill SIGKILLs the elected tailer while the workers keep it busy
// (its batches are written every second, so the kill lands mid-batch or
// between a batch and its checkpoint) and restarts it.
func (r *run) tailerKill(ctx context.Context, f *history.Fault) error {
	t := r.tailerLeader(ctx)
	if t == nil {
		return fmt.Errorf("no elected tailer to kill")
	}
	f.Target, f.Start = t.Name, history.Now()
	t.Kill()
	time.Sleep(time.Duration(300+r.rnd.IntN(1200)) * time.Millisecond)
	return t.Start()
}

// drainHistory waits, after the workers and arbiters stopped, until the
// elected tailer has stored everything (lag 0), then stops the tailers.
func (r *run) drainHistory(ctx context.Context) {
	if len(r.tailers) == 0 {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if t := r.tailerLeader(ctx); t != nil {
			// Two probes in a row at lag 0: the second after the last write.
			if v, ok := t.gauge(ctx, "lockd_audit_lag_revisions"); ok && v == 0 {
				time.Sleep(2 * time.Second)
				if v, ok := t.gauge(ctx, "lockd_audit_lag_revisions"); ok && v == 0 {
					break
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
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
	return auditcheck.Run(ops, rows, r.faults), nil
}

// historyCaughtUp waits, before a fault destroys the store's log (restore,
// rebuild), until the elected tailer has stored everything up to the
// store's revision now, for at most d. It reports whether it did: what the
// store loses before any tailer read it is lost with the store, not missed
// by the tailer, and the audit check must tell the two apart.
func (r *run) historyCaughtUp(ctx context.Context, d time.Duration) bool {
	if len(r.tailers) == 0 {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := r.cl.Client().Get(cctx, "/sys/epoch")
	if err != nil {
		return false
	}
	head := float64(resp.Header.Revision)
	for cctx.Err() == nil {
		if t := r.tailerLeader(cctx); t != nil {
			if v, ok := t.gauge(cctx, "lockd_audit_checkpoint_revision"); ok && v >= head {
				return true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
