package cmdutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FlagError is a usage error: bad flags or arguments. It exits 2.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// FlagErrorf returns a usage error.
func FlagErrorf(format string, args ...any) error {
	return &FlagError{Err: fmt.Errorf(format, args...)}
}

// ErrCancel reports that the user declined a confirmation.
var ErrCancel = errors.New("cancelled")

// Describe renders err for a human: a gRPC status becomes its message
// (not "rpc error: code = … desc = …") followed by what to do about it.
// Messages from lockd never contain a token.
func Describe(err error, target string) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg := st.Message()
	var hint string
	switch st.Code() {
	case codes.Unavailable:
		if target != "" {
			hint = fmt.Sprintf("lockd at %s is unreachable or its store is down: check that lockd is running and ready (/readyz)", target)
		} else {
			hint = "lockd is unreachable or its store is down: check that lockd is running and ready (/readyz)"
		}
	case codes.FailedPrecondition:
		if strings.Contains(msg, "sealed") {
			hint = "the store was restored: two operators must run `lockctl epoch status`, then `lockctl epoch advance request` and `approve`"
		}
	case codes.PermissionDenied:
		if strings.Contains(msg, "different operator") {
			hint = "two people: a second operator must approve (lockctl --context <theirs> force-release approve <id>)"
		} else if strings.Contains(msg, "operator") {
			hint = "this needs an operator identity: use a context whose certificate is an operator's (--context)"
		} else {
			hint = "your identity has no grant for this key or class: check the LockGrant for its namespace"
		}
	case codes.Unauthenticated:
		hint = "lockd did not accept your credentials: check the context's cert and key (lockctl --context)"
	case codes.DeadlineExceeded:
		hint = "not granted in time: raise --wait, or `lockctl inspect <key>` to see who holds it"
	}
	if hint == "" {
		return msg
	}
	return msg + "\n" + hint
}

// ConfirmYes asks "Type "yes" to <action>:" on the error stream and reads
// one line from in. Anything but "yes" is an ExitFailure wrapping ErrCancel
// that says what did not happen (notDone).
func ConfirmYes(in io.Reader, w io.Writer, action, notDone string) error {
	fmt.Fprintf(w, "Type \"yes\" to %s: ", action)
	line, _ := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("%w: %s", ErrCancel, notDone)}
	}
	return nil
}
