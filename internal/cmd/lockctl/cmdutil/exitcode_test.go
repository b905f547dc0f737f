package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/pkg/client"
)

// withReason is a status error as lockd sends it: code, message and the
// machine-readable reason (google.rpc.ErrorInfo, domain lockd.dev).
func withReason(t *testing.T, code codes.Code, reason, msg string) error {
	t.Helper()
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "lockd.dev"})
	require.NoError(t, err)
	return st.Err()
}

func TestExitCodeFor(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, cli.ExitOK},
		{"deadline exceeded", status.Error(codes.DeadlineExceeded, "arbiter: key held by another session; wait deadline passed"), cli.ExitTimeout},
		{"client-side deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), cli.ExitTimeout},
		{"permission denied", status.Error(codes.PermissionDenied, "authz: permission denied"), cli.ExitNoPerm},
		{"unauthenticated", status.Error(codes.Unauthenticated, "no client certificate"), cli.ExitNoPerm},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), cli.ExitUnavailable},
		{"sealed", withReason(t, codes.FailedPrecondition, "SEALED", "arbiter: sealed: epoch advance required"), cli.ExitUnavailable},
		{"other failed precondition", status.Error(codes.FailedPrecondition, "arbiter: stale token"), cli.ExitFailure},
		{"invalid argument", status.Error(codes.InvalidArgument, "arbiter: invalid argument: class"), cli.ExitFailure},
		{"already exists", status.Error(codes.AlreadyExists, "arbiter: leak"), cli.ExitFailure},
		{"not found", status.Error(codes.NotFound, "session not found"), cli.ExitFailure},
		{"internal", status.Error(codes.Internal, "boom"), cli.ExitFailure},
		{"wrapped status", fmt.Errorf("cannot lock: %w", status.Error(codes.PermissionDenied, "no")), cli.ExitNoPerm},
		{"usage", cli.Usagef("--class is required"), cli.ExitUsage},
		{"explicit exit", &cli.ExitError{Code: cli.ExitLockLost}, cli.ExitLockLost},
		{"child exit code", &cli.ExitError{Code: 3, Silent: true}, 3},
		{"plain error", errors.New("no lockctl config found"), cli.ExitFailure},

		// By reason, whatever the gRPC code: lockd is moving HELD to
		// ABORTED and SEALED/EPOCH_GRACE to FAILED_PRECONDITION.
		{"held today", withReason(t, codes.DeadlineExceeded, "HELD", "held"), cli.ExitTimeout},
		{"held as aborted", withReason(t, codes.Aborted, "HELD", "held"), cli.ExitTimeout},
		{"sealed as unavailable", withReason(t, codes.Unavailable, "SEALED", "sealed"), cli.ExitUnavailable},
		{"epoch grace today", withReason(t, codes.Unavailable, "EPOCH_GRACE", "grace"), cli.ExitUnavailable},
		{"epoch grace as failed precondition", withReason(t, codes.FailedPrecondition, "EPOCH_GRACE", "grace"), cli.ExitUnavailable},
		{"store unavailable", withReason(t, codes.Unavailable, "UNAVAILABLE", "store"), cli.ExitUnavailable},
		{"denied", withReason(t, codes.PermissionDenied, "DENIED", "denied"), cli.ExitNoPerm},
		{"not an operator", withReason(t, codes.PermissionDenied, "NOT_OPERATOR", "operator required"), cli.ExitNoPerm},
		{"same person", withReason(t, codes.PermissionDenied, "SAME_PERSON", "different operator"), cli.ExitNoPerm},
		{"leak", withReason(t, codes.AlreadyExists, "LEAK", "leak"), cli.ExitLeak},
		{"stale token", withReason(t, codes.FailedPrecondition, "STALE_TOKEN", "stale"), cli.ExitFailure},
		{"quota", withReason(t, codes.ResourceExhausted, "QUOTA", "quota"), cli.ExitFailure},
		{"a reason beats the code", withReason(t, codes.Unavailable, "INTERNAL", "internal"), cli.ExitFailure},
		{"decoded", client.Decode(withReason(t, codes.Aborted, "HELD", "held")), cli.ExitTimeout},
		{"wrapped reason", fmt.Errorf("cannot lock: %w", withReason(t, codes.AlreadyExists, "LEAK", "leak")), cli.ExitLeak},
		{"message text is not a reason", status.Error(codes.FailedPrecondition, "arbiter: sealed: epoch advance required"), cli.ExitFailure},
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
	require.Contains(t, Describe(withReason(t, codes.FailedPrecondition, "SEALED", "arbiter: sealed: epoch advance required"), ""), "lockctl epoch advance")
	require.Equal(t, "plain", Describe(errors.New("plain"), ""))

	require.Contains(t, Describe(withReason(t, codes.Aborted, "HELD", "held"), ""), "raise --wait")
	require.Contains(t, Describe(withReason(t, codes.PermissionDenied, "SAME_PERSON", "arbiter: the approver must be a different operator than the requester"), ""), "a second operator must approve")
	require.Contains(t, Describe(withReason(t, codes.PermissionDenied, "NOT_OPERATOR", "arbiter: operator identity required"), ""), "operator identity")
	require.Contains(t, Describe(withReason(t, codes.AlreadyExists, "LEAK", "leak"), ""), "leaked hold")
	require.Equal(t, "arbiter: sealed", Describe(status.Error(codes.FailedPrecondition, "arbiter: sealed"), ""), "no hint from message text")
}
