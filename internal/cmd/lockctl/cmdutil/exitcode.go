package cmdutil

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/client"
)

// Exit codes. They follow sysexits(3) where one fits, so scripts can tell
// "try again later" from "you may not" from "your command failed".
const (
	// ExitOK: success (for lock: the command exited 0).
	ExitOK = 0
	// ExitFailure: any other error.
	ExitFailure = 1
	// ExitUsage: bad flags or arguments.
	ExitUsage = 2
	// ExitUnavailable (EX_UNAVAILABLE): lockd or its store is unreachable,
	// or the arbiter is sealed until an operator advances the epoch.
	ExitUnavailable = 69
	// ExitTimeout (EX_TEMPFAIL): the lock was not granted within --wait.
	ExitTimeout = 75
	// ExitNoPerm (EX_NOPERM): lockd refused the caller's identity.
	ExitNoPerm = 77
	// ExitLockLost: the lock was lost while the command ran; the command
	// was sent SIGTERM (then SIGKILL after --grace).
	ExitLockLost = 79
)

// ExitError carries an exit code out of a command. A Silent one has
// already said what happened.
type ExitError struct {
	Code   int
	Err    error
	Silent bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return "exit status " + strconv.Itoa(e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCodeFor maps an error to lockctl's exit code. gRPC statuses are
// mapped by code; anything unrecognised is ExitFailure.
func ExitCodeFor(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var fe *FlagError
	if errors.As(err, &fe) {
		return ExitUsage
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ExitTimeout
	}
	if errors.Is(client.Decode(err), client.ErrHeld) {
		return ExitTimeout // not granted within --wait (a definite refusal)
	}
	st, ok := status.FromError(err)
	if !ok {
		return ExitFailure
	}
	return exitCodeForStatus(st)
}

func exitCodeForStatus(st *status.Status) int {
	switch st.Code() {
	case codes.DeadlineExceeded:
		return ExitTimeout
	case codes.PermissionDenied, codes.Unauthenticated:
		return ExitNoPerm
	case codes.Unavailable:
		return ExitUnavailable
	case codes.FailedPrecondition:
		if strings.Contains(st.Message(), "sealed") {
			return ExitUnavailable
		}
	}
	return ExitFailure
}
