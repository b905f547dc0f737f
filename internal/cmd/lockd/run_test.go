package lockdcmd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// freePorts returns n distinct free loopback addresses.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// runResult is the outcome of a background run; done is closed when run
// has returned and err is set.
type runResult struct {
	done chan struct{}
	err  error
}

// startRun runs run in the background and stops it when the test ends.
func startRun(t *testing.T, opts *Options) (cancel func(), res *runResult) {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	res = &runResult{done: make(chan struct{})}
	go func() { res.err = run(ctx, opts); close(res.done) }()
	t.Cleanup(func() {
		cancelCtx()
		select {
		case <-res.done:
		case <-time.After(15 * time.Second):
			t.Error("run did not return after cancel")
		}
	})
	return cancelCtx, res
}

func TestRunEmbeddedDevPKI(t *testing.T) {
	dataDir := t.TempDir()
	ports := freePorts(t, 4)
	opts := DefaultOptions()
	opts.DataDir = dataDir
	opts.ClassesDir = "../../../classes"
	opts.Listen, opts.MetricsListen = ports[0], ports[1]
	opts.EtcdClientURL, opts.EtcdPeerURL = "http://"+ports[2], "http://"+ports[3]
	opts.LogLevel = "debug"
	logs := &syncBuffer{}
	opts.LogOutput = logs

	cancel, res := startRun(t, &opts)

	// Ready: /readyz answers 200.
	base := "http://" + opts.MetricsListen
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-res.done:
			t.Fatalf("run returned early: %v\nlogs:\n%s", res.err, logs.String())
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "not ready in time; logs:\n%s", logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	// The "lockd ready" line follows /readyz by an etcd read.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"lockd ready"`) }, 5*time.Second, 20*time.Millisecond,
		"no lockd ready line; logs:\n%s", logs.String())
	require.Contains(t, logs.String(), `"mode":"embedded"`)

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "lockd_sealed")
	require.Contains(t, string(body), "go_goroutines")
	// The embedded etcd's own metrics, for deploy/grafana/etcd-health.json.
	require.Contains(t, string(body), "etcd_server_has_leader")
	require.Contains(t, string(body), "etcd_disk_wal_fsync_duration_seconds_bucket")
	require.Equal(t, 1, strings.Count(string(body), "# TYPE go_goroutines "), "one Go collector, not lockd's and the default registry's")

	// Dev PKI files and lockctl.yaml with absolute paths.
	pki := filepath.Join(dataDir, "pki")
	for _, name := range []string{"ca.crt", "ca.key", "server.crt", "server.key", "dev.crt", "dev.key"} {
		require.FileExists(t, filepath.Join(pki, name))
	}
	cfg, err := clientconfig.Load(filepath.Join(dataDir, "lockctl.yaml")) // as lockctl reads it
	require.NoError(t, err)
	require.Equal(t, "dev", cfg.CurrentContext)
	// The dev identity, the two dev operators for two-person approvals, and
	// two dev workers with identities of their own.
	require.Len(t, cfg.Contexts, 5)
	for i, name := range []string{"dev", "dev-op1", "dev-op2", "dev-worker1", "dev-worker2"} {
		x := cfg.Contexts[i]
		require.Equal(t, name, x.Name)
		require.Equal(t, opts.Listen, x.Server)
		for _, p := range []string{x.CA, x.Cert, x.Key} {
			require.True(t, filepath.IsAbs(p), p)
			require.FileExists(t, p)
		}
	}
	c := cfg.Contexts[0]

	// gRPC health with the dev SVID succeeds.
	check := func(certFile, keyFile string) error {
		tlsCfg, err := identity.ClientTLS(c.CA, certFile, keyFile, "")
		require.NoError(t, err)
		conn, err := grpc.NewClient(opts.Listen, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return errors.New(resp.GetStatus().String())
		}
		return nil
	}
	require.NoError(t, check(c.Cert, c.Key))
	// A client without a certificate is refused.
	require.Error(t, check("", ""))

	// Cancelling stops run cleanly.
	cancel()
	select {
	case <-res.done:
		require.NoError(t, res.err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	require.Contains(t, logs.String(), `"msg":"lockd stopped"`)
}

func TestRunRefusesInsecureNonLoopback(t *testing.T) {
	opts := DefaultOptions()
	opts.DataDir = t.TempDir()
	opts.ClassesDir = "../../../classes"
	opts.InsecureLoopback = true
	opts.Listen = "0.0.0.0:7420"

	err := run(t.Context(), &opts)
	require.Error(t, err)
	require.Contains(t, err.Error(), "--insecure-loopback")
	require.ErrorIs(t, err, identity.ErrNotLoopback)
	var ue *cli.UsageError
	require.ErrorAs(t, err, &ue)

	// Through the command line it is a usage error (exit 2) naming the flag.
	var stderr bytes.Buffer
	code := execute(t.Context(), []string{"--insecure-loopback", "--listen", "0.0.0.0:7420", "--data-dir", opts.DataDir},
		io.Discard, &stderr, noEnv, run)
	require.Equal(t, ExitUsage, code)
	require.True(t, strings.Contains(stderr.String(), "--insecure-loopback"), stderr.String())
}

func noEnv(string) (string, bool) { return "", false }

// TestLockdSetsItsGCPercentUnlessGOGCIsSet: lockd collects at
// defaultGCPercent by default, and an operator's GOGC (any value) wins.
func TestLockdSetsItsGCPercentUnlessGOGCIsSet(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	tuneGC(env(nil))
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("without GOGC: GC percent %d, want %d", got, defaultGCPercent)
	}
	tuneGC(env(map[string]string{"GOGC": "100"}))
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=100: GC percent %d, want 100 (the runtime's reading of GOGC, untouched)", got)
	}
}
