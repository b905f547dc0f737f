//go:build !gate_broken_batch

package arbiter

// batchDropsCompares is true only in the release gate's deliberately broken
// build (tag gate_broken_batch), which commits every part of a batch but
// the first without its own compares. Never true in a real build.
const batchDropsCompares = false
