// Package result holds the benchmark's figures: what the runner measures,
// what the report prints, saves as JSON and draws.
package result

import (
	"sort"
	"time"
)

// System names.
const (
	Raw       = "raw"
	EtcdMutex = "etcd-mutex"
	Lockd     = "lockd"
	// LockdDurable is lockd with a class of durable fairness.
	LockdDurable = "lockd-durable"
	Redsync      = "redsync"
)

// Run is one benchmark run.
type Run struct {
	Started   time.Time   `json:"started"`
	Machine   string      `json:"machine"` // e.g. "2 CPUs, go1.26.8 linux/amd64"
	Mode      string      `json:"mode"`    // "embedded" (lockd's default) or "external" etcd
	Duration  string      `json:"duration"`
	Scenarios []*Scenario `json:"scenarios"`
	Renewal   *Renewal    `json:"renewal,omitempty"`
	Audit     *Audit      `json:"audit,omitempty"`
	Tracing   *Tracing    `json:"tracing,omitempty"`
	Profiles  []string    `json:"profiles,omitempty"` // paths of lockd pprof files
}

// Scenario is one load shape measured on every system, side by side.
type Scenario struct {
	Name    string `json:"name"` // uncontended-w1, uncontended-w16, uncontended-w64, contended-w64, zipf-w64
	Workers int    `json:"workers"`
	Keys    int    `json:"keys"`
	// Systems in the order they ran.
	Systems []*System `json:"systems"`
	// Ratios: "lockd/raw", "lockd/etcd-mutex" on grants per second, and
	// "lockd-raw p50 ms" (added latency at the median).
	Ratios map[string]float64 `json:"ratios"`
}

// System is one system's figures in one scenario.
type System struct {
	Name         string        `json:"name"`
	Fencing      bool          `json:"fencing"` // false for redsync: no token a resource could check
	Grants       int           `json:"grants"`
	Errors       int           `json:"errors"`
	Elapsed      time.Duration `json:"elapsed"`
	GrantsPerSec float64       `json:"grantsPerSec"`
	P50          time.Duration `json:"p50"`
	P99          time.Duration `json:"p99"`
	P999         time.Duration `json:"p999"`
	// CDF is the latency distribution at 200 evenly spaced quantiles, for
	// charts; the raw samples are not kept.
	CDF []time.Duration `json:"cdf,omitempty"`
	// LockdCPU and EtcdCPU are the cores each process used during the run
	// (the same process on the embedded default: reported once, as lockd).
	LockdCPU float64 `json:"lockdCPU,omitempty"`
	EtcdCPU  float64 `json:"etcdCPU,omitempty"`
	// WritesPerGrant is consensus writes (etcd proposals committed) per
	// grant, over the whole run: grants, releases, waiter keys, refused
	// write transactions.
	WritesPerGrant float64 `json:"writesPerGrant,omitempty"`
	// MeanBatch is, for lockd, how many grants and releases its etcd
	// transactions carried on average (group commit; 1: none batched).
	MeanBatch float64 `json:"meanBatch,omitempty"`
	// Batches is, for lockd, how its transactions' sizes were spread:
	// transactions carrying From to UpTo parts, from
	// lockd_commit_batch_size's buckets.
	Batches []BatchBucket `json:"batches,omitempty"`
	// EtcdFsyncMean is etcd's mean WAL fsync during the run: a commit's
	// floor, and so a handoff's on a contended key.
	EtcdFsyncMean time.Duration `json:"etcdFsyncMean,omitempty"`
	// LockdCPUPerGrant is lockd's CPU time per grant and release (its
	// embedded etcd's included on the embedded default).
	LockdCPUPerGrant time.Duration `json:"lockdCPUPerGrant,omitempty"`
	Skipped          string        `json:"skipped,omitempty"` // why a system did not run
}

// BatchBucket is one bucket of the batch size distribution.
type BatchBucket struct {
	From int     `json:"from"`
	UpTo int     `json:"upTo"`
	Txns float64 `json:"txns"`
}

// Summarize fills the percentiles and the CDF from grant latencies.
func (s *System) Summarize(lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration {
		i := int(p * float64(len(lat)-1))
		return lat[i]
	}
	s.P50, s.P99, s.P999 = q(0.50), q(0.99), q(0.999)
	const points = 200
	s.CDF = make([]time.Duration, points+1)
	for i := range s.CDF {
		s.CDF[i] = q(float64(i) / points)
	}
}

