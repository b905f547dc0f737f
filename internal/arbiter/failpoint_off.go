//go:build !gate_failpoints

package arbiter

import "context"

// stallMapWatch is the release gate's failpoint for a stalled shard map
// watch (failpoint_on.go); a no-op in every other build.
func stallMapWatch(context.Context) {}
