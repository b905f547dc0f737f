package cmdutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/pkg/client"
)

// ErrCancel reports that the user declined a confirmation.
var ErrCancel = errors.New("cancelled")

// Describe renders err for a human: a gRPC status becomes its message
// (not "rpc error: code = … desc = …") followed by what to do about it,
// chosen by the reason lockd gave (or, without one, the gRPC code).
// Messages from lockd never contain a token.
func Describe(err error, target string) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	msg := st.Message()
	hint := hintFor(client.Decode(err), target)
	if hint == "" {
		return msg
	}
	return msg + "\n" + hint
}

// hintFor says what to do about an RPC error that client.Decode has
// wrapped ("" when there is nothing to add).
func hintFor(err error, target string) string {
	unreachable := "lockd is unreachable or its store is down: check that lockd is running and ready (/readyz)"
	if target != "" {
		unreachable = fmt.Sprintf("lockd at %s is unreachable or its store is down: check that lockd is running and ready (/readyz)", target)
	}
	held := "not granted in time: raise --wait, or `lockctl inspect <key>` to see who holds it"
	switch {
	case errors.Is(err, client.ErrSealed):
		return "the store was restored: two operators must run `lockctl epoch status`, then `lockctl epoch advance request` and `approve`"
	case errors.Is(err, client.ErrEpochGrace):
		return "grants resume once every holder of the old epoch is fenced: retry shortly"
	case errors.Is(err, client.ErrUnavailable):
		return unreachable
	case errors.Is(err, client.ErrHeld):
		return held
	case errors.Is(err, client.ErrWaitTimeout) && errors.Is(err, client.ErrLeak):
		return "the other session of this identity kept renewing: another live process uses the same SPIFFE ID; give each process its own (docs/classes.md), or stop the other one"
	case errors.Is(err, client.ErrLeak):
		return "this identity already holds the key under another session (a leaked hold, not contention): `lockctl inspect <key>` shows the session"
	case errors.Is(err, client.ErrDenied):
		return "your identity has no grant for this key or class: check the LockGrant for its namespace"
	case errors.Is(err, client.ErrClassMismatch):
		return "a key's class is decided in the class repository: leave out --class, or lock a key of the class you meant (`lockctl inspect <key>` names a key's class)"
	case errors.Is(err, client.ErrWrongRegion):
		region, endpoint, _ := client.Region(err)
		where := "region " + region
		if endpoint != "" {
			where += " (its lockd: " + endpoint + ")"
		}
		return "lockd serves each namespace in its home region only, and never forwards: run this against " + where +
			" with --context; a context names its region with region: in the lockctl config"
	case errors.Is(err, client.ErrPlanState):
		return "`lockctl shards status` shows every plan and its state; a plan whose map changed meanwhile is proposed again (lockctl shards plan)"
	case errors.Is(err, client.ErrMoving):
		return "the key's range is moving to another shard: retry with --wait, which asks again until the move completes"
	case errors.Is(err, client.ErrOpenGrace):
		return "holders of grants made without quorum may still be acting on the key: retry with --wait, which waits it out"
	}
	switch {
	case errors.Is(err, client.ErrSamePerson):
		return "two people: a second operator must approve, with their own identity (lockctl --context <theirs> ...)"
	case errors.Is(err, client.ErrNotOperator):
		return "this needs an operator identity: use a context whose certificate is an operator's (--context)"
	}
	switch client.Reason(err) {
	case "":
		switch status.Code(err) {
		case codes.Unavailable:
			return unreachable
		case codes.PermissionDenied:
			return "lockd refused your identity: check the LockGrant for the key's namespace or, for an operator command, that your operator token has the role and a multi-factor sign-in (lockctl login)"
		case codes.Unauthenticated:
			return "lockd did not accept your credentials: check the context's cert and key (lockctl --context)"
		case codes.DeadlineExceeded:
			return held
		}
	}
	return ""
}

// ConfirmYes asks "Type "yes" to <action>:" on the error stream and reads
// one line from in. Anything but "yes" is an ExitFailure wrapping ErrCancel
// that says what did not happen (notDone).
func ConfirmYes(in io.Reader, w io.Writer, action, notDone string) error {
	fmt.Fprintf(w, "Type \"yes\" to %s: ", action)
	line, _ := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return &cli.ExitError{Code: cli.ExitFailure, Err: fmt.Errorf("%w: %s", ErrCancel, notDone)}
	}
	return nil
}
