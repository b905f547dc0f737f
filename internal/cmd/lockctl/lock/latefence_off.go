//go:build !gate_late_fence

package lock

// lateFence is true only in the release gate's deliberately broken worker
// (tag gate_late_fence), which supervises commands the way lockctl did
// before the fix, to show that the gate catches a command outliving its
// lock. Never true in a real build.
const lateFence = false
