package grafana

// The dashboards. Metric names and labels are lockd's (internal/arbiter and
// internal/audit metrics.go, docs/operating.md "Metrics") and etcd 3.6's.
// Store-wide gauges (lockd_sessions, lockd_holds) are exported alike by
// every lockd: they are aggregated with max over lockds, never sum; holds
// are per etcd cluster, so summed over clusters after that max.

// Dashboards are the dashboards under deploy/grafana, in file-name order.
func Dashboards() []Dashboard {
	return []Dashboard{etcdDashboard, namespaceDashboard, overviewDashboard}
}

// Colors of threshold steps and stat mappings.
const (
	green  = "green"
	orange = "orange"
	red    = "red"
)

var overviewDashboard = Dashboard{
	File:  "lockd-overview.json",
	UID:   "lockd-overview",
	Title: "lockd overview",
	Description: "Every lockd scraped by this datasource: grants, latency, contention, sessions, keepalives, " +
		"the epoch, the audit history and ValidateToken.",
	Panels: []Panel{
		{
			Title:       "Grants per second",
			Description: "Holds granted per second by all lockds, by key namespace; a fall with Acquires still arriving means Acquires are being refused (see Acquire outcomes).",
			Unit:        "ops", Width: 12,
			Targets: []Target{{`sum by (namespace) (rate(lockd_grants_total[$__rate_interval]))`, "{{namespace}}"}},
		},
		{
			Title:       "Grant latency p50 / p99",
			Description: "Time from Acquire to grant including any wait behind a holder: p99 rising with waits per grant is contention on keys, p99 rising alone is the store getting slow.",
			Unit:        "s", Width: 12,
			Targets: []Target{
				{`histogram_quantile(0.5, sum by (le) (rate(lockd_grant_latency_seconds_bucket[$__rate_interval])))`, "p50"},
				{`histogram_quantile(0.99, sum by (le) (rate(lockd_grant_latency_seconds_bucket[$__rate_interval])))`, "p99"},
			},
		},
		{
			Title:       "Acquire outcomes by code",
			Description: "Acquire calls per second by the gRPC code lockd answered: OK is a grant, Aborted a held key or a wait that ran out, AlreadyExists a leak refusal, FailedPrecondition sealed or epoch grace, Unavailable or DeadlineExceeded an unknown outcome (store trouble).",
			Unit:        "ops", Width: 12,
			Targets: []Target{{`sum by (code) (rate(lockd_acquires_total[$__rate_interval]))`, "{{code}}"}},
		},
		{
			Title:       "Waits per second",
			Description: "Acquires per second that queued behind a holder, by namespace: contention, not an error.",
			Unit:        "ops", Width: 6,
			Targets: []Target{{`sum by (namespace) (rate(lockd_waits_total[$__rate_interval]))`, "{{namespace}}"}},
		},
		{
			Title:       "Waits per grant",
			Description: "Acquires that queued per hold granted, by namespace: near 0 is uncontended, near 1 or above means nearly every caller waits for a few hot keys.",
			Unit:        "none", Width: 6,
			Targets: []Target{{`sum by (namespace) (rate(lockd_waits_total[$__rate_interval])) / sum by (namespace) (rate(lockd_grants_total[$__rate_interval]))`, "{{namespace}}"}},
		},
		{
			Title:       "Open sessions",
			Description: "Sessions in the store by the namespace of their identity (refreshed every 15 s); every lockd exports the same store-wide count, so this is the max over lockds, not a sum.",
			Unit:        "short", Width: 6,
			Targets: []Target{{`max by (namespace) (lockd_sessions)`, "{{namespace}}"}},
		},
		{
			Title:       "Holds",
			Description: "Keys held by namespace (refreshed every 15 s); every lockd exports the same count per etcd cluster, so this is the max over lockds, summed over clusters.",
			Unit:        "short", Width: 6,
			Targets: []Target{{`sum by (namespace) (max by (namespace, cluster) (lockd_holds))`, "{{namespace}}"}},
		},
		{
			Title:       "Keepalive failures and uncredited keepalives",
			Description: "Per second: keepalives answered with an expired session (the holder lost its holds), and keepalives etcd renewed but lockd answered uncredited because it could not confirm the epoch within 3 s (they extend nothing; a quorum problem).",
			Unit:        "ops", Width: 12,
			Targets: []Target{
				{`sum(rate(lockd_keepalive_failures_total[$__rate_interval]))`, "session expired"},
				{`sum(rate(lockd_keepalives_not_credited_total[$__rate_interval]))`, "not credited"},
			},
		},
		{
			Title:       "Epoch read age (quorum)",
			Description: "Seconds since each lockd last read the epoch from a quorum of each etcd cluster: it stays near zero while the cluster has quorum and climbs without bound while it has none; past the 3 s line keepalives on that cluster go uncredited, one line per lockd and cluster.",
			Unit:        "s", Width: 12,
			Thresholds: []Threshold{{3, red}},
			Targets:    []Target{{`max by (instance, cluster) (lockd_epoch_read_age_seconds)`, "{{instance}} {{cluster}}"}},
		},
		{
			Stat: true, Title: "Sealed",
			Description: "Sealed means some lockd refuses every grant on that cluster until two operators advance its epoch (the store was restored, rebuilt empty, or is behind what lockd served), one value per etcd cluster: see docs/runbooks.md.",
			Unit:        "none", Width: 4,
			Thresholds: []Threshold{{1, red}},
			Mappings:   map[string]Mapping{"0": {"serving", green}, "1": {"sealed", red}},
			Targets:    []Target{{`max by (cluster) (lockd_sealed)`, "{{cluster}}"}},
		},
		{
			Stat: true, Title: "Epoch",
			Description: "The epoch each lockd serves, per etcd cluster; two values for one cluster mean the lockds disagree (one has not yet seen an advance).",
			Unit:        "none", Width: 4,
			Targets: []Target{{`max by (instance, cluster) (lockd_epoch)`, "{{instance}} {{cluster}}"}},
		},
		{
			Stat: true, Title: "Epoch grace",
			Description: "Grace means an epoch advance's grace key exists on that cluster and its grants wait it out; it clears by itself when the grace ends (refreshed every 15 s), one value per etcd cluster.",
			Unit:        "none", Width: 4,
			Thresholds: []Threshold{{1, orange}},
			Mappings:   map[string]Mapping{"0": {"none", green}, "1": {"grace", orange}},
			Targets:    []Target{{`max by (cluster) (lockd_epoch_grace_active)`, "{{cluster}}"}},
		},
		{
			Title:       "Audit lag vs half the compaction window",
			Description: "How long the oldest revision not yet in the audit history has been in etcd, against half of etcd's compaction retention: lag above the half-window line risks revisions compacted before they are read (audit gaps).",
			Unit:        "s", Width: 12,
			Targets: []Target{
				{`max by (cluster) (lockd_audit_lag_seconds)`, "lag {{cluster}}"},
				{`max by (cluster) (lockd_audit_compaction_window_seconds) / 2`, "half the compaction window {{cluster}}"},
			},
		},
		{
			Title:       "Audit rows stored and sink errors",
			Description: "History rows stored per second, which follows grant and release traffic, and failed writes to the history sink per second (retried, no row dropped; lasting errors make the lag grow).",
			Unit:        "ops", Width: 12,
			Targets: []Target{
				{`sum by (cluster) (rate(lockd_audit_rows_total[$__rate_interval]))`, "rows {{cluster}}"},
				{`sum(rate(lockd_audit_sink_errors_total[$__rate_interval]))`, "sink errors"},
			},
		},
		{
			Stat: true, Title: "Audit gaps",
			Description: "Gap records written in the selected range: each is a run of revisions etcd compacted before the audit tailer read them, missing from the history for good; anything above 0 needs a look at the gap rows.",
			Unit:        "none", Width: 4,
			Thresholds: []Threshold{{1, red}},
			Targets:    []Target{{`sum by (cluster) (increase(lockd_audit_gaps_total[$__range]))`, "{{cluster}}"}},
		},
		{
			Stat: true, Title: "Audit tailers leading",
			Description: "lockds that are the elected audit tailer: 1 per etcd cluster is right, 0 means no history is being written.",
			Unit:        "none", Width: 4,
			Mappings: map[string]Mapping{"0": {"none", red}},
			Targets:  []Target{{`sum(lockd_audit_leader)`, "leading"}},
		},
		{
			Title:       "ValidateToken by code",
			Description: "ValidateToken calls per second by answer: current, superseded, not_held and other_epoch are answers (a resource checking fencing tokens), anything else is the gRPC code of a refusal such as ResourceExhausted for the rate limit.",
			Unit:        "ops", Width: 12,
			Targets: []Target{{`sum by (code) (rate(lockd_token_validations_total[$__rate_interval]))`, "{{code}}"}},
		},
		{
			Stat: true, Title: "Class reload failures",
			Description: "Class sets rejected on reload in the selected range: above 0 means a class change did not take effect and the last good set keeps serving (see lockd's log).",
			Unit:        "none", Width: 4,
			Thresholds: []Threshold{{1, red}},
			Targets:    []Target{{`sum(increase(lockd_class_reload_failures_total[$__range]))`, "rejected"}},
		},
	},
}

