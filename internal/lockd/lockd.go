// Package lockd assembles a lockd from a validated Config: the store
// (embedded etcd or an external cluster), the arbiter, the class watcher,
// the gRPC server with its keepalive policy and credentials, and the HTTP
// endpoints (/metrics, /healthz, /readyz). The lockd command and
// pkg/lockdtest both build lockd here, so tests run the wiring that ships,
// the way etcd's binary and its integration tests both call
// embed.StartEtcd.
package lockd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/devpki"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/operator"
	"github.com/lockd-dev/lockd/internal/server"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/internal/tracing"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// Start-up and shutdown bounds, and the gRPC keepalive policy.
const (
	defaultShutdownGrace = 5 * time.Second
	httpShutdownTimeout  = 5 * time.Second
	arbiterStartTimeout  = 30 * time.Second
	// KeepaliveMinTime is the shortest client ping interval lockd accepts
	// (with or without open streams); a client pinging faster is sent
	// GOAWAY "too_many_pings".
	KeepaliveMinTime = 5 * time.Second
	// streamWorkers is how many goroutines serve gRPC calls, each reused
	// from call to call, so a call does not grow a new goroutine's stack
	// (about 7 % of lockd's CPU at 4,000 grants a second when every call
	// had a goroutine of its own). When all are busy (calls waiting in
	// line hold theirs), a call gets a goroutine of its own, as before.
	streamWorkers = 128
)

// Daemon is a built lockd. New binds its listeners and starts its
// arbiter; Run serves; Close stops what New started.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	backend *store.Backend
	owns    bool // backend was opened here and is closed by Close
	// clusterBackends are the other clusters' stores opened here, closed
	// by Close; others are every other cluster's client.
	clusterBackends []*store.Backend
	others          []namedClient
	// stopMoves stops the shard move controller and waits for it (nil
	// without shards).
	stopMoves func()
	mode      string
	tlsMode   string
	watcher   classSource
	arb       *arbiter.Arbiter
	svc       *server.Server
	g         *grpc.Server
	hs        *http.Server
	grpcLis   net.Listener
	httpLis   net.Listener
	// lockctlPath is the lockctl config written for the dev PKI ("" when none).
	lockctlPath string
	// audit is the running history (nil when off).
	audit *auditRun

	serveErr  chan error
	closed    chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex // guards isClosed and serving.Add against Close
	isClosed  bool
	serveOnce sync.Once
	serving   sync.WaitGroup
}

