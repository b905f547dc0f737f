package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/pkg/lockkey"
)

func TestCode(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{arbiter.ErrHeld, codes.Aborted},
		{arbiter.ErrWaitTimeout, codes.Aborted},
		{arbiter.ErrSuperseded, codes.Aborted},
		{fmt.Errorf("%w: key: %w", arbiter.ErrInvalid, lockkey.ErrInvalidKey), codes.InvalidArgument},
		{arbiter.ErrSealed, codes.FailedPrecondition},
		{arbiter.ErrStaleToken, codes.FailedPrecondition},
		{fmt.Errorf("%w: detail", arbiter.ErrSessionTTL), codes.FailedPrecondition},
		{arbiter.ErrEpochMoved, codes.FailedPrecondition},
		{fmt.Errorf("%w 42", arbiter.ErrLeak), codes.AlreadyExists},
		{arbiter.ErrSessionNotFound, codes.NotFound},
		{arbiter.ErrNotOperator, codes.PermissionDenied},
		{authz.ErrDenied, codes.PermissionDenied},
		{fmt.Errorf("%w: etcd", arbiter.ErrUnavailable), codes.Unavailable},
		{arbiter.ErrInternal, codes.Internal},
		{arbiter.ErrEpochGrace, codes.FailedPrecondition},
		{fmt.Errorf("%w: t/x", arbiter.ErrNotHeld), codes.NotFound},
		{fmt.Errorf("%w: id", arbiter.ErrForceNotFound), codes.NotFound},
		{fmt.Errorf("%w: id", arbiter.ErrEpochRequestNotFound), codes.NotFound},
		{arbiter.ErrSamePerson, codes.PermissionDenied},
		{arbiter.ErrHoldChanged, codes.FailedPrecondition},
	}
	for _, tt := range tests {
		if got := Code(tt.err); got != tt.want {
			t.Errorf("Code(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

// A definite refusal must never look like an unknown outcome: callers
// (the client's settle logic, lockctl's exit codes) rely on
// DEADLINE_EXCEEDED and UNAVAILABLE meaning "a write may have happened".
func TestARefusalIsNeverAnUnknownOutcomeCode(t *testing.T) {
	for _, e := range errorTable {
		if e.reason == "" || e.reason == ReasonUnavailable {
			continue
		}
		if e.code == codes.DeadlineExceeded || e.code == codes.Unavailable {
			t.Errorf("reason %s goes out as %s, the code of an unknown outcome", e.reason, e.code)
		}
	}
}
