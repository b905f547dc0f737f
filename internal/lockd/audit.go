package lockd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/audit/archive"
	"github.com/lockd-dev/lockd/internal/audit/clickhouse"
	"github.com/lockd-dev/lockd/internal/audit/sqlite"
)

// Audit modes (--audit).
const (
	// AuditAuto: on for the embedded etcd, off for an external cluster
	// (where several arbiters share a ClickHouse sink: say --audit on).
	AuditAuto = "auto"
	AuditOn   = "on"
	AuditOff  = "off"
)

// AuditModes are the values --audit accepts.
var AuditModes = []string{AuditAuto, AuditOn, AuditOff}

// AuditConfig configures the audit history (docs/audit.md).
type AuditConfig struct {
	// Mode is auto, on or off.
	Mode string
	// SQLite is the embedded sink's file; empty means <DataDir>/audit.db.
	// Unused with ClickHouse.
	SQLite string
	// ClickHouse, when set, is the sink: clickhouse://host:port/database.
	ClickHouse string
	// CompactionWindow is etcd's compaction retention (the embedded etcd
	// compacts hourly); the lag alarm fires at half of it.
	CompactionWindow time.Duration
	// Archive, when its Endpoint is set, copies the history to MinIO/S3.
	Archive ArchiveConfig
}

// ArchiveConfig configures the hourly Parquet archive and the force-release
// records under object lock. Credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY.
type ArchiveConfig struct {
	Endpoint    string // host:port
	Insecure    bool   // plain HTTP
	Bucket      string
	ForceBucket string
	// ForceMode is COMPLIANCE or GOVERNANCE; ForceRetention how long a
	// force-release record cannot be deleted.
	ForceMode      string
	ForceRetention time.Duration
	// Every is how often the last complete hour is archived.
	Every time.Duration
}

func defaultAuditConfig() AuditConfig {
	return AuditConfig{Mode: AuditAuto, CompactionWindow: time.Hour,
		Archive: ArchiveConfig{ForceMode: archive.ModeCompliance, ForceRetention: 7 * 365 * 24 * time.Hour, Every: time.Hour}}
}

func (a *AuditConfig) validate(add func(string, ...any)) {
	if !slices.Contains(AuditModes, a.Mode) {
		add("--audit: must be one of %s, got %q", strings.Join(AuditModes, ", "), a.Mode)
	}
	if a.CompactionWindow <= 0 {
		add("--audit-compaction-window: must be positive, got %s", a.CompactionWindow)
	}
	if a.ClickHouse != "" && !strings.HasPrefix(a.ClickHouse, "clickhouse://") {
		add("--audit-clickhouse: must be clickhouse://host:port/database, got %q", a.ClickHouse)
	}
	ar := a.Archive
	if ar.Endpoint == "" {
		if ar.Bucket != "" || ar.ForceBucket != "" {
			add("--audit-archive-endpoint: required by --audit-archive-bucket and --audit-force-bucket")
		}
		return
	}
	if ar.Bucket == "" || ar.ForceBucket == "" {
		add("--audit-archive-bucket and --audit-force-bucket: both required with --audit-archive-endpoint")
	}
	if ar.ForceMode != archive.ModeCompliance && ar.ForceMode != archive.ModeGovernance {
		add("--audit-force-mode: must be %s or %s, got %q", archive.ModeCompliance, archive.ModeGovernance, ar.ForceMode)
	}
	if ar.ForceRetention < archive.MinForceRetention {
		add("--audit-force-retention: must be at least %s, got %s", archive.MinForceRetention, ar.ForceRetention)
	}
	if ar.Every <= 0 {
		add("--audit-archive-every: must be positive, got %s", ar.Every)
	}
}

