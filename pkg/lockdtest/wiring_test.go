package lockdtest_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// target is a running lockd as the probes see it.
type target struct {
	addr, metricsAddr, classesDir string
}

// TestHelperRunsTheShippedWiring runs the same probes against the lockd
// binary (go build ./cmd/lockd) and against lockdtest's lockd: the gRPC
// keepalive policy, the class watcher and the HTTP endpoints must behave
// the same. A control server with gRPC's default keepalive policy shows the
// keepalive probe can tell the difference.
func TestHelperRunsTheShippedWiring(t *testing.T) {
	helper := lockdtest.Start(t, lockdtest.Options{})
	targets := map[string]target{
		"binary":    startBinary(t),
		"lockdtest": {addr: helper.Addr, metricsAddr: helper.MetricsAddr, classesDir: helper.ClassesDir},
	}
	for name, tg := range targets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("http endpoints", func(t *testing.T) { probeHTTP(t, tg) })
			t.Run("class watcher", func(t *testing.T) { probeClassReload(t, tg) })
			t.Run("keepalive policy", func(t *testing.T) {
				if goaway := pingsWithoutStreams(t, tg.addr); goaway != "" {
					t.Fatalf("pings every %s without a stream got GOAWAY %q; lockd's policy permits them", pingGap, goaway)
				}
			})
		})
	}
	t.Run("control: gRPC's default keepalive policy", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		go func() { _ = g.Serve(l) }()
		defer g.Stop()
		if goaway := pingsWithoutStreams(t, l.Addr().String()); !strings.Contains(goaway, "too_many_pings") {
			t.Fatalf("the default policy was not told apart: GOAWAY %q, want too_many_pings", goaway)
		}
	})
}

// probeHTTP checks /healthz, /readyz and /metrics (lockd's own metrics and
// the Go collector's).
func probeHTTP(t *testing.T, tg target) {
	for path, want := range map[string]string{"/healthz": "", "/readyz": "", "/metrics": "lockd_sealed"} {
		resp, err := http.Get("http://" + tg.metricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body has %q: %v", path, resp.StatusCode, want, strings.Contains(string(body), want))
		}
		if path == "/metrics" && !strings.Contains(string(body), "go_goroutines") {
			t.Errorf("GET /metrics: no Go collector metrics")
		}
	}
}

// probeClassReload writes a new class and grant into the watched directory
// and waits until Alice can lock a key of it.
func probeClassReload(t *testing.T, tg target) {
	body := `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: late, namespace: late}
spec:
  keys: ["late/"]
  purpose: correctness
  enforcement: fenced
  ttl: 5s
  tier: entity
  resource: test-db
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: alice, namespace: late}
spec:
  spiffeID: ` + lockdtest.Alice + `
  prefixes: ["late/"]
`
	c := lockdtest.ClientAt(t, tg.addr, lockdtest.Alice)
	if _, err := c.Acquire(t.Context(), "late/x", "late", func(*client.Lock) {}); err == nil {
		t.Fatal("acquired a key of a class not written yet")
	}
	if err := os.MkdirAll(filepath.Join(tg.classesDir, "late"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tg.classesDir, "late", "classes.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	lockdtest.WaitFor(t, 15*time.Second, "the new class is loaded", func() bool {
		l, err := c.Acquire(t.Context(), "late/x", "late", func(*client.Lock) {})
		if err != nil {
			return false
		}
		_ = l.Release(t.Context())
		return true
	})
}

// pingGap is longer than lockd's keepalive MinTime (5s) and far shorter
// than gRPC's default (5 minutes, and no pings without streams at all).
const pingGap = 5200 * time.Millisecond

// pingsWithoutStreams opens a bare HTTP/2 connection, sends four pings
// pingGap apart without opening a stream, and returns the debug data of the
// GOAWAY the server sent ("" when it sent none). gRPC's server sends GOAWAY
// "too_many_pings" after three pings its policy counts as abuse.
func pingsWithoutStreams(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var wmu sync.Mutex
	write := func(f func() error) {
		wmu.Lock()
		defer wmu.Unlock()
		if err := f(); err != nil {
			t.Errorf("write frame: %v", err)
		}
	}
	write(func() error { return fr.WriteSettings() })
	goaway := make(chan string, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					write(fr.WriteSettingsAck)
				}
			case *http2.GoAwayFrame:
				goaway <- f.ErrCode.String() + " " + string(f.DebugData())
				return
			}
		}
	}()
	for i := range 4 {
		if i > 0 {
			select {
			case g := <-goaway:
				return g
			case <-time.After(pingGap):
			}
		}
		write(func() error { return fr.WritePing(false, [8]byte{byte(i)}) })
	}
	select {
	case g := <-goaway:
		return g
	case <-time.After(2 * time.Second):
		return ""
	}
}

// startBinary builds cmd/lockd and runs it on its embedded store in
// insecure-loopback mode with lockdtest's classes.
func startBinary(t *testing.T) target {
	t.Helper()
	root := moduleRoot(t)
	bin := filepath.Join(t.TempDir(), "lockd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lockd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lockd: %v\n%s", err, out)
	}
	tg := target{addr: lockdtest.FreeAddr(t), metricsAddr: lockdtest.FreeAddr(t), classesDir: t.TempDir()}
	lockdtest.WriteClasses(t, tg.classesDir)
	cmd := exec.Command(bin, "--insecure-loopback", "--data-dir", t.TempDir(), "--classes", tg.classesDir,
		"--listen", tg.addr, "--metrics-listen", tg.metricsAddr,
		"--etcd-client-url", "http://"+lockdtest.FreeAddr(t), "--etcd-peer-url", "http://"+lockdtest.FreeAddr(t))
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for {
		resp, err := http.Get("http://" + tg.metricsAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return tg
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the lockd binary was not ready within 60s; its log:\n%s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// moduleRoot is the directory of go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
