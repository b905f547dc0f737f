package fencetest_test

import (
	"os"
	"testing"

	"github.com/lockd-dev/lockd/internal/pausetest"
)

// TestMain runs this test binary as the paused holder when fence-test
// re-executes it, as lockctl's Main does.
func TestMain(m *testing.M) {
	if pausetest.IsHolder() {
		os.Exit(pausetest.HolderMain())
	}
	os.Exit(m.Run())
}
