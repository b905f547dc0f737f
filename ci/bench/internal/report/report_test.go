package report

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
	"github.com/lockd-dev/lockd/internal/golden"
)

// system builds a system's figures with a synthetic latency CDF that rises
// from base to base*e^4.
func system(name string, fencing bool, perSec float64, base time.Duration) *result.System {
	s := &result.System{
		Name:         name,
		Fencing:      fencing,
		Grants:       int(perSec * 30),
		Elapsed:      30 * time.Second,
		GrantsPerSec: perSec,
		P50:          time.Duration(float64(base) * math.Exp(2)),
		P99:          time.Duration(float64(base) * math.Exp(3.96)),
		P999:         time.Duration(float64(base) * math.Exp(3.996)),
		CDF:          make([]time.Duration, 201),
		LockdCPU:     0.5,
	}
	if name != result.Redsync {
		s.WritesPerGrant = 2.25
	}
	if name == result.Lockd {
		s.MeanBatch = 7.5
		s.LockdCPUPerGrant = 104 * time.Microsecond
		s.Batches = []result.BatchBucket{{From: 1, UpTo: 1, Txns: 10}, {From: 5, UpTo: 8, Txns: 30}, {From: 9, UpTo: 16, Txns: 60}}
	}
	for i := range s.CDF {
		s.CDF[i] = time.Duration(float64(base) * math.Exp(4*float64(i)/200))
	}
	return s
}

func testRun() *result.Run {
	raw := system(result.Raw, true, 5210.4, 100*time.Microsecond)
	raw.CDF[0] = 0 // a zero latency must not break the log axis
	mutex := system(result.EtcdMutex, true, 2600, 180*time.Microsecond)
	mutex.EtcdCPU = 0.25
	lockd := system(result.Lockd, true, 4800, 120*time.Microsecond)
	lockd.Errors = 3
	redis := system(result.Redsync, false, 9100.6, 60*time.Microsecond)

	craw := system(result.Raw, true, 410, 2*time.Millisecond)
	cmutex := system(result.EtcdMutex, true, 150.5, 5*time.Millisecond)
	clockd := system(result.Lockd, true, 380, 2500*time.Microsecond)
	clockd.EtcdFsyncMean = 640 * time.Microsecond
	cmutex.EtcdFsyncMean = 710 * time.Microsecond
	return &result.Run{
		Started:  time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC),
		Machine:  "2 CPUs, go1.26.8 linux/amd64",
		Mode:     "embedded",
		Duration: "30s",
		Scenarios: []*result.Scenario{
			{
				Name: "uncontended-w16", Workers: 16, Keys: 16000,
				Systems: []*result.System{raw, mutex, lockd, redis},
				Ratios:  map[string]float64{"lockd/raw": 0.92, "lockd/etcd-mutex": 1.85, "lockd-raw p50 ms": 0.15},
			},
			{
				Name: "contended-w64", Workers: 64, Keys: 1,
				Systems: []*result.System{craw, cmutex, clockd,
					{Name: result.Redsync, Skipped: "redis not reachable at 127.0.0.1:6379"}},
				Ratios: map[string]float64{"lockd/raw": 0.93, "lockd/etcd-mutex": 2.52, "lockd-raw p50 ms": 3.69},
			},
		},
		Renewal: &result.Renewal{
			TargetSessions: 10000, TargetHolds: 100000,
			Sessions: 10000, Holds: 99000,
			TTL: 10 * time.Second, Load: 42317 * time.Millisecond, Steady: 5 * time.Minute,
			KeepalivesSent: 3000, KeepalivesAtEtcd: 2998.5,
			EtcdWritesPerSec: 0.02,
			FalseExpiries:    0,
			ProbeFor:         2 * time.Minute, ProbeGrants: 12000, ProbeP50: 2500 * time.Microsecond, ProbeP99: 31 * time.Millisecond, ProbeMax: 80 * time.Millisecond,
			Audit:    true,
			LockdCPU: 1.2, EtcdCPU: 0.4,
			LockdRSS: 512 << 20, EtcdRSS: 300 << 20,
			Held:  false,
			Notes: []string{"holds stopped at 99000: grant timeouts", "raise --max-holds"},
		},
		Audit: &result.Audit{Scenario: "uncontended-w64", OffGrantsPerSec: 5200, OnGrantsPerSec: 4900, Ratio: 0.94,
			LagP99: 670 * time.Millisecond, LagMax: 900 * time.Millisecond, Samples: 40},
		Tracing: &result.Tracing{Scenario: "uncontended-w64", SampledRatio: 0.1, Rounds: 3,
			OffGrantsPerSec: 5200, LockdOnlyGrantsPerSec: 5100, LockdOnlyRatioOfOff: 0.98, LockdOnlyRounds: []float64{0.97, 0.98, 1.0},
			LockdOnlyLockdCPUPerGrant: 255 * time.Microsecond, LockdOnlyP99: 21500 * time.Microsecond, LockdOnlySpans: 1234,
			SampledGrantsPerSec: 5000, AllGrantsPerSec: 4200, SampledRatioOfOff: 0.96, AllRatioOfOff: 0.81,
			SampledRounds: []float64{0.95, 0.96, 0.99}, AllRounds: []float64{0.8, 0.81, 0.83},
			OffLockdCPUPerGrant: 250 * time.Microsecond, SampledLockdCPUPerGrant: 262 * time.Microsecond, AllLockdCPUPerGrant: 301 * time.Microsecond,
			OffP99: 21 * time.Millisecond, SampledP99: 22 * time.Millisecond, AllP99: 30 * time.Millisecond,
			SampledSpans: 12345, AllSpans: 123456},
	}
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	Table(&buf, testRun())
	out := buf.String()
	for _, want := range []string{
		"machine: 2 CPUs, go1.26.8 linux/amd64; mode: embedded; duration: 30s; started: 2026-03-14 09:26:53 UTC",
		"uncontended-w16 (16 workers, 16000 keys)",
		"contended-w64 (64 workers, 1 key)",
		"5210",    // raw grants/s
		"739 µs",  // raw p50: 100µs*e^2
		"5.25 ms", // raw p99: 100µs*e^3.96
		"lockd 0.50, etcd 0.25",
		"ratios: lockd/raw 0.92x, lockd/etcd-mutex 1.85x, lockd-raw p50 +0.15 ms",
		"batch sizes, lockd: 1: 10%, 5-8: 30%, 9-16: 60% of its transactions",
		"104 µs", // lockd's CPU per grant
		"ratios: lockd/raw 0.93x, lockd/etcd-mutex 2.52x, lockd-raw p50 +3.69 ms",
		"redsync (no fencing)",
		"skipped: redis not reachable at 127.0.0.1:6379",
		"renewal at scale",
		"99000 of 100000 target",
		"42.32s",
		"sent 3000.0, at etcd 2998.5",
		"lockd 512, etcd 300",
		"holds stopped at 99000: grant timeouts",
		"12000 in 2m0s (100/s), p50 2.50 ms, p99 31.00 ms, max 80.00 ms, 0 failed",
		"etcd WAL fsync mean: etcd-mutex 710 µs, lockd 640 µs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "redsync") && !strings.Contains(line, "redsync (no fencing)") {
			t.Errorf("redsync not labelled as without fencing: %q", line)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "lockd ") && !strings.HasSuffix(line, "yes") {
			t.Errorf("lockd row not marked as fencing: %q", line)
		}
	}

	golden.AssertFile(t, filepath.Join("testdata", "table.golden"), buf.Bytes())
}

