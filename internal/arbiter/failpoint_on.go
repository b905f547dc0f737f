//go:build gate_failpoints

package arbiter

import (
	"context"
	"os"
	"time"
)

// StallMapWatchEnv names a file: while it exists, this build's shard map
// watch delivers nothing (events wait, as behind a stalled watch stream).
// Only the release gate builds lockd with this failpoint (tag
// gate_failpoints); reading the map after a refusal still works, as it
// would with a real stall.
const StallMapWatchEnv = "LOCKD_GATE_STALL_MAP_WATCH"

// stallMapWatch blocks while the failpoint's file exists.
func stallMapWatch(ctx context.Context) {
	path := os.Getenv(StallMapWatchEnv)
	if path == "" {
		return
	}
	for ctx.Err() == nil {
		if _, err := os.Stat(path); err != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
