package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheClientStandsAlone: what a holder imports (the client, its config
// file, tokens, fences, key rules, tracing conventions) imports nothing of
// lockd's daemon (internal/) and no OpenTelemetry SDK or exporter: a
// holder's binary gets the OpenTelemetry API only, and chooses its own SDK.
// (pkg/lockdtest starts a real lockd, so it is the daemon, by design.)
func TestTheClientStandsAlone(t *testing.T) {
	public := []string{"../client", "../client/clientconfig", "../token", "../fence", "../lockkey", "../locktrace"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, public...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{"github.com/lockd-dev/lockd/internal/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters/"}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("a public package depends on %s", d)
			}
		}
	}
	t.Logf("%d packages in the public packages' graph", len(deps))
}
