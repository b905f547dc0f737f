package arbiter

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/authz"
)

// Sentinel errors. The gRPC boundary maps each to one status code and one
// reason (errorTable); messages never carry a token.
var (
	// ErrSealed: grants are refused until operators advance the epoch: the
	// store's cluster ID differs from the epoch record's (a restore), the
	// store has no epoch record, or it is behind what this arbiter served.
	// The wrapped message says which and what to do.
	ErrSealed = errors.New("arbiter: sealed: epoch advance required")
	// ErrUnavailable: etcd did not answer within the request deadline. No
	// grant is ever made from memory.
	ErrUnavailable = errors.New("arbiter: store unavailable")
	// ErrHeld: the key is held by another session and the wait deadline
	// passed (or no wait was asked for).
	ErrHeld = errors.New("arbiter: key held by another session; wait deadline passed")
	// ErrEpochGrace: the epoch advanced less than the grace period ago;
	// grants wait until every holder of the old epoch has been fenced.
	ErrEpochGrace = errors.New("arbiter: the epoch has just advanced; grants resume once every old holder is fenced (see the grace period in docs/operating.md)")
	// ErrLeak: the key is held by the caller's own identity under another
	// session. That is a leaked hold, not contention.
	ErrLeak = errors.New("arbiter: leak: key already held by this identity under another session")
	// ErrStaleToken: a release presented a token that is not the current
	// hold's (released, expired or re-granted since).
	ErrStaleToken = errors.New("arbiter: stale token: the key is not held with this token by this session")
	// ErrSessionNotFound: the session does not exist, has expired, or belongs
	// to another identity.
	ErrSessionNotFound = errors.New("arbiter: session not found or expired; open a new session")
	// ErrSessionTTL: the session's TTL is not the class TTL.
	ErrSessionTTL = errors.New("arbiter: session TTL does not match the class TTL")
	// ErrSuperseded: a newer Acquire of the same key by the same session
	// took this waiter's place in line.
	ErrSuperseded = errors.New("arbiter: superseded by a newer Acquire of the same key by the same session")
	// ErrQuota: the identity has as many sessions, or waiters, on this
	// arbiter as its quota allows.
	ErrQuota = errors.New("arbiter: quota exceeded")
	// ErrInvalid: a request field breaks a rule; the message names it.
	ErrInvalid = errors.New("arbiter: invalid argument")
	// ErrNotOperator: the call needs an operator identity.
	ErrNotOperator = errors.New("arbiter: operator identity required")
	// ErrEpochMoved: the epoch is not the one the operator expected.
	ErrEpochMoved = errors.New("arbiter: epoch is not the expected one")
	// ErrEpochExhausted: the epoch cannot advance past token.MaxEpoch.
	ErrEpochExhausted = errors.New("arbiter: epoch exhausted")
	// ErrNotHeld: a force-release was asked for a key nobody holds.
	ErrNotHeld = errors.New("arbiter: key is not held")
	// ErrForceNotFound: no pending force-release request has this id (it
	// was approved, denied or expired).
	ErrForceNotFound = errors.New("arbiter: no pending force-release request with this id (approved, denied or expired)")
	// ErrEpochRequestNotFound: no pending epoch-advance request has this id
	// (approved or expired).
	ErrEpochRequestNotFound = errors.New("arbiter: no pending epoch-advance request with this id (approved or expired)")
	// ErrSamePerson: the approver of a force-release is its requester.
	ErrSamePerson = errors.New("arbiter: the approver must be a different operator than the requester")
	// ErrHoldChanged: the hold was released, expired or re-granted since the
	// force-release was requested; nothing was released. Request again.
	ErrHoldChanged = errors.New("arbiter: the hold changed since the request; nothing was released; request again if it is still needed")
	// ErrRateLimited: the identity called ValidateToken faster than its
	// limit; back off and retry. Grants have their own budget.
	ErrRateLimited = errors.New("arbiter: ValidateToken rate limit for this identity exceeded; back off and retry")
	// ErrInternal: the store returned something lockd cannot interpret.
	ErrInternal = errors.New("arbiter: internal error")
)

