// Package golden compares test output with files under testdata/.
// Run `go test ./pkg/cmd/lockctl/... -update` to rewrite them.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// Assert compares got with testdata/<name>.golden.
func Assert(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file: run go test -update")
	require.Equal(t, string(want), string(got), "output differs from %s (run go test -update if the change is intended)", path)
}
