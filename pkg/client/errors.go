package client

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// Why a lock was lost, and client-side errors.
var (
	// ErrExpired: lockd answered a keepalive with an expired session; every
	// hold of the session is gone.
	ErrExpired = errors.New("client: lock lost: session expired")
	// ErrDeadline: no keepalive succeeded in time (lockd or etcd
	// unreachable); the local deadline passed and the holder must stop.
	ErrDeadline = errors.New("client: lock lost: local deadline passed without a successful keepalive")
	// ErrEpoch: the store was restored and an operator advanced the epoch;
	// every hold of the earlier epoch is gone. Acquire again.
	ErrEpoch = errors.New("client: lock lost: the store was restored and the epoch advanced")
	// ErrForced: operators released the hold by force (lockctl
	// force-release). Another holder may already have the key: stop at once.
	ErrForced = errors.New("client: lock lost: released by force by operators")
	// ErrUnprotectedEnded: the lock was an unprotected grant (Lock.Unprotected:
	// made while lockd had no etcd quorum) and it ended: quorum returned,
	// or its session lapsed. Acquire again for a protected lock.
	ErrUnprotectedEnded = errors.New("client: lock lost: an unprotected grant (made without quorum) ended")
	// ErrSessionEnded: the client ended the session because it could not
	// learn whether one of its holds still existed (a release or an acquire
	// whose outcome stayed unknown), rather than keep renewing a hold nobody
	// knows about. Every hold of the session is lost.
	ErrSessionEnded = errors.New("client: lock lost: session ended because a hold's state could not be confirmed")
	// ErrLeaseGivenUp: like ErrSessionEnded, for a key whose holds are on
	// the session's lease on another etcd cluster than the coord cluster
	// (an entity shard): the client gave up the session's leases on those
	// clusters, so a hold left there lapses with them. Holds on those
	// clusters are lost; the session and its holds on the coord cluster go
	// on.
	ErrLeaseGivenUp = errors.New("client: lock lost: the session's lease on the key's cluster was given up because a hold's state there could not be confirmed")
	// ErrReleased: the lock was released by its holder.
	ErrReleased = errors.New("client: lock released")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrConfig: the client's options cannot dial lockd (no target, no
	// credentials).
	ErrConfig = errors.New("client: config")
	// ErrNoFence: Acquire needs an onFence callback.
	ErrNoFence = errors.New("client: onFence is required: it is how the holder learns to stop")
)

// ForcedError is why a lock released by force was lost: the two operators
// and their reason. errors.Is(err, ErrForced) matches it.
type ForcedError struct {
	// Requester asked for the force-release and Approver approved it
	// (operator identities); Reason is what they gave.
	Requester, Approver, Reason string
}

func (e *ForcedError) Error() string {
	if e.Requester == "" && e.Approver == "" {
		return ErrForced.Error()
	}
	return fmt.Sprintf("%s (requested by %s, approved by %s: %q)", ErrForced, e.Requester, e.Approver, e.Reason)
}

// Is reports whether target is ErrForced.
func (e *ForcedError) Is(target error) bool { return target == ErrForced }