// New validates cfg and builds a lockd: it loads the classes, opens the
// store, starts the arbiter (which reads the epoch and seals if it must),
// binds both listeners and, for the embedded default on the dev PKI, writes
// lockctl's config. Nothing is served until Run. On error everything
// already started is stopped.
func New(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: newLogger(&cfg), serveErr: make(chan error, 2), closed: make(chan struct{})}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	logger := d.log

	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %q: %w", cfg.DataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}

	d.reg = cfg.Registry
	if d.reg == nil {
		d.reg = prometheus.NewRegistry()
		d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	metrics := arbiter.NewMetrics(d.reg, server.Code)

	d.watcher, err = openClasses(ctx, &cfg, dataDir, logger.With("component", "classes"), metrics)
	if err != nil {
		return nil, err
	}
	registerClassAge(d.reg, d.watcher, cfg.now)
	if rs := d.watcher.Current().Regions(); cfg.Region == "" && len(rs) > 1 {
		return nil, fmt.Errorf("%w: --region: required: the classes in %s home namespaces to regions %s; name the one this lockd serves",
			ErrConfig, d.watcher.describe(), strings.Join(rs, ", "))
	}

	tlsCfg, bundle, tlsMode, err := serverTLS(&cfg, dataDir, logger)
	if err != nil {
		return nil, err
	}
	d.tlsMode = tlsMode

	if cfg.Backend != nil {
		d.backend, d.mode = cfg.Backend, "given"
	} else {
		d.backend, d.mode, err = openStore(&cfg, dataDir)
		if err != nil {
			return nil, err
		}
		d.owns = true
	}

	opv := cfg.OperatorVerifier
	if opv == nil {
		if opv, err = operatorVerifier(ctx, &cfg, logger); err != nil {
			return nil, err
		}
	}
	bootstrap := arbiter.Bootstrap{FreshStore: d.backend.Fresh}
	if cfg.BootstrapEpochClusterID != "" {
		bootstrap.ClusterID, _ = strconv.ParseUint(cfg.BootstrapEpochClusterID, 16, 64) // validated
	}
	stateFile := cfg.StateFile
	if stateFile == "" {
		stateFile = filepath.Join(dataDir, "epoch-state.json")
	}
	arbiterID, err := loadArbiterID(dataDir)
	if err != nil {
		return nil, err
	}
	clusters, err := d.openClusters(&cfg, dataDir)
	if err != nil {
		return nil, err
	}
	d.arb, err = arbiter.New(arbiter.Config{
		Client:                 d.backend.Client,
		KV:                     d.backend.KV,
		Leases:                 d.backend.Leases,
		Operators:              operators(&cfg, logger),
		OIDCOperators:          opv != nil,
		Logger:                 logger.With("component", "arbiter"),
		Now:                    cfg.Now,
		RequestTimeout:         cfg.RequestTimeout,
		PollInterval:           cfg.PollInterval,
		MaxBatch:               cfg.MaxBatch,
		MaxTxnOps:              cfg.MaxTxnOps,
		StateFile:              stateFile,
		Bootstrap:              bootstrap,
		MaxSessionsPerIdentity: cfg.MaxSessionsPerIdentity,
		MaxWaitersPerIdentity:  cfg.MaxWaitersPerIdentity,
		ValidateRate:           cfg.ValidateRate,
		ValidateBurst:          cfg.ValidateBurst,
		Metrics:                metrics,
		SpoolDir:               filepath.Join(dataDir, "spool"),
		ArbiterID:              arbiterID,
		OpenAfter:              cfg.OpenAfter,
		Region:                 cfg.Region,
		RegionEndpoints:        cfg.RegionEndpoints,
		Cluster:                clusterName(cfg.Cluster, d.backend.Embedded != nil),
		Clusters:               clusters,
		CoordServesEntity:      cfg.CoordServesEntity,
	}, arbiter.NewPolicy(d.watcher.Current()))
	if err != nil {
		return nil, err
	}
	startCtx, cancelStart := context.WithTimeout(ctx, arbiterStartTimeout)
	err = d.arb.Start(startCtx)
	cancelStart()
	if err != nil {
		d.arb.Close() // never started: this releases its spool
		d.arb = nil
		return nil, fmt.Errorf("start arbiter: %w", err)
	}

	d.startMoves(arbiterID, logger.With("component", "shardmove"))

	// Always apply the watcher's current set, under a lock, so a reload
	// racing with registration cannot leave an older set in place.
	var policyMu sync.Mutex
	applyPolicy := func() {
		policyMu.Lock()
		defer policyMu.Unlock()
		d.arb.SetPolicy(arbiter.NewPolicy(d.watcher.Current()))
	}
	d.watcher.OnChange(func(*class.Set) { applyPolicy() })
	applyPolicy()

	if d.grpcLis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	if d.httpLis, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}

	gopts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(streamWorkers),
	}
	if tlsCfg != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	if cfg.TracerProvider != nil {
		gopts = append(gopts, tracing.ServerOptions(cfg.TracerProvider, client.Reason)...)
		// The exporter's failures (a collector down) go to lockd's log, not
		// to stderr in the SDK's own format. They never affect a call.
		tlog := logger.With("component", "tracing")
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			tlog.Warn("tracing: spans not exported (they are dropped; calls are not affected)", "err", err)
		}))
	}
	d.g = grpc.NewServer(gopts...)
	d.svc = server.New(d.arb, extractor(&cfg, logger), logger.With("component", "server"))
	if opv != nil {
		d.svc.RequireOperatorTokens(opv)
	}
	if d.audit, err = d.startAudit(ctx, dataDir, logger); err != nil {
		return nil, err
	}
	if d.audit != nil {
		d.svc.ServeHistory(d.audit.sink)
	}
	d.svc.Register(d.g)
	handler := d.svc.HTTPHandler(d.metricsGatherer(), classesNote(d.watcher, cfg.now))
	if cfg.DebugPprof {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		handler = mux
		logger.Warn("--debug-pprof: Go profiles are served at /debug/pprof/ on " + d.httpLis.Addr().String())
	}
	d.hs = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.With("component", "http").Handler(), slog.LevelWarn),
	}

	// lockctl's config is written before /readyz can answer: a script that
	// waits for readiness and then runs lockctl finds it.
	if d.mode == "embedded" && bundle != nil {
		if err := d.writeDevLockctlConfig(dataDir, bundle); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// metricsGatherer is what /metrics serves: lockd's registry and, when the
// etcd runs embedded in this process, that etcd's own metrics (etcd_*,
// grpc_server_* for its gRPC API), which etcd registers in
// prometheus.DefaultRegisterer. An operator of the embedded default then
// scrapes one endpoint for lockd and its etcd, without exposing etcd's
// client port (which also serves them) to Prometheus. A name both have is
// served from lockd's registry only: the default registry's Go and process
// collectors describe this same process.
func (d *Daemon) metricsGatherer() prometheus.Gatherer {
	if d.backend.Embedded == nil {
		return d.reg // an external etcd is scraped on its own
	}
	return withProcessMetrics{own: d.reg, process: prometheus.DefaultGatherer}
}

// withProcessMetrics gathers own, then the families of process whose names
// own does not have.
type withProcessMetrics struct{ own, process prometheus.Gatherer }

func (g withProcessMetrics) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.own.Gather()
	have := make(map[string]bool, len(mfs))
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	more, perr := g.process.Gather()
	for _, mf := range more {
		if !have[mf.GetName()] {
			mfs = append(mfs, mf)
		}
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs, errors.Join(err, perr)
}

// writeDevLockctlConfig writes <data-dir>/lockctl.yaml, the first time,
// with the dev client's context, the dev workers' contexts and, without
// --operators, the two dev operators' contexts.
func (d *Daemon) writeDevLockctlConfig(dataDir string, bundle *devpki.Bundle) error {
	path := filepath.Join(dataDir, "lockctl.yaml")
	addr := dialAddr(d.grpcLis.Addr())
	contexts := []clientconfig.Context{{
		Name:   "dev",
		Server: addr,
		CA:     bundle.CACert,
		Cert:   bundle.ClientCert,
		Key:    bundle.ClientKey,
	}}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		ids := map[string]string{}
		for i, w := range DevWorkers {
			ids[fmt.Sprintf("dev-worker%d", i+1)] = w
		}
		if len(d.cfg.Operators) == 0 {
			for i, op := range DevOperators {
				ids[fmt.Sprintf("dev-op%d", i+1)] = op
			}
		}
		more, err := devContexts(dataDir, addr, bundle.CACert, ids, d.cfg.now())
		if err != nil {
			return err
		}
		contexts = append(contexts, more...)
	}
	wrote, err := writeLockctlConfig(path, clientconfig.Config{CurrentContext: "dev", Contexts: contexts})
	if err != nil {
		return err
	}
	if wrote {
		d.log.Info("wrote lockctl config", "path", path)
	}
	d.lockctlPath = path
	return nil
}

