//go:build !gate_broken_release

package arbiter

// releaseByKey is true only in the release gate's deliberately broken build
// (tag gate_broken_release), whose release deletes the session's hold of the
// key whatever its token. Never true in a real build.
const releaseByKey = false
