package testserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// prometheusReadyTimeout bounds the wait for a started Prometheus to answer
// /-/ready.
const prometheusReadyTimeout = 20 * time.Second

// prometheusBin is where Debian's prometheus package (2.42) installs the
// server (a variable for the missing-binary test).
var prometheusBin = "/usr/bin/prometheus"

// PrometheusBinary returns the prometheus binary the tests run: Debian's
// /usr/bin/prometheus, else prometheus on PATH. The error says how to
// install it.
func PrometheusBinary() (string, error) {
	if isExecutable(prometheusBin) {
		return prometheusBin, nil
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("testserver: prometheus not found (%s, PATH): "+
		"install it with `bash ci/tools.sh apt` (Debian's prometheus package)", prometheusBin)
}

// StartPrometheus runs a real Prometheus on a free port of 127.0.0.1 that
// scrapes targets (host:port, path /metrics, job "lockd") every second and
// evaluates every second, with its data in t.TempDir, waits until /-/ready
// answers and returns its base URL, http://127.0.0.1:PORT. With a 1 s
// scrape the first sample is queryable about 5-6 s after the start: poll.
// The server is killed when the test ends; if the test failed, the tail of
// its log is logged. It fails the test (never skips it) if the binary is
// missing.
func StartPrometheus(t testing.TB, targets ...string) (url string) {
	t.Helper()
	bin, err := PrometheusBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: lockd
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatalf("testserver: prometheus: %v", err)
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("testserver: prometheus: %v", err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		logPath := filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt))
		stop, err := startPrometheus(bin, cfgPath, filepath.Join(dir, "data"), addr, logPath)
		if err == nil {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("testserver: prometheus log (tail):\n%s", readTail(logPath))
				}
			})
			return "http://" + addr
		}
		// The free port can be taken before Prometheus binds it: try
		// again on a fresh one, and fail on the third.
		if attempt == 3 || !strings.Contains(readTail(logPath), "address already in use") {
			t.Fatalf("testserver: prometheus: %v; log (tail):\n%s", err, readTail(logPath))
		}
	}
}

// startPrometheus starts bin on cfgPath, storing in dataDir, listening on
// addr, and waits until it is ready. stop kills it and waits for it.
func startPrometheus(bin, cfgPath, dataDir, addr, logPath string) (stop func(), err error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+dataDir,
		"--web.listen-address="+addr,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	deadline := time.Now().Add(prometheusReadyTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop, nil
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("prometheus exited before it was ready (%v)", waitErr)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("prometheus at %s not ready after %v: %w", addr, prometheusReadyTimeout, err)
		}
	}
}

// QueryPrometheus evaluates promql as an instant query now against the
// Prometheus at url (a base URL, as StartPrometheus returns). A query
// Prometheus answers with warnings is an error too: the warnings say what
// is wrong with it.
func QueryPrometheus(ctx context.Context, url, promql string) (model.Value, error) {
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		return nil, err
	}
	v, warnings, _, err := promv1.NewAPI(c).Query(ctx, promql, time.Now())
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", promql, err)
	}
	if len(warnings) > 0 {
		return v, fmt.Errorf("query %q: warnings: %s", promql, strings.Join(warnings, "; "))
	}
	return v, nil
}
