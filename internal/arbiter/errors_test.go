package arbiter

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/internal/lockkey"
)

func TestCode(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{ErrHeld, codes.DeadlineExceeded},
		{fmt.Errorf("%w: key: %w", ErrInvalid, lockkey.ErrInvalidKey), codes.InvalidArgument},
		{ErrSealed, codes.FailedPrecondition},
		{ErrStaleToken, codes.FailedPrecondition},
		{fmt.Errorf("%w: detail", ErrSessionTTL), codes.FailedPrecondition},
		{ErrEpochMoved, codes.FailedPrecondition},
		{fmt.Errorf("%w 42", ErrLeak), codes.AlreadyExists},
		{ErrSessionNotFound, codes.NotFound},
		{ErrNotOperator, codes.PermissionDenied},
		{authz.ErrDenied, codes.PermissionDenied},
		{fmt.Errorf("%w: etcd", ErrUnavailable), codes.Unavailable},
		{ErrInternal, codes.Internal},
		{ErrEpochGrace, codes.Unavailable},
		{fmt.Errorf("%w: t/x", ErrNotHeld), codes.NotFound},
		{fmt.Errorf("%w: id", ErrForceNotFound), codes.NotFound},
		{fmt.Errorf("%w: id", ErrEpochRequestNotFound), codes.NotFound},
		{ErrSamePerson, codes.PermissionDenied},
		{ErrHoldChanged, codes.FailedPrecondition},
	}
	for _, tt := range tests {
		if got := Code(tt.err); got != tt.want {
			t.Errorf("Code(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
