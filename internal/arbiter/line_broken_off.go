//go:build !gate_broken_line

package arbiter

// brokenLineOrder is false: a release hands a durable key to the head of
// its line. See line_broken_on.go.
const brokenLineOrder = false
