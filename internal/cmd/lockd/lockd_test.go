package lockdcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/devpki"
)

// parse runs the command line with a fake run and returns the exit code,
// the options run received (nil if it was not called) and stderr.
func parse(t *testing.T, args []string, env map[string]string) (int, *Options, string) {
	t.Helper()
	var got *Options
	runF := func(_ context.Context, o *Options) error {
		c := *o
		got = &c
		return validate(o)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var stderr bytes.Buffer
	code := execute(t.Context(), args, &bytes.Buffer{}, &stderr, lookup, runF)
	return code, got, stderr.String()
}

func TestFlagsDefaults(t *testing.T) {
	code, o, stderr := parse(t, nil, nil)
	require.Equal(t, ExitOK, code, stderr)
	want := DefaultOptions()
	require.Equal(t, want.DataDir, o.DataDir)
	require.Equal(t, want.Listen, o.Listen)
	require.Equal(t, want.MetricsListen, o.MetricsListen)
	require.Equal(t, want.ClassesDir, o.ClassesDir)
	require.Equal(t, want.EtcdClientURL, o.EtcdClientURL)
	require.Equal(t, want.EtcdPeerURL, o.EtcdPeerURL)
	require.Equal(t, 5*time.Second, o.RequestTimeout)
	require.Equal(t, "info", o.LogLevel)
	require.Equal(t, "json", o.LogFormat)
	require.Empty(t, o.EtcdEndpoints)
	require.False(t, o.InsecureLoopback)
	require.True(t, o.DevPKI())
}

func TestFlagsFromEnv(t *testing.T) {
	env := map[string]string{
		"LOCKD_DATA_DIR":        "/var/lib/lockd",
		"LOCKD_LISTEN":          "127.0.0.1:9000",
		"LOCKD_OPERATORS":       "spiffe://a.test/ops,spiffe://a.test/oncall",
		"LOCKD_REQUEST_TIMEOUT": "2s",
		"LOCKD_LOG_FORMAT":      "text",
		"LOCKD_ETCD_ENDPOINTS":  "http://e1:2379,http://e2:2379",
	}
	code, o, stderr := parse(t, []string{"--listen", "127.0.0.1:9100"}, env)
	require.Equal(t, ExitOK, code, stderr)
	require.Equal(t, "/var/lib/lockd", o.DataDir)
	require.Equal(t, "127.0.0.1:9100", o.Listen, "a flag on the command line wins over the environment")
	require.Equal(t, []string{"spiffe://a.test/ops", "spiffe://a.test/oncall"}, o.Operators)
	require.Equal(t, 2*time.Second, o.RequestTimeout)
	require.Equal(t, "text", o.LogFormat)
	require.Equal(t, []string{"http://e1:2379", "http://e2:2379"}, o.EtcdEndpoints)

	require.Equal(t, "LOCKD_TLS_CLIENT_CA", EnvName("tls-client-ca"))
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		want       int
		wantStderr string
	}{
		{name: "unknown flag", args: []string{"--bogus"}, want: ExitUsage, wantStderr: "unknown flag"},
		{name: "positional argument", args: []string{"serve"}, want: ExitUsage, wantStderr: "unknown command"},
		{name: "bad env value", env: map[string]string{"LOCKD_REQUEST_TIMEOUT": "soon"}, want: ExitUsage, wantStderr: "LOCKD_REQUEST_TIMEOUT"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, want: ExitUsage, wantStderr: "--log-level"},
		{name: "bad listen", args: []string{"--listen", "7420"}, want: ExitUsage, wantStderr: "--listen"},
		{name: "bad operator", args: []string{"--operators", "ops"}, want: ExitUsage, wantStderr: "--operators"},
		{name: "partial tls", args: []string{"--tls-cert", "c.pem"}, want: ExitUsage, wantStderr: "--tls-client-ca"},
		{name: "etcd tls without endpoints", args: []string{"--etcd-ca", "ca.pem"}, want: ExitUsage, wantStderr: "--etcd-endpoints"},
		{name: "embedded url with endpoints", args: []string{"--etcd-endpoints", "http://e:2379", "--etcd-client-url", "http://127.0.0.1:1"},
			want: ExitUsage, wantStderr: "--etcd-client-url"},
		{name: "https etcd client url", args: []string{"--etcd-client-url", "https://127.0.0.1:7422"}, want: ExitUsage, wantStderr: "--etcd-client-url"},
		{name: "embedded etcd on every interface", args: []string{"--etcd-client-url", "http://0.0.0.0:7422"}, want: ExitUsage, wantStderr: "must be a loopback address"},
		{name: "embedded etcd peer off loopback", args: []string{"--etcd-peer-url", "http://10.0.0.5:7423"}, want: ExitUsage, wantStderr: "--etcd-peer-url"},
		{name: "bootstrap on the embedded store", args: []string{"--bootstrap-epoch-cluster-id", "8e9e05c52164694d"}, want: ExitUsage, wantStderr: "only applies to an external cluster"},
		{name: "bootstrap id not hex", args: []string{"--etcd-endpoints", "http://e:2379", "--bootstrap-epoch-cluster-id", "cluster-1"}, want: ExitUsage, wantStderr: "--bootstrap-epoch-cluster-id"},
		{name: "zero quota", args: []string{"--max-sessions-per-identity", "0"}, want: ExitUsage, wantStderr: "--max-sessions-per-identity"},
		{name: "insecure with tls", args: []string{"--insecure-loopback", "--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca"},
			want: ExitUsage, wantStderr: "--insecure-loopback"},
		{name: "insecure on loopback", args: []string{"--insecure-loopback", "--listen", "localhost:7420"}, want: ExitOK},
		{name: "oidc issuer without audience", args: []string{"--oidc-issuer", "https://kc/realms/ops"}, want: ExitUsage, wantStderr: "--oidc-audience"},
		{name: "oidc audience without issuer", args: []string{"--oidc-audience", "lockd"}, want: ExitUsage, wantStderr: "--oidc-issuer"},
		{name: "help", args: []string{"--help"}, want: ExitOK},
		{name: "dev-cert without out", args: []string{"dev-cert", "spiffe://a.test/x"}, want: ExitUsage, wantStderr: `"out"`},
		{name: "dev-cert without id", args: []string{"dev-cert", "--out", "x"}, want: ExitUsage, wantStderr: "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := parse(t, tt.args, tt.env)
			require.Equal(t, tt.want, code, stderr)
			require.Contains(t, stderr, tt.wantStderr)
		})
	}

	// What run can fail with, by kind: the exit code comes from the error's
	// type, never its text.
	_, dialErr := net.Dial("tcp", freePorts(t, 1)[0])
	require.Error(t, dialErr)
	_, bindErr := net.Listen("tcp", "203.0.113.1:7420") // not an address of this machine
	require.Error(t, bindErr)
	for _, tt := range []struct {
		name string
		err  error
		want int
	}{
		{"etcd refused", fmt.Errorf("start arbiter: %w", dialErr), ExitUnavailable},
		{"store unavailable", fmt.Errorf("start arbiter: %w", arbiter.ErrUnavailable), ExitUnavailable},
		{"start-up deadline", fmt.Errorf("start arbiter: %w", context.DeadlineExceeded), ExitUnavailable},
		{"OIDC issuer refused", fmt.Errorf("operator: OIDC discovery at http://kc: %w", &url.Error{Op: "Get", URL: "http://kc", Err: dialErr}), ExitUnavailable},
		{"cannot listen", fmt.Errorf("--listen: %w", bindErr), ExitError},
		{"invalid options", &cli.UsageError{Err: errors.New("--listen: bad")}, ExitUsage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := execute(t.Context(), nil, &stdout, &stderr, noEnv, func(context.Context, *Options) error { return tt.err })
			require.Equal(t, tt.want, code, stderr.String())
			require.True(t, strings.HasPrefix(stderr.String(), "lockd: "), "stderr %q", stderr.String())
			require.Empty(t, stdout.String(), "errors go to stderr only")
		})
	}

	t.Run("OIDC issuer unreachable at start-up", func(t *testing.T) {
		ports := freePorts(t, 5)
		dataDir := t.TempDir()
		args := []string{"--data-dir", dataDir, "--classes", "../../../classes", "--insecure-loopback",
			"--listen", ports[0], "--metrics-listen", ports[1],
			"--etcd-client-url", "http://" + ports[2], "--etcd-peer-url", "http://" + ports[3],
			"--oidc-issuer", "http://" + ports[4] + "/realms/ops", "--oidc-audience", "lockd", "--log-level", "error"}
		var stderr bytes.Buffer
		code := execute(t.Context(), args, &bytes.Buffer{}, &stderr, noEnv, run)
		require.Equal(t, ExitUnavailable, code, stderr.String())
		require.Contains(t, stderr.String(), "lockd: operator: OIDC discovery at http://"+ports[4])
	})

	t.Run("run error", func(t *testing.T) {
		var stderr bytes.Buffer
		code := execute(t.Context(), nil, &bytes.Buffer{}, &stderr, noEnv,
			func(context.Context, *Options) error { return errors.New("etcd exploded") })
		require.Equal(t, ExitError, code)
		require.Contains(t, stderr.String(), "etcd exploded")
	})
}

