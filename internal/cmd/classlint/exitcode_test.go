package classlint

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestExitCodes runs class-lint in-process for each kind of outcome and
// checks the exit code, that errors go to stderr (prefixed "class-lint:")
// and that stdout carries results only.
func TestExitCodes(t *testing.T) {
	t.Setenv(tokenEnv, "t0ken")
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")   // class-lint controller is not in a pod
	down := "http://" + lockdtest.FreeAddr(t) // a closed loopback port
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "upstream exploded", http.StatusBadGateway)
	}))
	defer broken.Close()
	violations := filepath.Join("testdata", "rules", class.RuleTTLRange, "fail")
	comment := func(flags ...string) []string {
		return append([]string{"comment", "--repo", "a/b", "--pr", "1", "--dir", commentFixture, "--now", fixtureNow}, flags...)
	}
	gitRepo := classRepo(t)

	tests := []struct {
		name string
		args []string
		want int
		// stderr must contain these; stdout must be empty unless
		// wantStdout.
		stderr     []string
		wantStdout bool
	}{
		{name: "clean check", args: []string{"check", "--now", fixtureNow, filepath.Join("testdata", "rules", class.RuleTTLRange, "pass")}, want: ExitOK, wantStdout: true},
		{name: "violations", args: []string{"check", "--now", fixtureNow, violations}, want: ExitViolations, wantStdout: true},
		{name: "unknown command", args: []string{"frobnicate"}, want: ExitUsage, stderr: []string{"class-lint: unknown command", "Run 'class-lint --help' for usage."}},
		{name: "unknown flag", args: []string{"check", "--frobnicate"}, want: ExitUsage, stderr: []string{"class-lint: unknown flag", "Run 'class-lint check --help'"}},
		{name: "bad output", args: []string{"check", "-o", "yaml", violations}, want: ExitUsage, stderr: []string{"class-lint: -o must be text, json or markdown"}},
		{name: "unreadable directory", args: []string{"check", "does-not-exist"}, want: ExitUsage, stderr: []string{"class-lint: ", "does-not-exist"}},
		{name: "cost without --prometheus", args: []string{"cost", "--dir", gitRepo}, want: ExitUsage, stderr: []string{"--prometheus is required"}},
		{name: "cost: git error", args: []string{"cost", "--prometheus", down, "--dir", t.TempDir()}, want: ExitUsage, stderr: []string{"not in a git work tree"}},
		{name: "cost: Prometheus refused", args: []string{"cost", "--prometheus", down, "--dir", gitRepo}, want: ExitUnavailable,
			stderr: []string{"class-lint: cost: query Prometheus at " + down, "cannot reach Prometheus", "check --prometheus"}},
		{name: "cost: Prometheus 5xx", args: []string{"cost", "--prometheus", broken.URL, "--dir", gitRepo}, want: ExitUnavailable,
			stderr: []string{"query Prometheus at " + broken.URL, "cannot reach Prometheus"}},
		{name: "register: Prometheus refused", args: []string{"register", registerClasses, "--prometheus", down}, want: ExitUnavailable,
			stderr: []string{"query Prometheus at " + down, "cannot reach Prometheus"}},
		{name: "comment: no repo", args: []string{"comment", "--gitea-url", down, "--pr", "1"}, want: ExitUsage, stderr: []string{"pass --repo owner/name"}},
		{name: "comment: Gitea refused", args: comment("--gitea-url", down), want: ExitUnavailable,
			stderr: []string{"class-lint: forge: ", "cannot reach Gitea at " + down, "check --gitea-url"}},
		{name: "comment: Gitea 5xx", args: comment("--gitea-url", broken.URL), want: ExitUnavailable,
			stderr: []string{"cannot reach Gitea at " + broken.URL}},
		{name: "comment: Prometheus refused", args: comment("--gitea-url", down, "--prometheus", down, "--dir", gitRepo), want: ExitUnavailable,
			stderr: []string{"query Prometheus at " + down}},
		{name: "webhook without a certificate", args: []string{"webhook"}, want: ExitUsage, stderr: []string{"--tls-cert and --tls-key are required"}},
		{name: "controller outside a pod", args: []string{"controller"}, want: ExitUsage,
			stderr: []string{"class-lint: no --kubeconfig and not in a pod", "pass --kubeconfig FILE", "Run 'class-lint controller --help'"}},
		{name: "controller: no such kubeconfig", args: []string{"controller", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, want: ExitUsage,
			stderr: []string{"class-lint: --kubeconfig "}},
		{name: "controller: no resync", args: []string{"controller", "--resync", "0s"}, want: ExitUsage, stderr: []string{"--resync must be positive"}},
		{name: "controller: no lease name", args: []string{"controller", "--leader-election-id", ""}, want: ExitUsage, stderr: []string{"--leader-election-id must not be empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, &out, &errOut)
			require.Equal(t, tt.want, code, "stdout %q stderr %q", out.String(), errOut.String())
			for _, s := range tt.stderr {
				require.Contains(t, errOut.String(), s)
			}
			if tt.wantStdout {
				require.NotEmpty(t, out.String())
			} else {
				require.Empty(t, out.String(), "errors go to stderr only")
			}
		})
	}
}
