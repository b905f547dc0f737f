package classlint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cost"
	"github.com/lockd-dev/lockd/internal/gittest"
	"github.com/lockd-dev/lockd/internal/testserver"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// serveMetrics serves reg at http://<addr>/metrics on a free loopback port,
// as lockd's --metrics-listen does, and returns addr.
func serveMetrics(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// eventually polls cond every 250ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func fencedClass(ns, name, ttl string) string {
	return fmt.Sprintf(`apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: %s, namespace: %s}
spec:
  keys: ["%s/%s/"]
  purpose: correctness
  enforcement: fenced
  ttl: %s
  tier: entity
  resource: test-db
`, name, ns, ns, name, ttl)
}

// classRepo commits t/std and ghost/x at 15s and changes both to 30s in
// the work tree. It returns the class directory.
func classRepo(t *testing.T) string {
	r := gittest.New(t)
	r.Write("classes/t/classes.yaml", fencedClass("t", "std", "15s"))
	r.Write("classes/ghost/classes.yaml", fencedClass("ghost", "x", "15s"))
	r.Commit("classes")
	r.Write("classes/t/classes.yaml", fencedClass("t", "std", "30s"))
	r.Write("classes/ghost/classes.yaml", fencedClass("ghost", "x", "30s"))
	return filepath.Join(r.Dir, "classes")
}

