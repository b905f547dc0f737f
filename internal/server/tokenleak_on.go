//go:build tokenleak

package server

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// leakToken puts a granted token into the call's span: a deliberate leak,
// built only with -tags tokenleak, so that CI can show the token canary
// (internal/tracing TestNoTokenInTelemetry) fails on a build that leaks.
// Never ship this build.
func leakToken(ctx context.Context, tok uint64) {
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("lock.debug", "token "+strconv.FormatUint(tok, 16)))
}