// Serve starts serving gRPC and HTTP in the background and logs that lockd
// is ready; it returns at once. A serving failure is reported by Run.
func (d *Daemon) Serve() {
	d.serveOnce.Do(func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.isClosed {
			return
		}
		d.serving.Add(2)
		go func() {
			defer d.serving.Done()
			if err := d.g.Serve(d.grpcLis); err != nil {
				d.serveErr <- fmt.Errorf("gRPC server: %w", err)
			}
		}()
		go func() {
			defer d.serving.Done()
			if err := d.hs.Serve(d.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.serveErr <- fmt.Errorf("HTTP server: %w", err)
			}
		}()
		d.logReady()
	})
}

// logReady says where lockd listens, what it serves from and its epoch.
func (d *Daemon) logReady() {
	logger := d.log
	ready := []any{
		"listen", d.grpcLis.Addr().String(),
		"metrics_listen", d.httpLis.Addr().String(),
		"mode", d.mode,
		"tls", d.tlsMode,
		"classes", len(d.watcher.Current().Classes()),
		"tracing", d.cfg.TracerProvider != nil,
	}
	switch d.mode {
	case "embedded":
		ready = append(ready, "etcd_client_url", d.cfg.EtcdClientURL)
	case "external":
		ready = append(ready, "etcd_endpoints", d.cfg.EtcdEndpoints)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RequestTimeout)
	defer cancel()
	if st, err := d.arb.EpochStatus(ctx, ""); err != nil {
		ready = append(ready, "epoch_error", err.Error())
	} else {
		ready = append(ready, "epoch", st.Epoch, "sealed", st.Sealed,
			"cluster_id", fmt.Sprintf("%x", st.StoreClusterID))
		if st.Sealed {
			logger.Warn("sealed: grants are refused until two operators advance the epoch",
				"why", st.SealedReason, "epoch", st.Epoch, "record_cluster_id", fmt.Sprintf("%x", st.RecordClusterID),
				"store_cluster_id", fmt.Sprintf("%x", st.StoreClusterID))
		}
	}
	ready = append(ready, "lockctl_config", d.lockctlPath)
	logger.Info("lockd ready", ready...)
}

