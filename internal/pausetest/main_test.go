package pausetest

import (
	"os"
	"testing"
)

// TestMain runs this test binary as holder A when the kit re-executes it.
func TestMain(m *testing.M) {
	if IsHolder() {
		os.Exit(HolderMain())
	}
	os.Exit(m.Run())
}
