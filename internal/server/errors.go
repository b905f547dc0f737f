package server

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/authz"
)

// ReasonDomain is the google.rpc.ErrorInfo domain of lockd's reasons.
const ReasonDomain = "lockd.dev"

// Wire reasons: the names of lock.v1's ErrorReason values without the
// "ERROR_REASON_" prefix. pkg/client decodes them into its sentinels.
const (
	ReasonHeld            = "HELD"
	ReasonWaitTimeout     = "WAIT_TIMEOUT"
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
	ReasonHistoryOff      = "HISTORY_OFF"
	ReasonNoQuorumSession = "NO_QUORUM_SESSION"
	ReasonClassMismatch   = "CLASS_MISMATCH"
	ReasonNoClass         = "NO_CLASS"
	ReasonOpenGrace       = "OPEN_GRACE"
	ReasonWrongRegion     = "WRONG_REGION"
	ReasonMoving          = "MOVING"
	ReasonPlanState       = "PLAN_STATE"
)

// errorTable is the one mapping of lockd's errors to gRPC codes and wire
// reasons, read in order. The codes keep one promise: a definite refusal
// (nothing changed) is never DEADLINE_EXCEEDED or UNAVAILABLE. Those two
// mean the outcome is unknown: the caller's own deadline ran out, or the
// store did not answer and a write may have committed.
var errorTable = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{context.Canceled, codes.Canceled, ""}, // the caller's own context: no reason
	{context.DeadlineExceeded, codes.DeadlineExceeded, ""},
	{arbiter.ErrHeld, codes.Aborted, ReasonHeld},
	{arbiter.ErrWaitTimeout, codes.Aborted, ReasonWaitTimeout},
	{arbiter.ErrSuperseded, codes.Aborted, ReasonSuperseded},
	{arbiter.ErrInvalid, codes.InvalidArgument, ReasonInvalid},
	{arbiter.ErrSealed, codes.FailedPrecondition, ReasonSealed},
	{arbiter.ErrEpochGrace, codes.FailedPrecondition, ReasonEpochGrace},
	{arbiter.ErrStaleToken, codes.FailedPrecondition, ReasonStaleToken},
	{arbiter.ErrSessionTTL, codes.FailedPrecondition, ReasonSessionTTL},
	{arbiter.ErrHoldChanged, codes.FailedPrecondition, ReasonHoldChanged},
	{arbiter.ErrEpochMoved, codes.FailedPrecondition, ReasonEpochMoved},
	{arbiter.ErrEpochExhausted, codes.FailedPrecondition, ReasonEpochExhausted},
	{arbiter.ErrLeak, codes.AlreadyExists, ReasonLeak},
	{arbiter.ErrSessionNotFound, codes.NotFound, ReasonSessionNotFound},
	{arbiter.ErrNotHeld, codes.NotFound, ReasonNotHeld},
	{arbiter.ErrForceNotFound, codes.NotFound, ReasonRequestNotFound},
	{arbiter.ErrEpochRequestNotFound, codes.NotFound, ReasonRequestNotFound},
	{arbiter.ErrNotOperator, codes.PermissionDenied, ReasonNotOperator},
	{arbiter.ErrSamePerson, codes.PermissionDenied, ReasonSamePerson},
	{authz.ErrDenied, codes.PermissionDenied, ReasonDenied},
	{arbiter.ErrUnavailable, codes.Unavailable, ReasonUnavailable},
	{arbiter.ErrQuota, codes.ResourceExhausted, ReasonQuota},
	{arbiter.ErrRateLimited, codes.ResourceExhausted, ReasonRateLimited},
	{arbiter.ErrInternal, codes.Internal, ReasonInternal},
	{ErrHistoryOff, codes.FailedPrecondition, ReasonHistoryOff},
	{arbiter.ErrNoQuorumSession, codes.FailedPrecondition, ReasonNoQuorumSession},
	{arbiter.ErrClassMismatch, codes.FailedPrecondition, ReasonClassMismatch},
	{arbiter.ErrNoClass, codes.FailedPrecondition, ReasonNoClass},
	{arbiter.ErrOpenGrace, codes.FailedPrecondition, ReasonOpenGrace},
	{arbiter.ErrWrongRegion, codes.FailedPrecondition, ReasonWrongRegion},
	{arbiter.ErrMoving, codes.Aborted, ReasonMoving},
	{arbiter.ErrPlanState, codes.FailedPrecondition, ReasonPlanState},
	{arbiter.ErrPlanNotFound, codes.NotFound, ReasonRequestNotFound},
}

// Code is the gRPC code lockd answers err with. The arbiter's metrics label
// outcomes with it (arbiter.NewMetrics), so a metric and the wire agree.
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

// Reason is the wire reason for err ("" for context errors and errors that
// are not lockd's).
func Reason(err error) string {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.reason
		}
	}
	return ""
}

// Reasons lists every reason lockd can put on the wire, once each.
func Reasons() []string {
	var out []string
	for _, e := range errorTable {
		if e.reason != "" && !slices.Contains(out, e.reason) {
			out = append(out, e.reason)
		}
	}
	return out
}

// toStatus maps an error to a gRPC status with its reason as a
// google.rpc.ErrorInfo detail (domain lockd.dev), so callers never need to
// read the message. Messages never contain a token.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (from gRPC itself)
	}
	var md map[string]string
	var withMD reasonMetadata
	if errors.As(err, &withMD) {
		md = withMD.ReasonMetadata()
	}
	return statusWithReason(Code(err), Reason(err), err.Error(), md)
}

// reasonMetadata is an error that says more than its reason, for clients
// to act on (arbiter.WrongRegionError: the region and its endpoint).
type reasonMetadata interface {
	error
	ReasonMetadata() map[string]string
}

// statusWithReason is a status error with an ErrorInfo detail (and its
// metadata) when reason is set.
func statusWithReason(code codes.Code, reason, msg string, md map[string]string) error {
	st := status.New(code, msg)
	if reason == "" {
		return st.Err()
	}
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ReasonDomain, Metadata: md}); err == nil {
		st = withInfo
	}
	return st.Err()
}
