package arbiter

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the arbiter's Prometheus metrics. Labels come only from the
// bounded set namespace, class, tier, cluster and code; never a key or token.
type Metrics struct {
	grants            *prometheus.CounterVec
	acquires          *prometheus.CounterVec
	grantLatency      *prometheus.HistogramVec
	waits             *prometheus.CounterVec
	leaks             *prometheus.CounterVec
	sessionsOpened    *prometheus.CounterVec
	keepAliveFailures prometheus.Counter
	// keepAlivesNotCredited counts keepalives etcd renewed that were
	// answered uncredited: the epoch could not be confirmed within
	// MaxEpochAge.
	keepAlivesNotCredited prometheus.Counter
	quotaRefusals         *prometheus.CounterVec
	// sealed, epoch, graceActive, openGraceActive and openPosture are per
	// cluster (label cluster, the cell's name).
	sealed *prometheus.GaugeVec
	epoch  *prometheus.GaugeVec
	// ClassReloadFailures counts class sets rejected on reload.
	ClassReloadFailures prometheus.Counter
	// Sessions and Holds are store-wide gauges refreshed by a collector.
	Sessions *prometheus.GaugeVec
	Holds    *prometheus.GaugeVec
	// ExpiriesWithoutRelease counts holds that ended by session expiry.
	ExpiriesWithoutRelease *prometheus.CounterVec
	forceReleases          *prometheus.CounterVec
	epochAdvances          *prometheus.CounterVec
	tokenValidations       *prometheus.CounterVec
	// graceActive is 1 while an epoch advance's grace key exists (grants
	// wait it out); refreshed with the store-wide gauges.
	graceActive *prometheus.GaugeVec
	// openGraceActive is 1 while this arbiter holds classes open on quorum
	// loss back after an outage: an open grace exists or it is holding off
	// (recovery.go); refreshed with the store-wide gauges.
	openGraceActive *prometheus.GaugeVec
	// epochReadAge is, per cluster, the time since this arbiter last
	// confirmed the epoch with a linearizable read, for
	// lockd_epoch_read_age_seconds: a read that needs a quorum, so its age
	// grows while the cluster has none.
	epochReadAge readAges
	code         func(error) codes.Code
	// openPosture is 1 while this arbiter grants open classes from memory;
	// unprotectedGrants counts those grants, unprotectedShipped the ones
	// shipped to the history.
	openPosture        *prometheus.GaugeVec
	unprotectedGrants  *prometheus.CounterVec
	unprotectedShipped prometheus.Counter
	// wrongRegion counts per-key calls refused, before any etcd read,
	// because the key's namespace is homed to another region.
	wrongRegion *prometheus.CounterVec
	// shardMapVersion is the shard map version this lockd routes entity
	// keys by; moving counts grants a shard refused for a move (MOVING).
	shardMapVersion prometheus.Gauge
	moving          *prometheus.CounterVec
	// batchSize is, per cluster, how many grants and releases each etcd
	// Txn of the group commit carried (batch.go).
	batchSize *prometheus.HistogramVec
}