var namespaceDashboard = Dashboard{
	File:        "lockd-namespace.json",
	UID:         "lockd-namespace",
	Title:       "lockd namespace",
	Description: "One key namespace across every lockd: its classes' grants, latency and contention, leaks, expiries, force releases, holds and sessions.",
	Namespace:   true,
	Panels: []Panel{
		{
			Title:       "Grants per second by class",
			Description: "Holds granted per second in this namespace, by lock class.",
			Unit:        "ops", Width: 12,
			Targets: []Target{{`sum by (class) (rate(lockd_grants_total{namespace="$namespace"}[$__rate_interval]))`, "{{class}}"}},
		},
		{
			Title:       "Grant latency p99 by class",
			Description: "The 99th percentile of Acquire-to-grant time by class, waiting included: a class whose p99 approaches its callers' wait is one whose callers start timing out.",
			Unit:        "s", Width: 12,
			Targets: []Target{{`histogram_quantile(0.99, sum by (class, le) (rate(lockd_grant_latency_seconds_bucket{namespace="$namespace"}[$__rate_interval])))`, "{{class}}"}},
		},
		{
			Title:       "Acquire outcomes by class and code",
			Description: "Acquire calls per second by class and gRPC code: OK is a grant, Aborted a held key or a wait that ran out, AlreadyExists a leak refusal.",
			Unit:        "ops", Width: 12,
			Targets: []Target{{`sum by (class, code) (rate(lockd_acquires_total{namespace="$namespace"}[$__rate_interval]))`, "{{class}} {{code}}"}},
		},
		{
			Title:       "Waits per second by class",
			Description: "Acquires per second that queued behind a holder, by class: which classes' keys are contended.",
			Unit:        "ops", Width: 12,
			Targets: []Target{{`sum by (class) (rate(lockd_waits_total{namespace="$namespace"}[$__rate_interval]))`, "{{class}}"}},
		},
		{
			Title:       "Leak refusals by class",
			Description: "Grants refused per second because the same identity already holds the key under another session, usually a process that restarted or a second client in one process (no data: none since the lockds started).",
			Unit:        "ops", Width: 8,
			Targets: []Target{{`sum by (class) (rate(lockd_leaks_total{namespace="$namespace"}[$__rate_interval]))`, "{{class}}"}},
		},
		{
			Title:       "Sessions opened and expired without close",
			Description: "Sessions opened per second, and sessions per second that ended by TTL expiry instead of a close, their holds with them: expiries are holders that died or stopped renewing (no data for expiries: none since the lockds started).",
			Unit:        "ops", Width: 8,
			Targets: []Target{
				{`sum(rate(lockd_sessions_opened_total{namespace="$namespace"}[$__rate_interval]))`, "opened"},
				{`sum(rate(lockd_expiries_without_release_total{namespace="$namespace"}[$__rate_interval]))`, "expired without close"},
			},
		},
		{
			Stat: true, Title: "Force releases",
			Description: "Force-release steps on this namespace's keys in the selected range, by step (requested, approved, denied, stale, refused): every approved one took a hold away from a live holder (no data: none since the lockds started).",
			Unit:        "none", Width: 8,
			Targets: []Target{{`sum by (code) (increase(lockd_force_releases_total{namespace="$namespace"}[$__range]))`, "{{code}}"}},
		},
		{
			Title:       "Holds",
			Description: "Keys of this namespace held (refreshed every 15 s, the same on every lockd, so the max per etcd cluster, summed over clusters).",
			Unit:        "short", Width: 8,
			Targets: []Target{{`sum(max by (cluster) (lockd_holds{namespace="$namespace"}))`, "holds"}},
		},
		{
			Title:       "Open sessions",
			Description: "Sessions in the store whose identity's grants are in this namespace (refreshed every 15 s, the same on every lockd, so the max).",
			Unit:        "short", Width: 8,
			Targets: []Target{{`max(lockd_sessions{namespace="$namespace"})`, "sessions"}},
		},
		{
			Title:       "ValidateToken by code",
			Description: "ValidateToken calls per second on this namespace's keys by answer (current, superseded, not_held, other_epoch) or refusal code: the resources that check this namespace's fencing tokens.",
			Unit:        "ops", Width: 8,
			Targets: []Target{{`sum by (code) (rate(lockd_token_validations_total{namespace="$namespace"}[$__rate_interval]))`, "{{code}}"}},
		},
	},
}

