package classlint

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	bad := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bad, "demo"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockClass\nmetadata: {name: x, namespace: demo}\nspec:\n  purpose: correctness\n  enforcement: fenced\n  ttl: 2s\n  tier: entity\n"
	if err := os.WriteFile(filepath.Join(bad, "demo", "x.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"repository classes", []string{"check", "../../../classes"}, ExitOK, "ok"},
		{"ttl below the floor", []string{"check", bad}, ExitViolations, "spec.ttl"},
		{"too many args", []string{"check", "a", "b"}, ExitUsage, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(tt.args, &out, &errOut); code != tt.code {
				t.Fatalf("exit %d, want %d; out %q err %q", code, tt.code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Fatalf("output %q does not name %q", out.String(), tt.want)
			}
		})
	}
}
