package audit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the tailers' of one process, shared by a tailer per
// cluster; the only label is the cluster ID (hex).
type Metrics = metrics

type metrics struct {
	leader       *prometheus.GaugeVec
	lagRevisions *prometheus.GaugeVec
	lagSeconds   *prometheus.GaugeVec
	window       *prometheus.GaugeVec
	pastHalf     *prometheus.GaugeVec
	checkpoint   *prometheus.GaugeVec
	storeRev     *prometheus.GaugeVec
	gaps         *prometheus.CounterVec
	rows         *prometheus.CounterVec
	sinkErrors   prometheus.Counter
	storeResets  prometheus.Counter
}

// NewMetrics registers the tailers' metrics with reg (none when nil), for
// Config.Metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics { return newMetrics(reg) }

func newMetrics(reg prometheus.Registerer) *metrics {
	cl := []string{"cluster"}
	m := &metrics{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockd_audit_leader",
			Help: "1 while this lockd is the elected audit tailer of the cluster, 0 while it is a candidate."}, cl),
		lagRevisions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockd_audit_lag_revisions",
			Help: "Revisions in the store not yet stored in the history."}, cl),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockd_audit_lag_seconds",
			Help: "How long the oldest revision not yet in the history has been in the store."}, cl),
		window: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockd_audit_compaction_window_seconds",
			Help: "etcd's compaction retention as configured for the tailer (--audit-compaction-window)."}, cl),
		pastHalf: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockd_audit_lag_past_half_window",
			Help: "1 when the tailer's lag is at least half the compaction window: revisions are at risk of compaction before they are read."}, cl),
		checkpoint: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockd_audit_checkpoint_revision",
			Help: "The revision the tailer's checkpoint was last moved to."}, cl),
		storeRev: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockd_audit_store_revision",
			Help: "The store's revision at the tailer's last probe; the lag gauges are as of that probe."}, cl),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockd_audit_gaps_total",
			Help: "Gap records written: revisions compacted before the tailer read them."}, cl),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockd_audit_rows_total",
			Help: "History rows stored."}, cl),
		sinkErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "lockd_audit_sink_errors_total",
			Help: "Failed writes to the history sink (each is retried; no row is dropped)."}),
		storeResets: prometheus.NewCounter(prometheus.CounterOpts{Name: "lockd_audit_store_resets_total",
			Help: "Times the store's revision fell behind the history (a store rebuilt under the same cluster ID): the tailer snapshots again."}),
	}
	if reg != nil {
		reg.MustRegister(m.leader, m.lagRevisions, m.lagSeconds, m.window, m.pastHalf, m.checkpoint, m.storeRev, m.gaps, m.rows, m.sinkErrors, m.storeResets)
	}
	return m
}