// auditRun is the running history: a tailer per etcd cluster, all writing
// to one sink, and the archiver.
type auditRun struct {
	sink    audit.Sink
	tailers []*audit.Tailer
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startAudit opens the sink and starts the tailer (and the archiver) when
// the history is on; nil when it is off.
func (d *Daemon) startAudit(ctx context.Context, dataDir string, logger *slog.Logger) (*auditRun, error) {
	ac := d.cfg.Audit
	on := ac.Mode == AuditOn || (ac.Mode == AuditAuto && d.mode == "embedded")
	if !on {
		return nil, nil
	}
	var sink audit.Sink
	var err error
	what := ""
	if ac.ClickHouse != "" {
		sink, err = clickhouse.Open(ctx, ac.ClickHouse)
		what = "clickhouse"
	} else {
		path := ac.SQLite
		if path == "" {
			path = filepath.Join(dataDir, "audit.db")
		}
		sink, err = sqlite.Open(ctx, path)
		what = path
	}
	if err != nil {
		return nil, fmt.Errorf("--audit: open the history sink: %w", err)
	}
	ar := &auditRun{sink: sink}
	// One tailer per cluster, each elected among the lockds on the
	// cluster it tails: its checkpoint write is fenced by its leader key,
	// which must be in the same cluster. The history merges them: a row's
	// identity starts with its cluster's ID.
	metrics := audit.NewMetrics(d.reg)
	for _, c := range d.clients() {
		t, err := audit.New(audit.Config{
			Client: c.client, Sink: sink, Name: d.cfg.Listen, Logger: logger.With("component", "audit", "etcd", c.name),
			Metrics: metrics, Now: d.cfg.Now, CompactionWindow: ac.CompactionWindow,
		})
		if err != nil {
			_ = sink.Close()
			return nil, err
		}
		ar.tailers = append(ar.tailers, t)
	}
	var arch *archive.Archiver
	if ac.Archive.Endpoint != "" {
		if arch, err = newArchiver(ctx, ac.Archive, sink, d.cfg.Now, logger); err != nil {
			_ = sink.Close()
			return nil, err
		}
	}
	actx, cancel := context.WithCancel(context.Background())
	ar.cancel = cancel
	for _, t := range ar.tailers {
		ar.wg.Add(1)
		go func() { defer ar.wg.Done(); _ = t.Run(actx) }()
	}
	if arch != nil {
		ar.wg.Add(1)
		go func() { defer ar.wg.Done(); _ = arch.Run(actx, ac.Archive.Every) }()
	}
	logger.Info("audit history on", "sink", what, "archive", ac.Archive.Endpoint != "", "clusters", len(ar.tailers))
	return ar, nil
}

func newArchiver(ctx context.Context, c ArchiveConfig, sink audit.Sink, now func() time.Time, logger *slog.Logger) (*archive.Archiver, error) {
	cli, err := minio.New(c.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
		Secure: !c.Insecure,
	})
	if err != nil {
		return nil, fmt.Errorf("--audit-archive-endpoint %s: %w", c.Endpoint, err)
	}
	a, err := archive.New(archive.Config{Client: cli, Bucket: c.Bucket, ForceBucket: c.ForceBucket, ForceMode: c.ForceMode,
		ForceRetention: c.ForceRetention, Source: sink, Now: now, Logger: logger.With("component", "archive")})
	if err != nil {
		return nil, err
	}
	if err := a.EnsureBuckets(ctx); err != nil {
		return nil, fmt.Errorf("--audit-archive-endpoint %s: %w", c.Endpoint, err)
	}
	return a, nil
}

func (ar *auditRun) close() {
	if ar == nil {
		return
	}
	ar.cancel()
	ar.wg.Wait()
	_ = ar.sink.Close()
}

// RunAudit runs only the audit history, no arbiter: a tailer per cluster
// (each a candidate in its cluster's election), their sink and the
// archive, on the external clusters cfg names, serving /metrics on
// cfg.MetricsListen, until ctx ends. It is `lockd audit`.
func RunAudit(ctx context.Context, cfg Config) error {
	// lockd audit serves /metrics only when asked (--metrics-listen empty:
	// none); the arbiter's rule that it is host:port applies when given.
	v := cfg
	if v.MetricsListen == "" {
		v.MetricsListen = "127.0.0.1:0"
	}
	if err := v.Validate(); err != nil {
		return err
	}
	if len(cfg.EtcdEndpoints) == 0 {
		return fmt.Errorf("%w: --etcd-endpoints: required: lockd audit tails an external cluster (the embedded lockd tails its own)", ErrConfig)
	}
	d := &Daemon{cfg: cfg, log: newLogger(&cfg), closed: make(chan struct{})}
	d.cfg.Audit.Mode = AuditOn
	d.reg = cfg.Registry
	if d.reg == nil {
		d.reg = prometheus.NewRegistry()
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("--data-dir %q: %w", cfg.DataDir, err)
	}
	if d.backend, d.mode, err = openStore(&d.cfg, dataDir); err != nil {
		return err
	}
	defer d.backend.Close()
	_, err = d.openClusters(&d.cfg, dataDir)
	defer func() {
		for _, b := range d.clusterBackends {
			b.Close()
		}
	}()
	if err != nil {
		return err
	}
	ar, err := d.startAudit(ctx, dataDir, d.log)
	if err != nil {
		return err
	}
	defer ar.close()
	if cfg.MetricsListen != "" {
		lis, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		hs := &http.Server{Handler: promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(lis) }()
		defer hs.Close()
	}
	d.log.Info("lockd audit ready", "etcd_endpoints", cfg.EtcdEndpoints, "metrics_listen", cfg.MetricsListen)
	<-ctx.Done()
	return nil
}
