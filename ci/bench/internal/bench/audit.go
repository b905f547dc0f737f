package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	"github.com/lockd-dev/lockd/ci/internal/proc"
)

// auditScenario is where the tailer's cost is measured: the uncontended
// W=64 rate is lockd's highest grant rate, so the most history per second.
const auditScenario = "uncontended-w64"

// auditCompare measures lockd with the audit tailer off and on in one run,
// ABBA (off, on, on, off), each pass half of d on a fresh embedded lockd,
// and samples the tailer's lag while it is on.
func auditCompare(ctx context.Context, o Options, exe, lockd string) (*result.Audit, error) {
	sc, err := scenarioNamed(auditScenario)
	if err != nil {
		return nil, err
	}
	half := o.Duration / 2
	var off, on []measured
	var lags []time.Duration
	for i, mode := range []string{"off", "on", "on", "off"} {
		dir := filepath.Join(o.Out, "audit", fmt.Sprintf("%d-%s", i, mode))
		r, err := rig.Start(ctx, rig.Config{Dir: dir, Mode: rig.Embedded, Exe: exe, Lockd: lockd, Identities: 64, Audit: mode})
		if err != nil {
			return nil, err
		}
		var wg sync.WaitGroup
		sctx, stop := context.WithCancel(ctx)
		var got []time.Duration
		if mode == "on" {
			wg.Add(1)
			go func() { defer wg.Done(); got = sampleLag(sctx, r.Lockd.Metrics) }()
		}
		m := measure(ctx, half, r, sc, result.Lockd, "", "")
		stop()
		wg.Wait()
		r.Close()
		if mode == "on" {
			on, lags = append(on, m), append(lags, got...)
		} else {
			off = append(off, m)
		}
		logf(o.Log, "audit %s: %s", mode, dir)
	}
	a := &result.Audit{Scenario: auditScenario,
		OffGrantsPerSec: merge(result.Lockd, off).GrantsPerSec, OnGrantsPerSec: merge(result.Lockd, on).GrantsPerSec, Samples: len(lags)}
	if a.OffGrantsPerSec > 0 {
		a.Ratio = a.OnGrantsPerSec / a.OffGrantsPerSec
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		a.LagP99, a.LagMax = lags[(len(lags)*99)/100], lags[len(lags)-1]
	}
	logf(o.Log, "audit: lockd %s %.0f grants/s with the tailer off, %.0f on (%.2fx); tailer lag p99 %s, max %s (%d samples)",
		auditScenario, a.OffGrantsPerSec, a.OnGrantsPerSec, a.Ratio, a.LagP99, a.LagMax, a.Samples)
	return a, nil
}

// sampleLag reads lockd_audit_lag_seconds every 250 ms until ctx ends.
func sampleLag(ctx context.Context, metrics string) []time.Duration {
	var out []time.Duration
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		if v, ok := proc.Metric(ctx, metrics, "lockd_audit_lag_seconds"); ok {
			out = append(out, time.Duration(v*float64(time.Second)))
		}
	}
}