// NewMetrics registers the metrics with reg (a private registry if nil).
// code names an outcome for the "code" label: the gRPC code the boundary
// answers the error with (server.Code), so a metric and the wire agree;
// nil labels every error Unknown.
func NewMetrics(reg prometheus.Registerer, code func(error) codes.Code) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if code == nil {
		code = func(err error) codes.Code {
			if err == nil {
				return codes.OK
			}
			return codes.Unknown
		}
	}
	m := &Metrics{
		code: code,
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_grants_total", Help: "Holds granted, by the class's tier and the etcd cluster that granted them."},
			[]string{"namespace", "class", "tier", "cluster"}),
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_acquires_total", Help: "Acquire calls by outcome (gRPC code)."}, []string{"namespace", "class", "code"}),
		grantLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockd_grant_latency_seconds", Help: "Time from Acquire to grant, including waiting.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .04, .08, .16, .32, .64, 1.28, 2.56, 5.12, 10.24, 30}},
			[]string{"namespace", "class"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_waits_total", Help: "Acquires that queued behind a holder."}, []string{"namespace", "class"}),
		leaks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_leaks_total", Help: "Grants refused because the same identity holds the key under another session."},
			[]string{"namespace", "class"}),
		sessionsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_sessions_opened_total", Help: "Sessions opened here."}, []string{"namespace"}),
		keepAliveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockd_keepalive_failures_total", Help: "Keepalives answered with an expired session."}),
		keepAlivesNotCredited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockd_keepalives_not_credited_total",
			Help: "Keepalives etcd renewed that lockd answered uncredited because it could not confirm the epoch recently enough; they extend nothing for the holder."}),
		quotaRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_quota_refusals_total",
			Help: "Requests refused by a per-identity quota on this lockd; code is sessions or waiters."}, []string{"namespace", "code"}),
		sealed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockd_sealed", Help: "1 when grants on the cluster are refused until its epoch advances: the store was restored, rebuilt empty, or is behind what lockd served."}, []string{"cluster"}),
		epoch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockd_epoch", Help: "The cluster's current epoch."}, []string{"cluster"}),
		ClassReloadFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockd_class_reload_failures_total", Help: "Class sets rejected on reload; the last good set keeps serving."}),
		Sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockd_sessions", Help: "Open sessions in the store, by the namespace of their identity."}, []string{"namespace"}),
		Holds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockd_holds", Help: "Holds in the etcd cluster."}, []string{"namespace", "cluster"}),
		ExpiriesWithoutRelease: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_expiries_without_release_total", Help: "Sessions opened here that ended by expiry rather than close."},
			[]string{"namespace"}),
		forceReleases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_force_releases_total",
			Help: "Force-release steps by key namespace; code is requested, approved, denied, stale (the hold changed), refused (same person) or moved (ended at a shard move's drain bound)."},
			[]string{"namespace", "code"}),
		epochAdvances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_epoch_advances_total",
			Help: "Epoch advance steps; code is requested, approved or refused (same person)."}, []string{"code"}),
		tokenValidations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_token_validations_total",
			Help: "ValidateToken calls by key namespace (\"-\" before the caller is authorized); code is current, superseded, not_held or other_epoch for answers, else the gRPC code of the refusal. A resource depending on ValidateToken shows here."},
			[]string{"namespace", "code"}),
	}
	m.openPosture = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lockd_open_posture", Help: "1 while this lockd has had no quorum of the cluster for longer than --open-after and grants classes with onQuorumLoss: open from memory, unprotected (token 0)."}, []string{"cluster"})
	m.unprotectedGrants = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockd_unprotected_grants_total", Help: "Grants made from memory without a quorum (token 0), spooled before they were answered."},
		[]string{"namespace", "class"})
	m.unprotectedShipped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lockd_unprotected_shipped_total", Help: "Unprotected grants shipped from the spool to the store (and so to the history) after quorum returned."})
	m.openGraceActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lockd_open_grace_active",
		Help: "1 while this lockd grants no key of a class open on quorum loss through the cluster, because its quorum has just returned and a holder of an unprotected grant may still be acting on it."}, []string{"cluster"})
	reg.MustRegister(m.openPosture, m.unprotectedGrants, m.unprotectedShipped, m.openGraceActive)
	m.wrongRegion = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockd_wrong_region_total",
		Help: "Per-key calls refused before any etcd read because the key's namespace is homed to another region (WRONG_REGION)."}, []string{"namespace"})
	reg.MustRegister(m.wrongRegion)
	m.shardMapVersion = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lockd_shard_map_version",
		Help: "The entity tier's shard map version this lockd routes keys by (0: the implicit map, before one is written). Arbiters that disagree for long have a stalled map watch."})
	m.moving = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockd_moving_refusals_total",
		Help: "Grants an entity shard refused because the key's range is moving or the shard map changed (MOVING), by cluster."}, []string{"cluster"})
	reg.MustRegister(m.shardMapVersion, m.moving)
	m.batchSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lockd_commit_batch_size",
		Help:    "Grants and releases committed together in one etcd transaction (group commit), by cluster.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}}, []string{"cluster"})
	reg.MustRegister(m.batchSize)
	m.graceActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lockd_epoch_grace_active", Help: "1 while grants on the cluster wait out an epoch advance's grace (the grace key exists in it)."}, []string{"cluster"})
	m.epochReadAge.desc = prometheus.NewDesc("lockd_epoch_read_age_seconds",
		"Seconds since this lockd last read the epoch from a quorum of the cluster; it grows without bound while the cluster has no quorum or cannot be reached.",
		[]string{"cluster"}, nil)
	reg.MustRegister(m.graceActive, &m.epochReadAge, m.keepAlivesNotCredited, m.quotaRefusals, m.tokenValidations, m.forceReleases, m.epochAdvances, m.grants, m.acquires, m.grantLatency, m.waits, m.leaks, m.sessionsOpened,
		m.keepAliveFailures, m.sealed, m.epoch, m.ClassReloadFailures, m.Sessions, m.Holds, m.ExpiriesWithoutRelease)
	return m
}

func (m *Metrics) setSealed(cluster string, sealed bool, epoch uint32) {
	m.sealed.WithLabelValues(cluster).Set(boolGauge(sealed))
	m.epoch.WithLabelValues(cluster).Set(float64(epoch))
}

// startCluster exports cluster's gauges, at zero until they are set, and
// its epoch read age from age.
func (m *Metrics) startCluster(cluster string, age func() time.Duration) {
	m.graceActive.WithLabelValues(cluster).Set(0)
	m.openGraceActive.WithLabelValues(cluster).Set(0)
	m.openPosture.WithLabelValues(cluster).Set(0)
	m.epochReadAge.track(cluster, age)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// readAges is lockd_epoch_read_age_seconds: per cluster, computed when
// scraped from the cell's last confirmed read.
type readAges struct {
	desc *prometheus.Desc
	ages sync.Map // cluster -> func() time.Duration
}

// track reports the age of cluster's epoch reads from now on.
func (r *readAges) track(cluster string, age func() time.Duration) { r.ages.Store(cluster, age) }

// Describe implements prometheus.Collector.
func (r *readAges) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

// Collect implements prometheus.Collector.
func (r *readAges) Collect(ch chan<- prometheus.Metric) {
	r.ages.Range(func(k, v any) bool {
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, v.(func() time.Duration)().Seconds(), k.(string))
		return true
	})
}

// observeAcquire counts one Acquire of a key of class ns/cls, served by
// tier and cluster ("-" when refused before its class was known).
func (m *Metrics) observeAcquire(ns, cls, tier, cluster string, err error, d time.Duration) {
	m.acquires.WithLabelValues(ns, cls, m.code(err).String()).Inc()
	if err == nil {
		m.grants.WithLabelValues(ns, cls, tier, cluster).Inc()
		m.grantLatency.WithLabelValues(ns, cls).Observe(d.Seconds())
	}
}

func (m *Metrics) observeValidate(ns string, c TokenCheck, err error) {
	code := c.State.String()
	if err != nil {
		code = m.code(err).String()
	}
	m.tokenValidations.WithLabelValues(ns, code).Inc()
}