// TestCostAndRegisterAgainstRealPrometheus runs a real lockd with real
// sessions, a real Prometheus scraping it, and class-lint cost and register
// against that Prometheus.
func TestCostAndRegisterAgainstRealPrometheus(t *testing.T) {
	ctx := t.Context()
	const sessions = 3

	// lockd A serves the sessions: one per worker identity, all in
	// namespace t, on class std's 15s TTL.
	regA := prometheus.NewRegistry()
	a := lockdtest.Start(t, lockdtest.Options{Registry: regA})
	for i := range sessions {
		c := a.Client(t, lockdtest.Worker(i))
		_, err := c.Acquire(ctx, fmt.Sprintf("t/k%d", i), "std", func(*client.Lock) {})
		require.NoError(t, err)
	}
	// One grant of the advisory class other/cache now, so the counter
	// exists before Prometheus first scrapes it; more come later.
	other := a.Client(t, "spiffe://test.local/other")
	grant := func() {
		t.Helper()
		l, err := other.Acquire(ctx, "other/cache/report", "cache", func(*client.Lock) {})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	grant()

	// lockd B is a second arbiter on the same etcd. lockd counts sessions
	// store-wide every 15s, starting when it starts: B, started after the
	// sessions opened, exports them at once.
	regB := prometheus.NewRegistry()
	lockdtest.Start(t, lockdtest.Options{Backend: a.Backend, Registry: regB})

	promURL := testserver.StartPrometheus(t, serveMetrics(t, regA), serveMetrics(t, regB))
	prom, err := cost.NewPrometheus(promURL)
	require.NoError(t, err)
	eventually(t, 15*time.Second, "Prometheus reports the sessions of namespace t", func() (bool, string) {
		got, err := prom.Sessions(ctx)
		return err == nil && got["t"] == sessions, fmt.Sprintf("%v, %v", got, err)
	})

	t.Run("cost", func(t *testing.T) {
		dir := classRepo(t)
		var out, errOut bytes.Buffer
		code := Main([]string{"cost", "--prometheus", promURL, "--dir", dir, "-o", "json"}, &out, &errOut)
		require.Equal(t, ExitOK, code, "stderr: %s", errOut.String())
		var rep cost.Report
		require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
		require.Equal(t, "main", rep.Base.Ref, "no origin/main in the test repository: main is next")
		require.Len(t, rep.Changes, 2)

		ghost, std := rep.Changes[0], rep.Changes[1]
		require.Equal(t, "t/std", std.Name())
		require.True(t, std.SessionsKnown)
		require.Equal(t, float64(sessions), std.Sessions)
		require.InDelta(t, sessions*0.2, std.Before.KeepalivesPerSecond, 1e-9, "%d sessions at 15s renew every 5s", sessions)
		require.InDelta(t, sessions*0.1, std.After.KeepalivesPerSecond, 1e-9, "%d sessions at 30s renew every 10s", sessions)
		require.Equal(t, 17.0, std.Before.LivenessBoundSeconds)
		require.Equal(t, 32.0, std.After.LivenessBoundSeconds)

		require.Equal(t, "ghost/x", ghost.Name())
		require.False(t, ghost.SessionsKnown)
		require.Zero(t, ghost.After.KeepalivesPerSecond)
		require.Contains(t, rep.Notes, "no data for namespace ghost in Prometheus: assumed 0 sessions")

		out.Reset()
		require.Equal(t, ExitOK, Main([]string{"cost", "--prometheus", promURL, "--dir", dir}, &out, &errOut), errOut.String())
		require.Contains(t, out.String(), "~  t/std    ttl 15s → 30s")
		require.Contains(t, out.String(), "0.6 → 0.3")
		require.Contains(t, out.String(), "no data for namespace ghost in Prometheus: assumed 0 sessions")
		t.Logf("class-lint cost:\n%s", out.String())
	})

	t.Run("register", func(t *testing.T) {
		eventually(t, 15*time.Second, "Prometheus has scraped other/cache's grant counter", func() (bool, string) {
			got, err := prom.Grants(ctx)
			_, ok := got[cost.Key{Namespace: "other", Class: "cache"}]
			return err == nil && ok, fmt.Sprintf("%v, %v", got, err)
		})
		const more = 3
		for range more {
			grant()
		}
		// increase() counts what happened between samples, not the first
		// sample's value, and extrapolates a little to the window's edges.
		eventually(t, 15*time.Second, "Prometheus sees the new grants", func() (bool, string) {
			got, err := prom.Grants(ctx)
			return err == nil && got[cost.Key{Namespace: "other", Class: "cache"}] >= more, fmt.Sprintf("%v, %v", got, err)
		})

		dir := t.TempDir()
		lockdtest.WriteClasses(t, dir)
		var out, errOut bytes.Buffer
		code := Main([]string{"register", dir, "--prometheus", promURL, "-o", "csv"}, &out, &errOut)
		require.Equal(t, ExitOK, code, "stderr: %s", errOut.String())
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		require.Equal(t, "namespace,class,risk_owner,waiver_expires,days_left,status,grants_24h", lines[0])
		require.Len(t, lines, 2, "one advisory class: other/cache")
		cells := strings.Split(lines[1], ",")
		require.Equal(t, []string{"other", "cache", "other-team", "2099-01-01"}, cells[:4])
		require.Equal(t, "ok", cells[5])
		grants, err := strconv.Atoi(cells[6])
		require.NoError(t, err)
		require.GreaterOrEqual(t, grants, more, "grants in the last 24h")
		require.LessOrEqual(t, grants, 2*(more+1), "grants in the last 24h, extrapolated")
		t.Logf("class-lint register:\n%s", out.String())
	})
}

func TestCostUsageErrors(t *testing.T) {
	dir := classRepo(t)
	down := "http://" + lockdtest.FreeAddr(t) // nothing listens there
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no --prometheus", []string{"cost", "--dir", dir}, "--prometheus is required"},
		{"not a URL", []string{"cost", "--prometheus", "prometheus:9090", "--dir", dir}, "want an http(s) URL"},
		{"bad output", []string{"cost", "--prometheus", down, "--dir", dir, "-o", "yaml"}, "-o must be text, json or markdown"},
		{"missing base", []string{"cost", "--prometheus", down, "--dir", dir, "--base", "nope"}, "--base nope is not a commit"},
		{"not a git work tree", []string{"cost", "--prometheus", down, "--dir", t.TempDir()}, "not in a git work tree"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, &out, &errOut)
			require.Equal(t, ExitUsage, code, "stdout %q stderr %q", out.String(), errOut.String())
			require.Contains(t, errOut.String(), tt.want)
		})
	}
}

// TestCostUnreachablePrometheus: an unreachable Prometheus is not a usage
// error but an unavailable dependency (69), said on stderr only.
func TestCostUnreachablePrometheus(t *testing.T) {
	dir := classRepo(t)
	down := "http://" + lockdtest.FreeAddr(t) // nothing listens there
	var out, errOut bytes.Buffer
	code := Main([]string{"cost", "--prometheus", down, "--dir", dir}, &out, &errOut)
	require.Equal(t, ExitUnavailable, code, "stdout %q stderr %q", out.String(), errOut.String())
	require.Contains(t, errOut.String(), "query Prometheus at "+down)
	require.Empty(t, out.String())
}

func TestCostUnreachablePrometheusWithoutChanges(t *testing.T) {
	r := gittest.New(t)
	r.Write("classes/t/classes.yaml", fencedClass("t", "std", "15s"))
	r.Commit("classes")
	down := "http://" + lockdtest.FreeAddr(t)
	var out, errOut bytes.Buffer
	code := Main([]string{"cost", "--prometheus", down, "--dir", filepath.Join(r.Dir, "classes")}, &out, &errOut)
	require.Equal(t, ExitUnavailable, code, "a wrong URL shows before the first class change; stdout %q", out.String())
	require.Contains(t, errOut.String(), "query Prometheus at "+down)
}