var etcdDashboard = Dashboard{
	File:  "etcd-health.json",
	UID:   "lockd-etcd-health",
	Title: "etcd health (lockd's store)",
	Description: "The etcd lockd stores its holds in, from etcd 3.6's own metrics: the embedded etcd's come with lockd's /metrics, " +
		"an external cluster's from scraping its members' /metrics.",
	Panels: []Panel{
		{
			Stat: true, Title: "Has leader",
			Description: "Whether every etcd member sees a leader: no leader means no quorum, so no grants, releases or credited keepalives.",
			Unit:        "none", Width: 6,
			Mappings: map[string]Mapping{"0": {"no leader", red}, "1": {"leader", green}},
			Targets:  []Target{{`min(etcd_server_has_leader)`, "has leader"}},
		},
		{
			Stat: true, Title: "Leader changes",
			Description: "Leader changes in the selected range as seen by the member that saw most: more than a few an hour are elections from slow disks, CPU starvation or a flaky network.",
			Unit:        "none", Width: 6,
			Thresholds: []Threshold{{3, orange}},
			Targets:    []Target{{`max(increase(etcd_server_leader_changes_seen_total[$__range]))`, "changes"}},
		},
		{
			Title:       "Raft proposals committed and failed",
			Description: "Proposals committed per second (max over members, each commits every one) and failed per second (summed): failures are writes lost to leader elections or a lost quorum.",
			Unit:        "ops", Width: 6,
			Targets: []Target{
				{`max(rate(etcd_server_proposals_committed_total[$__rate_interval]))`, "committed"},
				{`sum(rate(etcd_server_proposals_failed_total[$__rate_interval]))`, "failed"},
			},
		},
		{
			Title:       "Proposals pending",
			Description: "Proposals waiting to commit on each member: a count that stays up means the leader or its disk cannot keep up.",
			Unit:        "short", Width: 6,
			Targets: []Target{{`max by (instance) (etcd_server_proposals_pending)`, "{{instance}}"}},
		},
		{
			Title:       "WAL fsync p99",
			Description: "99th percentile of each member's write-ahead-log fsync: etcd wants it under 10 ms (the line), and slower disks delay every grant and can cost the leader its lease.",
			Unit:        "s", Width: 12,
			Thresholds: []Threshold{{0.01, red}},
			Targets:    []Target{{`histogram_quantile(0.99, sum by (instance, le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket[$__rate_interval])))`, "{{instance}}"}},
		},
		{
			Title:       "Backend commit p99",
			Description: "99th percentile of each member's bbolt backend commit: etcd wants it under 25 ms (the line), and slower means an overloaded disk.",
			Unit:        "s", Width: 12,
			Thresholds: []Threshold{{0.025, red}},
			Targets:    []Target{{`histogram_quantile(0.99, sum by (instance, le) (rate(etcd_disk_backend_commit_duration_seconds_bucket[$__rate_interval])))`, "{{instance}}"}},
		},
		{
			Title:       "DB size",
			Description: "Each member's database file size, the part of it in use, and the backend quota: at the quota etcd raises a NOSPACE alarm and refuses writes (every grant) until it is compacted and defragmented.",
			Unit:        "bytes", Width: 12,
			Targets: []Target{
				{`max by (instance) (etcd_mvcc_db_total_size_in_bytes)`, "allocated {{instance}}"},
				{`max by (instance) (etcd_mvcc_db_total_size_in_use_in_bytes)`, "in use {{instance}}"},
				{`max by (instance) (etcd_server_quota_backend_bytes)`, "quota {{instance}}"},
			},
		},
		{
			Title:       "Slow applies and failed read indexes",
			Description: "Per second: applies that took longer than etcd's 100 ms warning, and linearizable read-index requests that failed (lockd's epoch reads are such reads).",
			Unit:        "ops", Width: 12,
			Targets: []Target{
				{`sum(rate(etcd_server_slow_apply_total[$__rate_interval]))`, "slow applies"},
				{`sum(rate(etcd_server_read_indexes_failed_total[$__rate_interval]))`, "read indexes failed"},
			},
		},
		{
			Title:       "gRPC requests per second by method",
			Description: "Unary etcd gRPC calls completed per second by method, summed over members, methods without calls left out: a lockd's grants and releases are Txn, its reads Range, its sessions LeaseGrant and LeaseRevoke (a lockd calls its embedded etcd in-process, so only lockds and tools on the network count here).",
			Unit:        "reqps", Width: 12,
			Targets: []Target{{`sum by (grpc_method) (rate(grpc_server_handled_total{grpc_type="unary", grpc_service=~"etcdserverpb.*"}[$__rate_interval])) > 0`, "{{grpc_method}}"}},
		},
		{
			Title:       "gRPC errors by code",
			Description: "etcd gRPC calls completed per second with a code other than OK, by code: Unavailable and DeadlineExceeded usually mean no leader or an overloaded member.",
			Unit:        "reqps", Width: 12,
			Targets: []Target{{`sum by (grpc_code) (rate(grpc_server_handled_total{grpc_service=~"etcdserverpb.*", grpc_code!="OK"}[$__rate_interval]))`, "{{grpc_code}}"}},
		},
		{
			Title:       "Store operations per second",
			Description: "Ranges, puts, deletes and transactions each member's key-value store saw per second: writes land on every member, ranges only on the member that served them.",
			Unit:        "ops", Width: 24,
			Targets: []Target{
				{`sum by (instance) (rate(etcd_mvcc_range_total[$__rate_interval]))`, "range {{instance}}"},
				{`sum by (instance) (rate(etcd_mvcc_put_total[$__rate_interval]))`, "put {{instance}}"},
				{`sum by (instance) (rate(etcd_mvcc_delete_total[$__rate_interval]))`, "delete {{instance}}"},
				{`sum by (instance) (rate(etcd_mvcc_txn_total[$__rate_interval]))`, "txn {{instance}}"},
			},
		},
	},
}