// Run serves (Serve) until ctx is cancelled or Close is called (a clean
// stop, nil error), a listener fails or the embedded etcd reports an
// error. It does not close the Daemon: call Close after it returns.
func (d *Daemon) Run(ctx context.Context) error {
	logger := d.log
	d.Serve()
	var etcdErr <-chan error
	if d.owns && d.backend.Embedded != nil {
		etcdErr = d.backend.Embedded.Err()
	}
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "reason", context.Cause(ctx).Error())
		return nil
	case <-d.closed:
		return nil
	case err := <-d.serveErr:
		logger.Error("shutting down", "error", err.Error())
		return err
	case err, ok := <-etcdErr:
		if !ok || err == nil {
			err = errors.New("stopped")
		}
		logger.Error("shutting down: embedded etcd failed", "error", err.Error())
		return fmt.Errorf("embedded etcd: %w", err)
	}
}

// Close stops serving (waiting up to the shutdown grace for in-flight
// calls), then the arbiter, the store it opened and the class watcher. It
// is safe to call more than once and on a Daemon New did not finish.
func (d *Daemon) Close() {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.isClosed = true
		d.mu.Unlock()
		close(d.closed)
		if d.svc != nil {
			d.svc.Shutdown()
		}
		if d.arb != nil {
			d.arb.Drain() // waits end with "acquire again" before the calls are cut
		}
		if d.stopMoves != nil {
			d.stopMoves()
		}
		if d.g != nil {
			grace := d.cfg.ShutdownGrace
			if grace == 0 {
				grace = defaultShutdownGrace
			}
			stopped := make(chan struct{})
			go func() { d.g.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(grace):
				d.log.Warn("gRPC graceful stop timed out; closing remaining streams", "timeout", grace)
				d.g.Stop()
				<-stopped
			}
		}
		if d.hs != nil {
			sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
			if err := d.hs.Shutdown(sctx); err != nil {
				_ = d.hs.Close()
			}
			cancel()
		}
		for _, l := range []net.Listener{d.grpcLis, d.httpLis} {
			if l != nil {
				_ = l.Close() // never served, or already closed by the servers
			}
		}
		d.serving.Wait()
		if d.arb != nil {
			d.arb.Close()
		}
		d.audit.close()
		if d.owns && d.backend != nil {
			d.backend.Close()
		}
		for _, b := range d.clusterBackends {
			b.Close()
		}
		if d.watcher != nil {
			_ = d.watcher.Close()
		}
		if d.g != nil {
			d.log.Info("lockd stopped")
		}
	})
}

