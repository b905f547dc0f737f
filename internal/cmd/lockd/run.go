package lockdcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// Shutdown and start-up bounds.
const (
	gracefulStopTimeout = 5 * time.Second
	httpShutdownTimeout = 5 * time.Second
	arbiterStartTimeout = 30 * time.Second
	keepaliveMinTime    = 5 * time.Second
)

// run serves until ctx is cancelled (a clean stop, nil error), a listener
// fails or the embedded etcd reports an error. Invalid options return a
// *usageError before anything is started.
func run(ctx context.Context, opts *Options) (err error) {
	if err := opts.validate(); err != nil {
		return err
	}
	logger := newLogger(opts)

	dataDir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return fmt.Errorf("--data-dir %q: %w", opts.DataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := arbiter.NewMetrics(reg, server.Code)

	// Classes load without the clock: a lapsed advisory waiver is class-lint's
	// failure to report, not a reason for lockd to stop serving.
	noClock := func() time.Time { return time.Time{} }
	watcher, err := class.NewWatcher(opts.ClassesDir, noClock, logger.With("component", "classes"),
		func(error) { metrics.ClassReloadFailures.Inc() })
	if err != nil {
		return fmt.Errorf("load classes from --classes %s: %w", opts.ClassesDir, err)
	}
	defer func() { _ = watcher.Close() }()

	tlsCfg, bundle, tlsMode, err := serverTLS(opts, dataDir, logger)
	if err != nil {
		return err
	}

	backend, mode, err := openStore(opts, dataDir)
	if err != nil {
		return err
	}
	defer backend.Close()

	opv, err := operatorVerifier(ctx, opts, logger)
	if err != nil {
		return err
	}
	bootstrap := arbiter.Bootstrap{FreshStore: backend.Fresh}
	if opts.BootstrapEpochClusterID != "" {
		bootstrap.ClusterID, _ = strconv.ParseUint(opts.BootstrapEpochClusterID, 16, 64) // validated
	}
	arb, err := arbiter.New(arbiter.Config{
		Client:                 backend.Client,
		Leases:                 backend.Leases,
		Operators:              operators(opts, logger),
		OIDCOperators:          opv != nil,
		Logger:                 logger.With("component", "arbiter"),
		Now:                    opts.Now,
		RequestTimeout:         opts.RequestTimeout,
		StateFile:              filepath.Join(dataDir, "epoch-state.json"),
		Bootstrap:              bootstrap,
		MaxSessionsPerIdentity: opts.MaxSessionsPerIdentity,
		MaxWaitersPerIdentity:  opts.MaxWaitersPerIdentity,
		ValidateRate:           opts.ValidateRate,
		ValidateBurst:          opts.ValidateBurst,
		Metrics:                metrics,
	}, arbiter.NewPolicy(watcher.Current()))
	if err != nil {
		return err
	}
	startCtx, cancelStart := context.WithTimeout(ctx, arbiterStartTimeout)
	err = arb.Start(startCtx)
	cancelStart()
	if err != nil {
		return fmt.Errorf("start arbiter: %w", err)
	}
	defer arb.Close()

	// Always apply the watcher's current set, under a lock, so a reload
	// racing with registration cannot leave an older set in place.
	var policyMu sync.Mutex
	applyPolicy := func() {
		policyMu.Lock()
		defer policyMu.Unlock()
		arb.SetPolicy(arbiter.NewPolicy(watcher.Current()))
	}
	watcher.OnChange(func(*class.Set) { applyPolicy() })
	applyPolicy()

	grpcLis, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	httpLis, err := net.Listen("tcp", opts.MetricsListen)
	if err != nil {
		_ = grpcLis.Close()
		return fmt.Errorf("--metrics-listen: %w", err)
	}

	gopts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
	}
	if tlsCfg != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	g := grpc.NewServer(gopts...)
	srv := server.New(arb, identity.Extractor{Insecure: opts.InsecureLoopback}, logger.With("component", "server"))
	if opv != nil {
		srv.RequireOperatorTokens(opv)
	}
	srv.Register(g)
	handler := srv.HTTPHandler(reg)
	if opts.DebugPprof {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		handler = mux
		logger.Warn("--debug-pprof: Go profiles are served at /debug/pprof/ on " + opts.MetricsListen)
	}
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.With("component", "http").Handler(), slog.LevelWarn),
	}

	// lockctl's config is written before /readyz can answer: a script that
	// waits for readiness and then runs lockctl finds it.
	lockctlPath := ""
	if mode == "embedded" && bundle != nil {
		lockctlPath = filepath.Join(dataDir, "lockctl.yaml")
		contexts := []clientconfig.Context{{
			Name:   "dev",
			Server: dialAddr(grpcLis.Addr()),
			CA:     bundle.CACert,
			Cert:   bundle.ClientCert,
			Key:    bundle.ClientKey,
		}}
		if _, err := os.Stat(lockctlPath); errors.Is(err, os.ErrNotExist) && len(opts.Operators) == 0 {
			ops, err := devOperatorContexts(dataDir, dialAddr(grpcLis.Addr()), bundle.CACert, opts.now())
			if err != nil {
				_ = grpcLis.Close()
				_ = httpLis.Close()
				return err
			}
			contexts = append(contexts, ops...)
		}
		wrote, err := writeLockctlConfig(lockctlPath, clientconfig.Config{CurrentContext: "dev", Contexts: contexts})
		if err != nil {
			_ = grpcLis.Close()
			_ = httpLis.Close()
			return err
		}
		if wrote {
			logger.Info("wrote lockctl config", "path", lockctlPath)
		}
	}

	serveErr := make(chan error, 2)
	go func() {
		if err := g.Serve(grpcLis); err != nil {
			serveErr <- fmt.Errorf("gRPC server: %w", err)
		}
	}()
	go func() {
		if err := hs.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("HTTP server: %w", err)
		}
	}()
	defer func() {
		srv.Shutdown()
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(gracefulStopTimeout):
			logger.Warn("gRPC graceful stop timed out; closing remaining streams", "timeout", gracefulStopTimeout)
			g.Stop()
			<-stopped
		}
		sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
		logger.Info("lockd stopped")
	}()

	ready := []any{
		"listen", grpcLis.Addr().String(),
		"metrics_listen", httpLis.Addr().String(),
		"mode", mode,
		"tls", tlsMode,
		"classes", len(watcher.Current().Classes()),
	}
	if mode == "embedded" {
		ready = append(ready, "etcd_client_url", opts.EtcdClientURL)
	} else {
		ready = append(ready, "etcd_endpoints", opts.EtcdEndpoints)
	}
	if st, err := arb.EpochStatus(ctx); err != nil {
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
	ready = append(ready, "lockctl_config", lockctlPath)
	logger.Info("lockd ready", ready...)

	var etcdErr <-chan error
	if backend.Embedded != nil {
		etcdErr = backend.Embedded.Err()
	}
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "reason", context.Cause(ctx).Error())
		return nil
	case err := <-serveErr:
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

