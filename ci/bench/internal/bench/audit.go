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

// abbaPass is one pass of a comparison: the rig (Dir, Mode, Exe, Lockd
// and Identities are filled in) and, optionally, work that runs alongside
// the measurement until it ends.
type abbaPass struct {
	rig    rig.Config
	during func(ctx context.Context, r *rig.Rig)
}

// abba measures lockd alone in scenario sc on each side, rounds times in
// the order of sides and then back (off, on, on, off for two sides: ABBA),
// each pass on a fresh embedded lockd that setup configures, and merges
// each side's passes: one run, so every side sees the same machine, and
// drift over the run falls on every side alike. Each side runs
// o.Duration in all. It returns each side's passes merged, and each side's
// passes in the order they ran (two per round).
func abba(ctx context.Context, o Options, exe, lockd, name string, sc scenario, sides []string, rounds int, setup func(side string) abbaPass) (map[string]*result.System, map[string][]*result.System, error) {
	half := o.Duration / time.Duration(2*rounds)
	var order []string
	for range rounds {
		back := slices.Clone(sides)
		slices.Reverse(back)
		order = append(append(order, sides...), back...)
	}
	passes := map[string][]measured{}
	for i, side := range order {
		p := setup(side)
		p.rig.Dir = filepath.Join(o.Out, name, fmt.Sprintf("%d-%s", i, side))
		p.rig.Mode, p.rig.Exe, p.rig.Lockd, p.rig.Identities = rig.Embedded, exe, lockd, 64
		// With --profile, each side's first pass is profiled: lockd's CPU
		// and allocations, and the load generator's CPU.
		profiled := o.Profile && len(passes[side]) == 0
		p.rig.Pprof = profiled
		r, err := rig.Start(ctx, p.rig)
		if err != nil {
			return nil, nil, err
		}
		var stopProf func() []string
		if profiled {
			stopProf = profileBoth(r, filepath.Join(o.Out, name+"-"+side), half)
		}
		var wg sync.WaitGroup
		sctx, stop := context.WithCancel(ctx)
		if p.during != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.during(sctx, r) }()
		}
		m := measure(ctx, half, r, sc, result.Lockd, "", "")
		if stopProf != nil {
			logf(o.Log, "%s %s: profiles %v", name, side, stopProf())
		}
		stop()
		wg.Wait()
		r.Close()
		passes[side] = append(passes[side], m)
		logf(o.Log, "%s %s: %.0f grants/s (%s)", name, side, m.sys.GrantsPerSec, p.rig.Dir)
	}
	out, each := map[string]*result.System{}, map[string][]*result.System{}
	for side, ms := range passes {
		out[side] = merge(result.Lockd, ms)
		for _, m := range ms {
			each[side] = append(each[side], m.sys)
		}
	}
	return out, each, nil
}

// auditCompare measures lockd with the audit tailer off and on (abba) and
// samples the tailer's lag while it is on.
func auditCompare(ctx context.Context, o Options, exe, lockd string) (*result.Audit, error) {
	sc, err := scenarioNamed(auditScenario)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var lags []time.Duration
	got, _, err := abba(ctx, o, exe, lockd, "audit", sc, []string{"off", "on"}, 1, func(side string) abbaPass {
		if side == "off" {
			return abbaPass{rig: rig.Config{Audit: "off"}}
		}
		return abbaPass{rig: rig.Config{Audit: "on"}, during: func(ctx context.Context, r *rig.Rig) {
			sampled := sampleLag(ctx, r.Lockd.Metrics)
			mu.Lock()
			defer mu.Unlock()
			lags = append(lags, sampled...)
		}}
	})
	if err != nil {
		return nil, err
	}
	a := &result.Audit{Scenario: auditScenario, OffGrantsPerSec: got["off"].GrantsPerSec, OnGrantsPerSec: got["on"].GrantsPerSec, Samples: len(lags)}
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
