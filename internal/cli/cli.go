// Package cli is the command-line convention lockd, lockctl and class-lint
// share: one table of exit codes, the usage and exit errors that carry them
// out of a command, and the one way an error is printed (on stderr,
// prefixed with the binary's name). Its subpackages hold the standard
// streams and terminal detection (iostreams) and the -o table|json|yaml
// printer (printer).
//
// Stdout carries results only; every error and hint goes to stderr.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
)

// Exit codes, the same for every binary. They follow sysexits(3) where one
// fits, so scripts can tell "try again later" from "you may not" from "your
// command failed". docs/lockctl.md, docs/class-lint.md and docs/operating.md
// list them; keep the three tables in step with this one.
const (
	// ExitOK: success (for lockctl lock: the command exited 0).
	ExitOK = 0
	// ExitFailure: any other error.
	ExitFailure = 1
	// ExitFindings: class-lint found violations. It is 1, like a failure,
	// so that "did it pass" is still "did it exit 0".
	ExitFindings = 1
	// ExitUsage: bad flags, arguments, environment variables or inputs.
	ExitUsage = 2
	// ExitUnavailable (EX_UNAVAILABLE): a service the command needs could
	// not be reached or cannot serve now: lockd or its store, a sealed
	// arbiter (until operators advance the epoch), Prometheus, Gitea, an
	// OIDC issuer. Retrying later may work.
	ExitUnavailable = 69
	// ExitTimeout (EX_TEMPFAIL): the lock was not granted within --wait, or
	// a call ran out of time.
	ExitTimeout = 75
	// ExitNoPerm (EX_NOPERM): lockd refused the caller's identity.
	ExitNoPerm = 77
	// ExitLockLost: the lock was lost while the command ran; the command
	// was sent SIGTERM (then SIGKILL after --grace).
	ExitLockLost = 79
	// ExitLeak: the key is already held by the caller's own identity under
	// another session: a leaked hold, not contention, so waiting will not
	// help. It is outside sysexits' 64–78 (76 is EX_PROTOCOL).
	ExitLeak = 80
)

// UsageError is a mistake in the command line, the environment or the
// inputs the user named. It exits ExitUsage, and its message is followed by
// where to find the command's help.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a usage error.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Usage marks err as a usage error (nil stays nil).
func Usage(err error) error {
	var ue *UsageError
	if err == nil || errors.As(err, &ue) {
		return err
	}
	return &UsageError{Err: err}
}

// ExitError carries an exit code out of a command. A Silent one, or one
// without Err, has already said what happened and prints nothing.
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

// Unwrap returns the underlying error.
func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns err with exit code code (nil stays nil).
func Exit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: code, Err: err}
}

// ExitCode maps an error to its exit code: an ExitError's own code, a
// usage error's ExitUsage, ExitUnavailable when Unreachable, ExitTimeout
// for a context deadline, and ExitFailure for anything else. Commands with
// errors of their own (lockctl's gRPC statuses) map those first.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	if Unreachable(err) {
		return ExitUnavailable
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ExitTimeout
	}
	return ExitFailure
}

// Unreachable reports whether err says a server could not be reached: a
// failed dial (connection refused, no route), a failed DNS lookup, or an
// HTTP request that got no answer (*url.Error). It reads error types only,
// never their text. A listener that could not bind is not unreachable.
func Unreachable(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op == "dial"
	}
	var ue *url.Error
	return errors.As(err, &ue)
}

// PrintError writes err to w, which is stderr, the way every binary does:
// "<name>: <message>", then, for a usage error and when cmdPath is set,
// "Run '<cmdPath> --help' for usage.". A silent ExitError prints nothing.
func PrintError(w io.Writer, name, cmdPath string, err error) {
	if err == nil {
		return
	}
	var ee *ExitError
	if errors.As(err, &ee) && (ee.Silent || ee.Err == nil) {
		return
	}
	fmt.Fprintf(w, "%s: %s\n", name, err)
	var ue *UsageError
	if errors.As(err, &ue) && cmdPath != "" {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmdPath)
	}
}

// Fail prints err with PrintError and returns its exit code (ExitCode): the
// last step of every Main.
func Fail(w io.Writer, name, cmdPath string, err error) int {
	PrintError(w, name, cmdPath, err)
	return ExitCode(err)
}