// Addr is the address a local client dials to reach the gRPC listener.
func (d *Daemon) Addr() string { return dialAddr(d.grpcLis.Addr()) }

// MetricsAddr is the address of the HTTP listener (/metrics, /healthz,
// /readyz).
func (d *Daemon) MetricsAddr() string { return dialAddr(d.httpLis.Addr()) }

// ClassSetAge is how old the served class set may be: the time since its
// source last confirmed it current (lockd_class_set_age_seconds).
func (d *Daemon) ClassSetAge() time.Duration {
	at, _ := d.watcher.confirmed()
	if at.IsZero() {
		return 0
	}
	return max(d.cfg.now().Sub(at), 0)
}

// Arbiter is the running arbiter.
func (d *Daemon) Arbiter() *arbiter.Arbiter { return d.arb }

// Service is the lock.v1 gRPC service implementation.
func (d *Daemon) Service() *server.Server { return d.svc }

// newLogger builds the slog logger the options ask for; they are validated.
func newLogger(opts *Config) *slog.Logger {
	w := opts.LogOutput
	if w == nil {
		w = io.Discard
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(opts.LogLevel))
	ho := &slog.HandlerOptions{Level: level}
	if opts.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, ho))
	}
	return slog.New(slog.NewJSONHandler(w, ho))
}

// serverTLS returns the gRPC server TLS configuration (nil for
// --insecure-loopback), the dev PKI bundle when one is used, and a word for
// the log.
func serverTLS(opts *Config, dataDir string, logger *slog.Logger) (*tls.Config, *devpki.Bundle, string, error) {
	switch {
	case opts.InsecureLoopback:
		logger.Warn("INSECURE: --insecure-loopback is set: gRPC is plaintext and callers are identified by the " +
			"unverified " + identity.InsecureIdentityHeader + " header, so any local process can claim any identity. " +
			"Use it for tests only.")
		return nil, nil, "insecure-loopback", nil
	case opts.DevPKI():
		pkiDir := filepath.Join(dataDir, "pki")
		b, err := devpki.Ensure(pkiDir, devHosts(opts.Listen), DevSPIFFEID, opts.now())
		if err != nil {
			return nil, nil, "", fmt.Errorf("dev PKI in %s: %w", pkiDir, err)
		}
		cfg, err := identity.ServerTLS(b.ServerCert, b.ServerKey, b.CACert)
		if err != nil {
			return nil, nil, "", fmt.Errorf("dev PKI in %s: %w", pkiDir, err)
		}
		logger.Warn("using the development PKI: its CA key is unencrypted on disk; pass --tls-cert, --tls-key and --tls-client-ca in production",
			"pki_dir", pkiDir, "dev_identity", DevSPIFFEID)
		return cfg, b, "dev-pki", nil
	default:
		cfg, err := identity.ServerTLS(opts.TLSCert, opts.TLSKey, opts.TLSClientCA)
		if err != nil {
			return nil, nil, "", fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
		}
		return cfg, nil, "mtls", nil
	}
}

// devHosts are the names the dev server certificate is valid for: the
// --listen host (unless it is a wildcard) plus localhost and 127.0.0.1.
func devHosts(listen string) []string {
	hosts := []string{"localhost", "127.0.0.1"}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return hosts
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return hosts
	}
	return append([]string{host}, hosts...)
}