// newLogger builds the slog logger the options ask for; they are validated.
func newLogger(opts *Options) *slog.Logger {
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
func serverTLS(opts *Options, dataDir string, logger *slog.Logger) (*tls.Config, *devpki.Bundle, string, error) {
	switch {
	case opts.InsecureLoopback:
		logger.Warn("INSECURE: --insecure-loopback is set: gRPC is plaintext and callers are identified by the " +
			"unverified " + identity.InsecureIdentityHeader + " header, so any local process can claim any identity. " +
			"Use it for tests only.")
		return nil, nil, "insecure-loopback", nil
	case opts.devPKI():
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
func openStore(opts *Options, dataDir string) (*store.Backend, string, error) {
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
	b, err := store.ConnectExternal(store.ExternalConfig{
		Endpoints: opts.EtcdEndpoints,
		CAFile:    opts.EtcdCA,
		CertFile:  opts.EtcdCert,
		KeyFile:   opts.EtcdKey,
	})
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
func operators(opts *Options, logger *slog.Logger) []string {
	if len(opts.Operators) > 0 || !opts.devPKI() {
		return opts.Operators
	}
	logger.Warn("development PKI: dev operator SVIDs stand in for operator sign-in (two people for force-release); "+
		"issue one with: lockd dev-cert "+DevOperators[0]+" --out ./op1", "operators", DevOperators)
	return DevOperators
}

// devOperatorContexts issues the dev operators' SVIDs into the dev PKI and
// returns lockctl contexts for them ("dev-op1", "dev-op2").
func devOperatorContexts(dataDir, server, ca string, now time.Time) ([]clientconfig.Context, error) {
	var out []clientconfig.Context
	for i, op := range DevOperators {
		name := fmt.Sprintf("dev-op%d", i+1)
		cert, key, err := devpki.IssueSVID(filepath.Join(dataDir, "pki"), op, filepath.Join(dataDir, "pki", name), now)
		if err != nil {
			return nil, fmt.Errorf("dev operator %s: %w", op, err)
		}
		out = append(out, clientconfig.Context{Name: name, Server: server, CA: ca, Cert: cert, Key: key})
	}
	return out, nil
}

// operatorVerifier is the OIDC verifier of operator tokens, or nil when
// --oidc-issuer is not set.
func operatorVerifier(ctx context.Context, opts *Options, logger *slog.Logger) (*operator.Verifier, error) {
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
