// Package golden compares test output with golden files. `go test … -update`
// rewrites them; the flag is registered here, once per test binary.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// Assert compares got with testdata/<name>.golden.
func Assert(t testing.TB, name string, got []byte) {
	t.Helper()
	AssertFile(t, filepath.Join("testdata", name+".golden"), got)
}

// AssertFile compares got with the file at path (rewriting it with -update).
func AssertFile(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("missing golden file %s: run go test -update (%v)", path, err)
	}
	if string(want) != string(got) {
		t.Errorf("output differs from %s (run go test -update if the change is intended):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
