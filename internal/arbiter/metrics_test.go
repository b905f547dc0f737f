package arbiter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestMetricLabelsAreBounded lists every metric's labels after some traffic
// and fails on any label outside the bounded set: never a key or a token.
func TestMetricLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := lockdtest.Start(t, lockdtest.Options{Registry: reg, Audit: true}) // the audit tailer's metrics too
	alice, _ := env.Raw(t, lockdtest.Alice)
	sid := openSession(t, alice, 15*time.Second)
	for _, key := range []string{"t/m/1", "t/m/1", "t/../bad", "absent/x"} {
		_, _ = acquire(t.Context(), alice, sid, key, "std", 0)
	}
	lockdtest.WaitFor(t, 10*time.Second, "the audit tailer's lag gauge", func() bool {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "lockd_audit_lag_revisions" {
				return true
			}
		}
		return false
	})
	allowed := map[string]bool{"namespace": true, "class": true, "tier": true, "cluster": true, "code": true}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "lockd_") {
			t.Errorf("metric %s lacks the lockd_ prefix", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				seen++
				if !allowed[lp.GetName()] {
					t.Errorf("metric %s has label %q outside the bounded set", mf.GetName(), lp.GetName())
				}
				if strings.Contains(lp.GetValue(), "/m/") {
					t.Errorf("metric %s label %s carries a key: %q", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no labelled metrics gathered")
	}
	// A grant says the tier of its class and the etcd cluster it was made on.
	grants := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "lockd_grants_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				grants[lp.GetName()] = lp.GetValue()
			}
		}
	}
	// lockd names its embedded etcd "embedded".
	if grants["class"] != "std" || grants["tier"] != "entity" || grants["cluster"] != "embedded" {
		t.Fatalf("lockd_grants_total labels = %v; want class std, tier entity, cluster embedded", grants)
	}
}

// TestEpochGaugesForAlerts: the gauges the grace and quorum alerts read,
// one per cluster (label cluster). An advance turns
// lockd_epoch_grace_active on at once, and the epoch read age stays within
// the refresh interval while the store answers.
func TestEpochGaugesForAlerts(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := lockdtest.Start(t, lockdtest.Options{Registry: reg})
	gauge := func(name string) (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name || len(mf.GetMetric()) != 1 {
				continue
			}
			m := mf.GetMetric()[0]
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "cluster" || m.GetLabel()[0].GetValue() != "embedded" {
				t.Fatalf("%s labels %v; want cluster=embedded", name, m.GetLabel())
			}
			return m.GetGauge().GetValue(), true
		}
		return 0, false
	}
	for _, name := range []string{"lockd_sealed", "lockd_epoch", "lockd_open_posture", "lockd_open_grace_active"} {
		if _, ok := gauge(name); !ok {
			t.Fatalf("%s not exported for the cluster", name)
		}
	}
	if v, ok := gauge("lockd_epoch_grace_active"); !ok || v != 0 {
		t.Fatalf("lockd_epoch_grace_active before any advance = %v (exported %v), want 0", v, ok)
	}
	if v, ok := gauge("lockd_epoch_read_age_seconds"); !ok || v < 0 || v > 3 {
		t.Fatalf("lockd_epoch_read_age_seconds = %v (exported %v), want within MaxEpochAge", v, ok)
	}
	env.AdvanceEpoch(t, 1, "metrics test")
	if v, _ := gauge("lockd_epoch_grace_active"); v != 1 {
		t.Fatalf("lockd_epoch_grace_active after an advance = %v, want 1", v)
	}
}
