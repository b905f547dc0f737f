package testserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clickHouseReadyTimeout bounds the wait for a started ClickHouse to answer
// /ping.
const clickHouseReadyTimeout = 60 * time.Second

// clickHouseConfig is the Debian package's server configuration, the one
// a throwaway server's is derived from.
const clickHouseConfig = "/etc/clickhouse-server/config.xml"

// clickHouseSbin is where Debian installs clickhouse-server, outside a
// non-root PATH (a variable for the missing-binary test).
var clickHouseSbin = "/usr/sbin/clickhouse-server"

// ClickHouse is a running throwaway ClickHouse server.
type ClickHouse struct {
	// URL is the audit sink URL of the database "lockd_audit" over the
	// native protocol: clickhouse://127.0.0.1:PORT/lockd_audit.
	URL string
	// TCPAddr and HTTPAddr are the native and HTTP endpoints, host:port.
	TCPAddr, HTTPAddr string

	t    testing.TB
	bin  string
	dir  string
	runs int
	stop func() // nil while stopped
}

// ClickHouseBinary returns the clickhouse-server binary the tests run: on
// PATH or in /usr/sbin (where Debian puts it). The error says how to
// install it.
func ClickHouseBinary() (string, error) {
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil
	}
	if isExecutable(clickHouseSbin) {
		return clickHouseSbin, nil
	}
	return "", errors.New("testserver: clickhouse-server not found (PATH, /usr/sbin): " +
		"install it with `bash ci/tools.sh apt` (Debian's clickhouse-server and clickhouse-client)")
}

// StartClickHouse starts a throwaway ClickHouse server (see
// StartClickHouseServer) and returns the URL of its database "lockd_audit"
// for the audit sink. The database itself is not created: the sink's Open
// does that.
func StartClickHouse(t testing.TB) (url string) {
	t.Helper()
	return StartClickHouseServer(t).URL
}

// StartClickHouseServer starts clickhouse-server as the current user (root
// on CI) with a configuration copied from Debian's
// /etc/clickhouse-server/config.xml, its data, logs and users file moved
// into t.TempDir, listening on 127.0.0.1 only on free tcp, http and
// interserver ports, and waits until /ping answers. The server is killed
// when the test ends. It fails the test if the binary or Debian's
// configuration is missing.
func StartClickHouseServer(t testing.TB) *ClickHouse {
	t.Helper()
	bin, err := ClickHouseBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := &ClickHouse{t: t, bin: bin, dir: t.TempDir()}
	for attempt := range 3 {
		if err = c.configure(); err != nil {
			t.Fatalf("testserver: clickhouse: %v", err)
		}
		if err = c.start(); err == nil {
			break
		}
		// The free ports configure picked can be taken before the server
		// binds them: try again on fresh ones, and fail on the third.
		if attempt == 2 {
			t.Fatalf("testserver: clickhouse: %v", err)
		}
	}
	t.Cleanup(c.Stop)
	return c
}

// Stop kills the server (SIGKILL: nothing is flushed that an insert had not
// already stored) and waits for it to exit. Its data stays for Restart.
// Stopping a stopped server does nothing.
func (c *ClickHouse) Stop() {
	if c.stop != nil {
		c.stop()
		c.stop = nil
	}
}

// Restart starts a stopped server again on the same ports and data
// directory, and waits until it answers. It fails the test if it cannot.
func (c *ClickHouse) Restart() {
	c.t.Helper()
	c.Stop()
	if err := c.start(); err != nil {
		c.t.Fatalf("testserver: clickhouse: restart: %v", err)
	}
}

// clickHousePorts matches the elements configure rewrites, each of which
// must occur in Debian's configuration.
var clickHousePorts = map[string]*regexp.Regexp{
	"http_port":             regexp.MustCompile(`<http_port>\d+</http_port>`),
	"tcp_port":              regexp.MustCompile(`<tcp_port>\d+</tcp_port>`),
	"interserver_http_port": regexp.MustCompile(`<interserver_http_port>\d+</interserver_http_port>`),
}

// configure writes c.dir/config.xml and users.xml from Debian's files, with
// fresh free ports, and sets the addresses and URL.
func (c *ClickHouse) configure() error {
	raw, err := os.ReadFile(clickHouseConfig)
	if err != nil {
		return fmt.Errorf("read Debian's configuration (reinstall it with `bash ci/tools.sh apt`): %w", err)
	}
	users, err := os.ReadFile(filepath.Join(filepath.Dir(clickHouseConfig), "users.xml"))
	if err != nil {
		return fmt.Errorf("read Debian's users.xml (reinstall it with `bash ci/tools.sh apt`): %w", err)
	}
	cfg := string(raw)
	ports := map[string]int{}
	for name, re := range clickHousePorts {
		if !re.MatchString(cfg) {
			return fmt.Errorf("%s has no <%s> to move to a free port", clickHouseConfig, name)
		}
		port, err := freePort()
		if err != nil {
			return err
		}
		ports[name] = port
		cfg = re.ReplaceAllString(cfg, fmt.Sprintf("<%s>%d</%s>", name, port, name))
	}
	// Loopback IPv4 only, whatever the default (which also tries ::1).
	cfg = strings.Replace(cfg, "</tcp_port>", "</tcp_port>\n    <listen_host>127.0.0.1</listen_host>", 1)
	// Data, temporary files and logs into the test's directory.
	cfg = strings.ReplaceAll(cfg, "/var/lib/clickhouse/", filepath.Join(c.dir, "data")+"/")
	cfg = strings.ReplaceAll(cfg, "/var/log/clickhouse-server/", filepath.Join(c.dir, "log")+"/")
	if strings.Contains(cfg, "/var/lib/clickhouse") || strings.Contains(cfg, "/var/log/clickhouse-server") {
		return fmt.Errorf("%s names a server path this copy did not move", clickHouseConfig)
	}
	for _, d := range []string{"data", "log"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(c.dir, "config.xml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	// users_config is relative to the configuration: the copy keeps its
	// preprocessed users file out of /etc.
	if err := os.WriteFile(filepath.Join(c.dir, "users.xml"), users, 0o644); err != nil {
		return err
	}
	c.TCPAddr = fmt.Sprintf("127.0.0.1:%d", ports["tcp_port"])
	c.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", ports["http_port"])
	c.URL = "clickhouse://" + c.TCPAddr + "/lockd_audit"
	return nil
}

// start runs the server on c's configuration and waits until it answers.
func (c *ClickHouse) start() error {
	c.runs++
	logPath := filepath.Join(c.dir, fmt.Sprintf("stderr-%d.log", c.runs))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(c.bin, "--config-file="+filepath.Join(c.dir, "config.xml"))
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	if err := waitClickHouse(c.HTTPAddr, exited); err != nil {
		stop()
		return fmt.Errorf("%w (exit: %v); stderr:\n%s\nerror log:\n%s", err, waitErr,
			readTail(logPath), readTail(filepath.Join(c.dir, "log", "clickhouse-server.err.log")))
	}
	c.stop = stop
	return nil
}

// waitClickHouse polls the HTTP /ping endpoint until it answers "Ok.", the
// process exits, or clickHouseReadyTimeout passes.
func waitClickHouse(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(clickHouseReadyTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get("http://" + addr + "/ping")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "Ok." {
				return nil
			}
			err = fmt.Errorf("%s: %q", resp.Status, body)
		}
		select {
		case <-exited:
			return errors.New("clickhouse-server exited before it answered /ping")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clickhouse-server not answering /ping after %v: %w", clickHouseReadyTimeout, err)
		}
	}
}

// readTail returns the last 4 KiB of a log file, or why it cannot.
func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}
