package cmdutil

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/pkg/client"
)

// ExitCodeFor maps an error to lockctl's exit code (the table is
// internal/cli's). An answer from lockd is mapped by the reason it gave,
// never by its message; only an error without a reason (from the transport,
// or gRPC itself) is mapped by its gRPC code.
func ExitCodeFor(err error) int {
	if err == nil {
		return cli.ExitOK
	}
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var ue *cli.UsageError
	if errors.As(err, &ue) {
		return cli.ExitUsage
	}
	if errors.Is(err, client.ErrNoClass) || errors.Is(err, client.ErrClassMismatch) {
		return cli.ExitUsage // also the client's own finding, before any RPC
	}
	if _, ok := status.FromError(err); ok {
		return exitCodeForRPC(client.Decode(err))
	}
	return cli.ExitCode(err)
}

// exitCodeForRPC maps an RPC error that client.Decode has wrapped.
func exitCodeForRPC(err error) int {
	switch {
	case errors.Is(err, client.ErrSealed), errors.Is(err, client.ErrEpochGrace), errors.Is(err, client.ErrOpenGrace), errors.Is(err, client.ErrUnavailable):
		return cli.ExitUnavailable
	case errors.Is(err, client.ErrDenied), errors.Is(err, client.ErrNotOperator), errors.Is(err, client.ErrSamePerson):
		return cli.ExitNoPerm
	case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrWaitTimeout):
		// Not granted within --wait, also when a leaked hold of this
		// identity never lapsed (the error then says leak).
		return cli.ExitTimeout
	case errors.Is(err, client.ErrLeak):
		return cli.ExitLeak
	case errors.Is(err, client.ErrClassMismatch), errors.Is(err, client.ErrNoClass), errors.Is(err, client.ErrWrongRegion):
		// The key, --class or --context the user gave disagrees with the
		// class repository: an input to fix, not a failure to retry.
		return cli.ExitUsage
	}
	switch client.Reason(err) {
	case "":
		switch status.Code(err) {
		case codes.DeadlineExceeded:
			return cli.ExitTimeout
		case codes.Unavailable:
			return cli.ExitUnavailable
		case codes.PermissionDenied, codes.Unauthenticated:
			return cli.ExitNoPerm
		}
	}
	return cli.ExitFailure
}