// Refusals lockd reports with a reason. An error returned by the client
// matches one of these with errors.Is when lockd gave that reason; it still
// carries the gRPC status (status.Code works on it).
var (
	// ErrHeld: the key is held by another session: nothing was granted.
	// It matches both a no-wait refusal and ErrWaitTimeout.
	ErrHeld = errors.New("client: key held by another session")
	// ErrWaitTimeout: the key stayed held for the whole wait asked for; the
	// waiter left lockd's queue and nothing was granted. errors.Is also
	// matches ErrHeld. (The caller's own context running out is
	// context.DeadlineExceeded instead: then the outcome is unknown.)
	ErrWaitTimeout = errors.New("client: key held by another session for the whole wait")
	// ErrLeak: the key is held by this identity under another session.
	ErrLeak = errors.New("client: leak: key held by this identity under another session")
	// ErrSealed: lockd refuses grants until operators advance the epoch.
	ErrSealed = errors.New("client: lockd is sealed until operators advance the epoch")
	// ErrEpochGrace: the epoch has just advanced; grants resume shortly.
	ErrEpochGrace = errors.New("client: the epoch has just advanced; grants resume shortly")
	// ErrSessionTTL: the session's TTL is not the class TTL.
	ErrSessionTTL = errors.New("client: session TTL does not match the class TTL")
	// ErrSessionNotFound: the session is gone at lockd.
	ErrSessionNotFound = errors.New("client: session not found or expired")
	// ErrStaleToken: the token is not the current hold's.
	ErrStaleToken = errors.New("client: stale token")
	// ErrDenied: this identity may not use the key.
	ErrDenied = errors.New("client: permission denied")
	// ErrInvalid: a request field breaks a rule; the message names it.
	ErrInvalid = errors.New("client: invalid argument")
	// ErrUnavailable: lockd's store did not answer; the outcome of a write
	// may be unknown.
	ErrUnavailable = errors.New("client: lockd's store unavailable")
	// ErrQuota: a per-identity quota at lockd is used up.
	ErrQuota = errors.New("client: quota exceeded")
	// ErrRateLimited: ValidateToken was called too fast.
	ErrRateLimited = errors.New("client: rate limited")
	// ErrSuperseded: a newer Acquire of the same key on the same session
	// replaced this one.
	ErrSuperseded = errors.New("client: superseded by a newer acquire of the same key")
	// ErrNotOperator: the call needs an operator identity.
	ErrNotOperator = errors.New("client: operator identity required")
	// ErrSamePerson: a two-person approval was given by the requester.
	ErrSamePerson = errors.New("client: the approver must be a different operator than the requester")
	// ErrHoldChanged: the hold changed since the force-release was
	// requested; nothing was released.
	ErrHoldChanged = errors.New("client: the hold changed since the request; nothing was released")
	// ErrEpochMoved: the epoch is not the one the operator stated.
	ErrEpochMoved = errors.New("client: the epoch is not the expected one")
	// ErrEpochExhausted: no epoch above the last one is left.
	ErrEpochExhausted = errors.New("client: epoch exhausted")
	// ErrNotHeld: a force-release was asked for a key nobody holds.
	ErrNotHeld = errors.New("client: key is not held")
	// ErrRequestNotFound: no pending force-release or epoch-advance request
	// has this id.
	ErrRequestNotFound = errors.New("client: no pending request with this id")
	// ErrInternal: lockd found something in its store it cannot interpret.
	ErrInternal = errors.New("client: lockd internal error")
	// ErrNoQuorumSession: lockd has no etcd quorum and grants the class
	// (open on quorum loss) only to a session opened without quorum. Acquire
	// opens one and asks again by itself; a caller sees this only from the
	// raw API.
	ErrNoQuorumSession = errors.New("client: lockd has no quorum and grants this class only on a session opened without quorum")
	// ErrHistoryOff: the lockd asked serves no audit history.
	ErrHistoryOff = errors.New("client: the audit history is off on this lockd")
	// ErrClassMismatch: the Acquire named a class that does not own the
	// key. A key's class is decided in review; the message names it. Leave
	// the class out ("") to use it.
	ErrClassMismatch = errors.New("client: the class named does not own the key")
	// ErrNoClass: no class owns the key, so it cannot be locked until a
	// class of its namespace lists a prefix of it.
	ErrNoClass = errors.New("client: no class owns the key")
	// ErrOpenGrace: etcd's quorum has just returned after an outage, and
	// keys of classes open on quorum loss wait until every unprotected
	// holder's deadline has passed. An Acquire with a Wait waits it out.
	ErrOpenGrace = errors.New("client: quorum has just returned; keys of classes open on quorum loss wait until unprotected holders have lost their locks")
	// ErrMoving: the key's range was being moved to another entity shard,
	// or the shard map changed under the request. Nothing was granted.
	// Acquire asks again by itself within its wait (and for up to
	// MovingRetry without one); a caller sees this when that ran out.
	ErrMoving = errors.New("client: the key's range is moving to another shard")
	// ErrPlanState: a shard move plan is not in a state that allows the
	// call (approved already, another being carried out, or the map changed
	// since it was proposed); the message says which.
	ErrPlanState = errors.New("client: the shard move plan is not in a state that allows this")
	// ErrWrongRegion: the key's namespace is homed to another region, whose
	// lockd serves it; this one neither serves nor forwards it. [Region]
	// says which region and, when lockd knows it, its address.
	ErrWrongRegion = errors.New("client: the key's namespace is homed to another region")
)

// reasonDomain is the ErrorInfo domain of lockd's reasons.
const reasonDomain = "lockd.dev"

