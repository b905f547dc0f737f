//go:build !gate_broken_open

package arbiter

// brokenOpenAll is false: only classes that declare onQuorumLoss: open are
// granted without quorum. See open_broken_on.go.
const brokenOpenAll = false