// dialAddr is the address a local client dials to reach a listener: a
// wildcard host becomes 127.0.0.1, which the dev server certificate covers.
func dialAddr(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil || !ap.Addr().IsUnspecified() {
		return a.String()
	}
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ap.Port()).String()
}

// openStore starts the embedded etcd or connects to the external cluster.
// openClusters connects to the clusters lockd fronts besides the coord
// cluster; the Daemon closes the ones it opened.
func (d *Daemon) openClusters(cfg *Config, dataDir string) ([]arbiter.Cluster, error) {
	var out []arbiter.Cluster
	for i, name := range cfg.EmbeddedShards {
		clientURL, err := shardURL(cfg.EtcdClientURL, 2*(i+1))
		if err != nil {
			return nil, fmt.Errorf("--embedded-shard %s: %w", name, err)
		}
		peerURL, err := shardURL(cfg.EtcdClientURL, 2*(i+1)+1)
		if err != nil {
			return nil, fmt.Errorf("--embedded-shard %s: %w", name, err)
		}
		b, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: filepath.Join(dataDir, "shards", name), Name: name,
			ClientURL: clientURL, PeerURL: peerURL, ClusterToken: name})
		if err != nil {
			return nil, fmt.Errorf("--embedded-shard %s: %w", name, err)
		}
		d.clusterBackends = append(d.clusterBackends, b)
		cfg.Clusters = append(cfg.Clusters, ClusterConfig{Name: name, Tiers: []string{"entity"}, Backend: b})
		cfg.CoordServesEntity = true
	}
	for _, c := range cfg.Clusters {
		b := c.Backend
		if b == nil {
			ext := store.ExternalConfig{Endpoints: c.Endpoints, CAFile: c.CA, CertFile: c.Cert, KeyFile: c.Key}
			if cfg.TracerProvider != nil {
				ext.DialOptions = append(ext.DialOptions, tracing.ClientHandler(cfg.TracerProvider))
			}
			var err error
			if b, err = store.ConnectExternal(ext); err != nil {
				return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
			}
			d.clusterBackends = append(d.clusterBackends, b)
		}
		tiers := make([]class.Tier, len(c.Tiers))
		for i, t := range c.Tiers {
			tiers[i] = class.Tier(t)
		}
		d.others = append(d.others, namedClient{c.Name, b.Client})
		out = append(out, arbiter.Cluster{Name: c.Name, Client: b.Client, KV: b.KV, Tiers: tiers,
			StateFile: filepath.Join(dataDir, "epoch-state-"+c.Name+".json"),
			Bootstrap: arbiter.Bootstrap{FreshStore: b.Fresh}})
	}
	return out, nil
}

// namedClient is an etcd cluster's client and its name.
type namedClient struct {
	name   string
	client *clientv3.Client
}

// clients are the clients of every cluster lockd fronts, the coord
// cluster's first.
func (d *Daemon) clients() []namedClient {
	return append([]namedClient{{clusterName(d.cfg.Cluster, d.backend.Embedded != nil), d.backend.Client}}, d.others...)
}

func openStore(opts *Config, dataDir string) (*store.Backend, string, error) {
	if opts.embedded() {
		b, err := store.StartEmbedded(store.EmbeddedConfig{
			DataDir:      filepath.Join(dataDir, "etcd"),
			ClientURL:    opts.EtcdClientURL,
			PeerURL:      opts.EtcdPeerURL,
			ClusterToken: "lockd",
		})
		if err != nil {
			return nil, "", err
		}
		return b, "embedded", nil
	}
	ext := store.ExternalConfig{
		Endpoints: opts.EtcdEndpoints,
		CAFile:    opts.EtcdCA,
		CertFile:  opts.EtcdCert,
		KeyFile:   opts.EtcdKey,
	}
	if opts.TracerProvider != nil {
		ext.DialOptions = append(ext.DialOptions, tracing.ClientHandler(opts.TracerProvider))
	}
	b, err := store.ConnectExternal(ext)
	if err != nil {
		return nil, "", err
	}
	return b, "external", nil
}