// Find returns the named system's figures, or nil.
func (sc *Scenario) Find(name string) *System {
	for _, s := range sc.Systems {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Renewal is the renewal-at-scale figures: holds kept alive by keepalives
// alone, without consensus writes.
type Renewal struct {
	TargetSessions int `json:"targetSessions"`
	TargetHolds    int `json:"targetHolds"`
	// Sessions and Holds actually opened and granted.
	Sessions int           `json:"sessions"`
	Holds    int           `json:"holds"`
	TTL      time.Duration `json:"ttl"`
	Load     time.Duration `json:"load"`   // time to open the sessions and grant the holds
	Steady   time.Duration `json:"steady"` // how long the holds were kept alive
	// KeepalivesSent per second by the load generator; KeepalivesAtEtcd
	// per second renewed by etcd's lessor (etcd's own counter).
	KeepalivesSent   float64 `json:"keepalivesSent"`
	KeepalivesAtEtcd float64 `json:"keepalivesAtEtcd"`
	// EtcdWritesPerSec is etcd's committed proposals per second during the
	// steady state: renewals must not be consensus writes (~0).
	EtcdWritesPerSec float64 `json:"etcdWritesPerSec"`
	// FalseExpiries: sessions answered as expired, or holds missing at the
	// end, while their keepalives were sent on time. Must be 0.
	FalseExpiries int `json:"falseExpiries"`
	// ProbeGrants are grants a few holders took beside the renewals, in
	// ProbeFor after the steady state (renewal.ProbeWorkers), with their
	// latency and how many calls failed.
	ProbeFor    time.Duration `json:"probeFor"`
	ProbeGrants int           `json:"probeGrants"`
	ProbeErrors int           `json:"probeErrors"`
	ProbeP50    time.Duration `json:"probeP50"`
	ProbeP99    time.Duration `json:"probeP99"`
	ProbeMax    time.Duration `json:"probeMax"`
	// Audit: lockd ran its audit tailer (--audit on) throughout.
	Audit    bool    `json:"audit"`
	LockdCPU float64 `json:"lockdCPU"`
	EtcdCPU  float64 `json:"etcdCPU"`
	LockdRSS int64   `json:"lockdRSS"`
	EtcdRSS  int64   `json:"etcdRSS"`
	// Held reports whether the target scale was held with no false expiry;
	// when not, Notes say where it broke.
	Held  bool     `json:"held"`
	Notes []string `json:"notes,omitempty"`
}

// Tracing is lockd with tracing off, on with a share of traces sampled,
// and on with every trace sampled, in one run (off, sampled, all, all,
// sampled, off; each pass on a fresh lockd). On means lockd and the load
// generator's clients, exporting over OTLP.
type Tracing struct {
	Scenario     string  `json:"scenario"`
	SampledRatio float64 `json:"sampledRatio"`
	// Rounds is how many rounds of there and back ran.
	Rounds int `json:"rounds"`
	// Grants/s and p99 of each side (all its passes); the ratios are the
	// median over the rounds of each side's grants over the off side's in
	// the same round (SampledRounds, AllRounds).
	OffGrantsPerSec float64 `json:"offGrantsPerSec"`
	// LockdOnly*: lockd traces with SampledRatio of its traces sampled and
	// the load generator's clients trace nothing (no trace context on the
	// calls): lockd's own cost, as when its callers do not trace.
	LockdOnlyGrantsPerSec     float64       `json:"lockdOnlyGrantsPerSec"`
	LockdOnlyRatioOfOff       float64       `json:"lockdOnlyRatioOfOff"`
	LockdOnlyRounds           []float64     `json:"lockdOnlyRounds"`
	LockdOnlyLockdCPUPerGrant time.Duration `json:"lockdOnlyLockdCPUPerGrant"`
	LockdOnlyP99              time.Duration `json:"lockdOnlyP99"`
	LockdOnlySpans            int64         `json:"lockdOnlySpans"`
	// Sampled* and All*: lockd and the clients both trace, with
	// SampledRatio of new traces sampled, or every one.
	SampledGrantsPerSec float64   `json:"sampledGrantsPerSec"`
	AllGrantsPerSec     float64   `json:"allGrantsPerSec"`
	SampledRatioOfOff   float64   `json:"sampledRatioOfOff"`
	AllRatioOfOff       float64   `json:"allRatioOfOff"`
	SampledRounds       []float64 `json:"sampledRounds"`
	AllRounds           []float64 `json:"allRounds"`
	// lockd's CPU time (its embedded etcd's included) per grant, each side.
	OffLockdCPUPerGrant     time.Duration `json:"offLockdCPUPerGrant"`
	SampledLockdCPUPerGrant time.Duration `json:"sampledLockdCPUPerGrant"`
	AllLockdCPUPerGrant     time.Duration `json:"allLockdCPUPerGrant"`
	OffP99                  time.Duration `json:"offP99"`
	SampledP99              time.Duration `json:"sampledP99"`
	AllP99                  time.Duration `json:"allP99"`
	// SampledSpans and AllSpans count the spans each side's sink received.
	SampledSpans int64 `json:"sampledSpans"`
	AllSpans     int64 `json:"allSpans"`
}

// Audit is lockd with its audit tailer off and on, in one run (ABBA: off,
// on, on, off, each pass on a fresh lockd), and the tailer's lag meanwhile.
type Audit struct {
	Scenario string `json:"scenario"`
	// OffGrantsPerSec and OnGrantsPerSec are lockd's throughput without and
	// with the tailer; Ratio is on/off.
	OffGrantsPerSec float64 `json:"offGrantsPerSec"`
	OnGrantsPerSec  float64 `json:"onGrantsPerSec"`
	Ratio           float64 `json:"ratio"`
	// LagP99 and LagMax are over samples of lockd_audit_lag_seconds taken
	// every 250 ms while the tailer was on (the tailer updates it every
	// second); Samples counts them.
	LagP99  time.Duration `json:"lagP99"`
	LagMax  time.Duration `json:"lagMax"`
	Samples int           `json:"samples"`
}
