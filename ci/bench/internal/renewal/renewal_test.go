package renewal

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
)

// lockdBin is the lockd binary TestMain builds.
var lockdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "renewal-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lockdBin = filepath.Join(dir, "lockd")
	out, err := exec.Command("go", "build", "-o", lockdBin, "github.com/lockd-dev/lockd/cmd/lockd").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build lockd: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// startRig starts an embedded lockd for one test.
func startRig(t *testing.T, identities int) *rig.Rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := rig.Start(ctx, rig.Config{Dir: t.TempDir(), Mode: rig.Embedded, Lockd: lockdBin, Identities: identities})
	if err != nil {
		t.Fatalf("start rig: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func config(t *testing.T, r *rig.Rig, identities, sessions, holds int, steady time.Duration) Config {
	return Config{Addr: r.Lockd.Addr, EtcdURL: r.EtcdEndpoints[0], LockdPID: r.LockdPID(), EtcdPID: r.EtcdPID(),
		Identities: identities, Sessions: sessions, Holds: holds, Steady: steady, Log: logWriter{t}}
}

// TestRenewal holds 1,000 holds on 200 sessions for 20 s through an
// embedded lockd: every session renewed every 5 s, no false expiry, and
// renewals are not consensus writes; then a few holders take keys beside
// them for 10 s, and their grants are measured.
func TestRenewal(t *testing.T) {
	t.Parallel()
	r := startRig(t, 8)
	cfg := config(t, r, 8, 200, 1000, 20*time.Second)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, n := range res.Notes {
		t.Logf("note: %s", n)
	}
	t.Logf("%+v", *res)
	if !res.Held {
		t.Errorf("Held = false")
	}
	if res.FalseExpiries != 0 {
		t.Errorf("FalseExpiries = %d, want 0", res.FalseExpiries)
	}
	if res.Sessions != 200 || res.Holds != 1000 {
		t.Errorf("Sessions, Holds = %d, %d, want 200, 1000", res.Sessions, res.Holds)
	}
	want := float64(cfg.Sessions) / (rig.ClassTTL / 3).Seconds()
	if res.KeepalivesSent < 0.75*want || res.KeepalivesSent > 1.25*want {
		t.Errorf("KeepalivesSent = %.1f/s, want %.0f/s ± 25 %%", res.KeepalivesSent, want)
	}
	if res.KeepalivesAtEtcd <= 0 {
		t.Errorf("KeepalivesAtEtcd = %.1f/s, want > 0", res.KeepalivesAtEtcd)
	}
	if res.EtcdWritesPerSec >= 5 {
		t.Errorf("EtcdWritesPerSec = %.2f, want < 5: renewals must not be consensus writes", res.EtcdWritesPerSec)
	}
	if res.LockdCPU <= 0 || res.LockdRSS <= 0 {
		t.Errorf("LockdCPU, LockdRSS = %.3f, %d, want both > 0", res.LockdCPU, res.LockdRSS)
	}
	if res.ProbeGrants == 0 || res.ProbeErrors != 0 || res.ProbeP99 <= 0 || res.ProbeP99 < res.ProbeP50 {
		t.Errorf("grants beside the renewals: %d, %d failed, p50 %s p99 %s; want some, none failed, p99 >= p50 > 0",
			res.ProbeGrants, res.ProbeErrors, res.ProbeP50, res.ProbeP99)
	}
}

// TestTooSlowKeepalivesCaught renews every 16 s sessions whose TTL is
// 15 s: the run must count the expiries and not report the scale held.
func TestTooSlowKeepalivesCaught(t *testing.T) {
	t.Parallel()
	r := startRig(t, 4)
	cfg := config(t, r, 4, 40, 80, 18*time.Second)
	cfg.Interval = rig.ClassTTL + time.Second
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, n := range res.Notes {
		t.Logf("note: %s", n)
	}
	if res.Held {
		t.Errorf("Held = true with keepalives slower than the TTL")
	}
	if res.FalseExpiries == 0 {
		t.Errorf("FalseExpiries = 0 with keepalives slower than the TTL")
	}
}

func TestParseMetrics(t *testing.T) {
	in := `# HELP etcd_debugging_lease_renewed_total The number of renewed leases seen by the leader.
# TYPE etcd_debugging_lease_renewed_total counter
etcd_debugging_lease_renewed_total 1234
etcd_server_proposals_committed_total 5.5e+03
etcd_mvcc_put_total{a="b",c="d e}"} 2
etcd_mvcc_put_total{a="x"} 3 1700000000
etcd_mvcc_put_total_other 100
`
	m, err := parseMetrics(strings.NewReader(in), wanted)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{leaseRenewed: 1234, proposalsCommitted: 5500, putTotal: 5}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if _, ok := m[leaseExpired]; ok {
		t.Errorf("%s present though absent from the input", leaseExpired)
	}
}

func TestQuantiles(t *testing.T) {
	h := newHistogram()
	before := h.snapshot()
	for i := range 100 {
		h.add(time.Duration(i) * time.Millisecond)
	}
	q := quantiles(h.snapshot(), before, 0.5, 0.99, 1)
	if q[0] != 51*time.Millisecond || q[1] != 100*time.Millisecond || q[2] != 100*time.Millisecond {
		t.Errorf("quantiles = %v", q)
	}
}