// DevOperators are the operators of a lockd on the development PKI when
// --operators is not given: two, so that two-person approvals can be tried.
// Issue their certificates with "lockd dev-cert".
var DevOperators = []string{"spiffe://lockd.local/ops/dev-1", "spiffe://lockd.local/ops/dev-2"}

// operators returns --operators, or DevOperators on the development PKI,
// and says which.
func operators(opts *Config, logger *slog.Logger) []string {
	if len(opts.Operators) > 0 || !opts.DevPKI() {
		return opts.Operators
	}
	logger.Warn("development PKI: dev operator SVIDs stand in for operator sign-in (two people for force-release); "+
		"issue one with: lockd dev-cert "+DevOperators[0]+" --out ./op1", "operators", DevOperators)
	return DevOperators
}

// DevWorkers are workload identities the development setup issues SVIDs
// and lockctl contexts for ("dev-worker1", "dev-worker2"), so that two
// workers can contend for a key the way two processes with their own
// SPIFFE IDs do in production. classes/demo grants them demo/.
var DevWorkers = []string{"spiffe://lockd.local/worker-1", "spiffe://lockd.local/worker-2"}

// devContexts issues an SVID into the dev PKI for each context name's
// identity and returns lockctl contexts for them, sorted by name.
func devContexts(dataDir, server, ca string, ids map[string]string, now time.Time) ([]clientconfig.Context, error) {
	names := slices.Sorted(maps.Keys(ids))
	var out []clientconfig.Context
	for _, name := range names {
		cert, key, err := devpki.IssueSVID(filepath.Join(dataDir, "pki"), ids[name], filepath.Join(dataDir, "pki", name), now)
		if err != nil {
			return nil, fmt.Errorf("dev identity %s: %w", ids[name], err)
		}
		out = append(out, clientconfig.Context{Name: name, Server: server, CA: ca, Cert: cert, Key: key})
	}
	return out, nil
}

// operatorVerifier is the OIDC verifier of operator tokens, or nil when
// --oidc-issuer is not set.
func operatorVerifier(ctx context.Context, opts *Config, logger *slog.Logger) (*operator.Verifier, error) {
	if opts.OIDCIssuer == "" {
		return nil, nil
	}
	cfg := operator.Config{Issuer: opts.OIDCIssuer, Audience: opts.OIDCAudience, RolesClaim: opts.OIDCRolesClaim,
		Role: opts.OIDCRole, ACR: opts.OIDCACR}
	if opts.OIDCCA != "" {
		pem, err := os.ReadFile(opts.OIDCCA)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--oidc-ca %s: no PEM certificate", opts.OIDCCA)
		}
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	v, err := operator.NewVerifier(ctx, cfg)
	if err != nil {
		return nil, err
	}
	logger.Info("operators sign in with OIDC: force-release and epoch advance need an operator token",
		"issuer", opts.OIDCIssuer, "role", cfg.Role, "roles_claim", opts.OIDCRolesClaim)
	return v, nil
}

// clusterName is the name lockd gives the cluster it fronts: the
// topology's, else what it is.
func clusterName(name string, embedded bool) string {
	switch {
	case name != "":
		return name
	case embedded:
		return "embedded"
	}
	return "etcd"
}

// startMoves runs the shard move controller (internal/shardmove) when the
// entity tier is split across shards: every lockd of a coord cluster
// campaigns, one carries out approved plans.
func (d *Daemon) startMoves(name string, log *slog.Logger) {
	ctl := d.arb.MoveController(name, log)
	if ctl == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx) }()
	d.stopMoves = func() { cancel(); <-done }
}