// Reasons are the machine-readable reasons lockd puts on the wire
// (google.rpc.ErrorInfo.Reason, domain ReasonDomain). They are the names of
// lock.v1's ErrorReason values without the "ERROR_REASON_" prefix.
const (
	ReasonDomain = "lockd.dev"

	ReasonHeld            = "HELD"
	ReasonLeak            = "LEAK"
	ReasonSealed          = "SEALED"
	ReasonEpochGrace      = "EPOCH_GRACE"
	ReasonSessionTTL      = "SESSION_TTL"
	ReasonSessionNotFound = "SESSION_NOT_FOUND"
	ReasonStaleToken      = "STALE_TOKEN"
	ReasonDenied          = "DENIED"
	ReasonInvalid         = "INVALID"
	ReasonUnavailable     = "UNAVAILABLE"
	ReasonQuota           = "QUOTA"
	ReasonRateLimited     = "RATE_LIMITED"
	ReasonSuperseded      = "SUPERSEDED"
	ReasonNotOperator     = "NOT_OPERATOR"
	ReasonSamePerson      = "SAME_PERSON"
	ReasonHoldChanged     = "HOLD_CHANGED"
	ReasonEpochMoved      = "EPOCH_MOVED"
	ReasonEpochExhausted  = "EPOCH_EXHAUSTED"
	ReasonNotHeld         = "NOT_HELD"
	ReasonRequestNotFound = "REQUEST_NOT_FOUND"
	ReasonInternal        = "INTERNAL"
)

// errorTable is the one mapping of arbiter errors to gRPC codes and wire
// reasons; Code and Reason read it, in order.
var errorTable = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{context.Canceled, codes.Canceled, ""}, // the caller's own context: no reason
	{context.DeadlineExceeded, codes.DeadlineExceeded, ""},
	{ErrHeld, codes.DeadlineExceeded, ReasonHeld},
	{ErrInvalid, codes.InvalidArgument, ReasonInvalid},
	{ErrSealed, codes.FailedPrecondition, ReasonSealed},
	{ErrStaleToken, codes.FailedPrecondition, ReasonStaleToken},
	{ErrSessionTTL, codes.FailedPrecondition, ReasonSessionTTL},
	{ErrHoldChanged, codes.FailedPrecondition, ReasonHoldChanged},
	{ErrEpochMoved, codes.FailedPrecondition, ReasonEpochMoved},
	{ErrEpochExhausted, codes.FailedPrecondition, ReasonEpochExhausted},
	{ErrLeak, codes.AlreadyExists, ReasonLeak},
	{ErrSessionNotFound, codes.NotFound, ReasonSessionNotFound},
	{ErrNotHeld, codes.NotFound, ReasonNotHeld},
	{ErrForceNotFound, codes.NotFound, ReasonRequestNotFound},
	{ErrEpochRequestNotFound, codes.NotFound, ReasonRequestNotFound},
	{ErrNotOperator, codes.PermissionDenied, ReasonNotOperator},
	{ErrSamePerson, codes.PermissionDenied, ReasonSamePerson},
	{authz.ErrDenied, codes.PermissionDenied, ReasonDenied},
	{ErrUnavailable, codes.Unavailable, ReasonUnavailable},
	{ErrEpochGrace, codes.Unavailable, ReasonEpochGrace},
	{ErrSuperseded, codes.Aborted, ReasonSuperseded},
	{ErrQuota, codes.ResourceExhausted, ReasonQuota},
	{ErrRateLimited, codes.ResourceExhausted, ReasonRateLimited},
	{ErrInternal, codes.Internal, ReasonInternal},
}

// Code is the gRPC code for an arbiter error; the server boundary uses the
// same mapping.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Internal
}

// Reason is the wire reason for an arbiter error ("" for context errors and
// errors that are not the arbiter's).
func Reason(err error) string {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.reason
		}
	}
	return ""
}

// Reasons lists every reason the arbiter can put on the wire, once each.
func Reasons() []string {
	var out []string
	for _, e := range errorTable {
		if e.reason != "" && !slices.Contains(out, e.reason) {
			out = append(out, e.reason)
		}
	}
	return out
}