func TestMarkdown(t *testing.T) {
	var buf bytes.Buffer
	Markdown(&buf, testRun())
	out := buf.String()
	for _, want := range []string{
		"| system | grants/s | p50 | p99 | p99.9 | errors | writes/grant | batch | CPU (cores) | lockd CPU/grant | fencing |",
		"|---|--:|--:|--:|--:|--:|--:|--:|---|--:|---|",
		"| 3 | 2.25 | 7.5 | lockd 0.50 | 104 µs | yes |",
		"Batch sizes, lockd: 1: 10%, 5-8: 30%, 9-16: 60% of its transactions",
		"### contended-w64 (64 workers, 1 key)",
		"| redsync (no fencing) | 9101 |",
		"| redsync (no fencing) | skipped: redis not reachable at 127.0.0.1:6379 |",
		"Ratios: lockd/raw 0.92x",
		"### Renewal at scale",
		"| held | no |",
		"- raise --max-holds",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	run := testRun()
	path := filepath.Join(t.TempDir(), "run.json")
	if err := WriteJSON(path, run); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\n  \"scenarios\": [")) {
		t.Errorf("JSON not indented:\n%.200s", b)
	}
	var got result.Run
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, run) {
		t.Errorf("round trip differs:\ngot  %+v\nwant %+v", got, *run)
	}
}

func TestCharts(t *testing.T) {
	dir := t.TempDir()
	paths, err := Charts(dir, testRun())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "uncontended-w16-latency.png"),
		filepath.Join(dir, "contended-w64-latency.png"),
		filepath.Join(dir, "throughput.png"),
	}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths = %q, want %q", paths, want)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG (%d bytes)", p, len(b))
		}
	}
	if dir := os.Getenv("REPORT_CHARTS_DIR"); dir != "" {
		if _, err := Charts(dir, testRun()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestChartsSkipsEmpty(t *testing.T) {
	run := &result.Run{Scenarios: []*result.Scenario{{
		Name: "uncontended-w1", Workers: 1,
		Systems: []*result.System{
			{Name: result.Lockd, Fencing: true, GrantsPerSec: 10}, // no CDF
			{Name: result.Redsync, Skipped: "no redis"},
		},
	}}}
	paths, err := Charts(t.TempDir(), run)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 1 || filepath.Base(paths[0]) != "throughput.png" {
		t.Errorf("paths = %q, want only throughput.png", paths)
	}
}

func TestLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (logTicks{}).Ticks(0.01, 10) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got, want := strings.Join(labels, " "), "0.01 0.1 1 10"; got != want {
		t.Errorf("labels = %q, want %q", got, want)
	}
}
