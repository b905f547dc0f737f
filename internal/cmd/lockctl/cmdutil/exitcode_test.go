package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestExitCodeFor(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"deadline exceeded", status.Error(codes.DeadlineExceeded, "arbiter: key held by another session; wait deadline passed"), ExitTimeout},
		{"client-side deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), ExitTimeout},
		{"permission denied", status.Error(codes.PermissionDenied, "authz: permission denied"), ExitNoPerm},
		{"unauthenticated", status.Error(codes.Unauthenticated, "no client certificate"), ExitNoPerm},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), ExitUnavailable},
		{"sealed", status.Error(codes.FailedPrecondition, "arbiter: sealed: epoch advance required"), ExitUnavailable},
		{"other failed precondition", status.Error(codes.FailedPrecondition, "arbiter: stale token"), ExitFailure},
		{"invalid argument", status.Error(codes.InvalidArgument, "arbiter: invalid argument: class"), ExitFailure},
		{"already exists", status.Error(codes.AlreadyExists, "arbiter: leak"), ExitFailure},
		{"not found", status.Error(codes.NotFound, "session not found"), ExitFailure},
		{"internal", status.Error(codes.Internal, "boom"), ExitFailure},
		{"wrapped status", fmt.Errorf("cannot lock: %w", status.Error(codes.PermissionDenied, "no")), ExitNoPerm},
		{"usage", FlagErrorf("--class is required"), ExitUsage},
		{"explicit exit", &ExitError{Code: ExitLockLost}, ExitLockLost},
		{"child exit code", &ExitError{Code: 3, Silent: true}, 3},
		{"plain error", errors.New("no lockctl config found"), ExitFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ExitCodeFor(tt.err))
		})
	}
}

func TestDescribe(t *testing.T) {
	got := Describe(status.Error(codes.Unavailable, "connection refused"), "127.0.0.1:7420")
	require.Contains(t, got, "connection refused")
	require.Contains(t, got, "127.0.0.1:7420")
	require.NotContains(t, got, "rpc error")
	require.Contains(t, Describe(status.Error(codes.FailedPrecondition, "arbiter: sealed: epoch advance required"), ""), "lockctl epoch advance")
	require.Equal(t, "plain", Describe(errors.New("plain"), ""))
}
