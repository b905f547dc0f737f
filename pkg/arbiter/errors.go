package arbiter

import "errors"

// Sentinel errors. The gRPC boundary maps each to one status code; messages
// never carry a token.
var (
	// ErrSealed: the store's cluster ID differs from the one the epoch was
	// minted for (a restored store). Every grant is refused until an operator
	// advances the epoch.
	ErrSealed = errors.New("arbiter: sealed: epoch advance required")
	// ErrUnavailable: etcd did not answer within the request deadline. No
	// grant is ever made from memory.
	ErrUnavailable = errors.New("arbiter: store unavailable")
	// ErrHeld: the key is held by another session and the wait deadline
	// passed (or no wait was asked for).
	ErrHeld = errors.New("arbiter: key held by another session; wait deadline passed")
	// ErrEpochGrace: the epoch advanced less than the longest class TTL ago;
	// grants wait until every holder of the old epoch has been fenced.
	ErrEpochGrace = errors.New("arbiter: the epoch has just advanced; grants resume once every old holder is fenced (at most the longest class TTL)")
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
