//go:build !tokenleak

package server

import "context"

// leakToken does nothing: a token never goes into telemetry. The tokenleak
// build (tokenleak_on.go) leaks one on purpose, for the token canary's
// control.
func leakToken(context.Context, uint64) {}