func TestHelpMentionsEnv(t *testing.T) {
	var stdout bytes.Buffer
	code := execute(t.Context(), []string{"--help"}, &stdout, &bytes.Buffer{}, noEnv, run)
	require.Equal(t, ExitOK, code)
	require.Contains(t, stdout.String(), "LOCKD_DATA_DIR")
	require.Contains(t, stdout.String(), "[$LOCKD_REQUEST_TIMEOUT]")
	require.Contains(t, stdout.String(), "dev-cert")
}

func TestDevCert(t *testing.T) {
	dataDir := t.TempDir()
	out := filepath.Join(t.TempDir(), "svid")

	t.Run("no CA", func(t *testing.T) {
		var stderr bytes.Buffer
		code := execute(t.Context(), []string{"dev-cert", "spiffe://lockd.local/w", "--out", out, "--data-dir", dataDir},
			&bytes.Buffer{}, &stderr, noEnv, run)
		require.Equal(t, ExitError, code)
		require.Contains(t, stderr.String(), "start lockd once")
	})

	_, err := devpki.Ensure(filepath.Join(dataDir, "pki"), []string{"localhost"}, DevSPIFFEID, time.Now())
	require.NoError(t, err)

	t.Run("invalid id", func(t *testing.T) {
		var stderr bytes.Buffer
		code := execute(t.Context(), []string{"dev-cert", "not-an-id", "--out", out, "--data-dir", dataDir},
			&bytes.Buffer{}, &stderr, noEnv, run)
		require.Equal(t, ExitUsage, code)
		require.Contains(t, stderr.String(), "<spiffe-id>")
	})

	t.Run("issued", func(t *testing.T) {
		var stdout bytes.Buffer
		env := map[string]string{"LOCKD_DATA_DIR": dataDir}
		code := execute(t.Context(), []string{"dev-cert", "spiffe://lockd.local/w", "--out", out},
			&stdout, &bytes.Buffer{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, run)
		require.Equal(t, ExitOK, code)
		for _, name := range []string{"svid.crt", "svid.key", "ca.crt"} {
			p := filepath.Join(out, name)
			require.FileExists(t, p)
			require.Contains(t, stdout.String(), p)
		}
		fi, err := os.Stat(filepath.Join(out, "svid.key"))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	})
}
