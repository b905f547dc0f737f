package testserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lockd-dev/lockd/internal/toolcache"
)

// minioReadyTimeout bounds the wait for a started MinIO to report live.
const minioReadyTimeout = 60 * time.Second

// MinIO is a running throwaway MinIO server.
type MinIO struct {
	Endpoint  string        // host:port, plain HTTP
	AccessKey string        // MINIO_ROOT_USER
	SecretKey string        // MINIO_ROOT_PASSWORD
	Bucket    string        // an empty bucket made at start
	Client    *minio.Client // signed in as the root user
}

// URL returns the fence.Open URL of the bucket; credentials are not in it
// (see SetEnv).
func (m *MinIO) URL() string {
	return "s3://" + m.Bucket + "?endpoint=" + url.QueryEscape(m.Endpoint) + "&secure=false"
}

// SetEnv sets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to the server's
// credentials for the rest of the test (t.Setenv: not with t.Parallel).
func (m *MinIO) SetEnv(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
}

// MinIOBinary returns the minio binary the tests run: $LOCKD_MINIO if set
// (it must exist), else $LOCKD_TOOLS/bin/minio (LOCKD_TOOLS defaults to
// $HOME/.cache/lockd-tools), else minio on PATH. The error says how to
// install it.
func MinIOBinary() (string, error) {
	p, err := toolcache.Find("minio", "LOCKD_MINIO")
	if err != nil {
		return "", fmt.Errorf("fencetest: %w: install it with `bash ci/tools.sh minio` (go install github.com/minio/minio@latest into $LOCKD_TOOLS/bin; about 6.5 minutes, once)", err)
	}
	return p, nil
}

// StartMinIO starts a MinIO server with fresh random root credentials on a
// free port of 127.0.0.1, data in t.TempDir, the console off, waits until
// /minio/health/live answers 200, and makes an empty bucket "fencetest".
// The server is stopped when the test ends. It fails the test if the binary
// is missing (see MinIOBinary).
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin, err := MinIOBinary()
	if err != nil {
		t.Fatal(err)
	}
	m := &MinIO{AccessKey: "fencetest", SecretKey: randomHex(16), Bucket: "fencetest"}
	dir := t.TempDir()
	var stop func()
	for attempt := range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("fencetest: minio: %v", err)
		}
		m.Endpoint = fmt.Sprintf("127.0.0.1:%d", port)
		logPath := filepath.Join(dir, fmt.Sprintf("minio-%d.log", attempt))
		if stop, err = startMinIO(bin, m, filepath.Join(dir, "data"), logPath); err == nil {
			break
		}
		logText, _ := os.ReadFile(logPath)
		if attempt == 2 || !strings.Contains(string(logText), "already in use") {
			t.Fatalf("fencetest: minio: %v; log:\n%s", err, logText)
		}
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Client.MakeBucket(ctx, m.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("fencetest: minio: make bucket %s: %v", m.Bucket, err)
	}
	return m
}

// startMinIO starts bin serving dataDir at m.Endpoint with m's credentials,
// waits until it is live and sets m.Client. stop terminates it.
func startMinIO(bin string, m *MinIO, dataDir, logPath string) (stop func(), err error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "server", "--address", m.Endpoint, dataDir)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{}) // closed when the process has exited
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	if err := waitLive(m.Endpoint, exited); err != nil {
		stop()
		return nil, fmt.Errorf("%w (exit: %v)", err, waitErr)
	}
	m.Client, err = minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// waitLive polls MinIO's liveness endpoint until it answers 200, the
// process exits, or minioReadyTimeout passes.
func waitLive(endpoint string, exited <-chan struct{}) error {
	deadline := time.Now().Add(minioReadyTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get("http://" + endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-exited:
			return errors.New("minio exited before it was live")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("minio not live after %v: %w", minioReadyTimeout, err)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