// reasons maps lockd's wire reasons (lock.v1 ErrorReason names without the
// prefix) to the client's sentinels.
var reasons = map[string][]error{
	"HELD":              {ErrHeld},
	"WAIT_TIMEOUT":      {ErrWaitTimeout, ErrHeld},
	"LEAK":              {ErrLeak},
	"SEALED":            {ErrSealed},
	"EPOCH_GRACE":       {ErrEpochGrace},
	"SESSION_TTL":       {ErrSessionTTL},
	"SESSION_NOT_FOUND": {ErrSessionNotFound},
	"STALE_TOKEN":       {ErrStaleToken},
	"DENIED":            {ErrDenied},
	"INVALID":           {ErrInvalid},
	"UNAVAILABLE":       {ErrUnavailable},
	"QUOTA":             {ErrQuota},
	"RATE_LIMITED":      {ErrRateLimited},
	"SUPERSEDED":        {ErrSuperseded},
	"NOT_OPERATOR":      {ErrNotOperator},
	"SAME_PERSON":       {ErrSamePerson},
	"HOLD_CHANGED":      {ErrHoldChanged},
	"EPOCH_MOVED":       {ErrEpochMoved},
	"EPOCH_EXHAUSTED":   {ErrEpochExhausted},
	"NOT_HELD":          {ErrNotHeld},
	"REQUEST_NOT_FOUND": {ErrRequestNotFound},
	"INTERNAL":          {ErrInternal},
	"HISTORY_OFF":       {ErrHistoryOff},
	"NO_QUORUM_SESSION": {ErrNoQuorumSession},
	"CLASS_MISMATCH":    {ErrClassMismatch},
	"NO_CLASS":          {ErrNoClass},
	"OPEN_GRACE":        {ErrOpenGrace},
	"WRONG_REGION":      {ErrWrongRegion},
	"MOVING":            {ErrMoving},
	"PLAN_STATE":        {ErrPlanState},
}

// Error is an error lockd returned, with the reason it gave. errors.Is
// matches the reason's sentinel; status.Code and status.FromError see the
// gRPC status.
type Error struct {
	// Reason is lockd's reason ("HELD", ...); empty when lockd gave none
	// (a transport error, a timeout).
	Reason string
	// Metadata is what lockd said besides the reason (WRONG_REGION: the
	// "region" and its "endpoint"); nil when nothing.
	Metadata map[string]string
	err      error
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap exposes the reason's sentinel and the status error.
func (e *Error) Unwrap() []error {
	return append(slices.Clone(reasons[e.Reason]), e.err)
}

// GRPCStatus is the status lockd answered with.
func (e *Error) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.err)
	return s
}

// Decode wraps an error from lockd's raw services (LockService,
// AdminService) as the client's own calls return it: errors.Is matches the
// reason's sentinel. nil and non-status errors are returned as they are.
func Decode(err error) error { return decode(err) }

// decode wraps an RPC error with the reason lockd gave: the one place the
// client reads reasons.
func decode(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	info := infoOf(st)
	return &Error{Reason: info.GetReason(), Metadata: info.GetMetadata(), err: err}
}

// infoOf is lockd's ErrorInfo in st, or nil.
func infoOf(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == reasonDomain {
			return info
		}
	}
	return nil
}

func reasonOf(st *status.Status) string { return infoOf(st).GetReason() }

// retryAfter is how long lockd asked to wait before asking again (a
// MOVING refusal's "retry_after_ms"), or def when it did not say.
func retryAfter(err error, def time.Duration) time.Duration {
	var e *Error
	if !errors.As(err, &e) {
		return def
	}
	ms, perr := strconv.ParseInt(e.Metadata["retry_after_ms"], 10, 64)
	if perr != nil || ms < 0 {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

// Region returns, for an ErrWrongRegion refusal, the region the key's
// namespace is homed to and that region's lockd address (empty when the
// lockd that refused was not told it).
func Region(err error) (region, endpoint string, ok bool) {
	var e *Error
	if !errors.As(err, &e) {
		if e, _ = decode(err).(*Error); e == nil {
			return "", "", false
		}
	}
	if e.Reason != "WRONG_REGION" {
		return "", "", false
	}
	return e.Metadata["region"], e.Metadata["endpoint"], true
}

// Reason returns the reason lockd gave for err, or "" when err is not an
// answer from lockd with a reason (a timeout, a broken connection).
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if st, ok := status.FromError(err); ok {
		return reasonOf(st)
	}
	return ""
}

// Definite reports whether err is lockd's definite answer: it refused, and
// nothing changed. An error without a reason (a timeout, a broken
// connection) or with UNAVAILABLE (the store did not answer, so a write may
// have committed) is not: the outcome is unknown.
func Definite(err error) bool {
	r := Reason(err)
	return r != "" && r != "UNAVAILABLE"
}
