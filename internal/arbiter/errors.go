package arbiter

import "errors"

// Sentinel errors. The gRPC boundary (internal/server) maps each to one
// status code and one wire reason; messages never carry a token.
var (
	// ErrSealed: grants are refused until operators advance the epoch: the
	// store's cluster ID differs from the epoch record's (a restore), the
	// store has no epoch record, or it is behind what this arbiter served.
	// The wrapped message says which and what to do.
	ErrSealed = errors.New("arbiter: sealed: epoch advance required")
	// ErrUnavailable: etcd did not answer within the request deadline. No
	// grant is ever made from memory.
	ErrUnavailable = errors.New("arbiter: store unavailable")
	// ErrHeld: the key is held by another session and the request asked
	// not to wait. Nothing was granted.
	ErrHeld = errors.New("arbiter: key held by another session")
	// ErrWaitTimeout: the key stayed held by another session for the whole
	// wait the request asked for; the waiter left the queue and nothing was
	// granted.
	ErrWaitTimeout = errors.New("arbiter: key held by another session; wait deadline passed")
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
	// ErrNoQuorumSession: the arbiter is in its open posture (no quorum for
	// OpenAfter) and grants the open class only to a session opened
	// without quorum; the request's session was opened in etcd. Nothing
	// was granted: open a session now and acquire on it.
	ErrNoQuorumSession = errors.New("arbiter: no etcd quorum: this class is granted (unprotected) only to a session opened without quorum; open a new session")
	// ErrClassMismatch: the request named a class that does not own the
	// key. A key's class is the one whose spec.keys has the longest prefix
	// of it, decided in review; the message names it. Nothing was granted.
	ErrClassMismatch = errors.New("arbiter: class mismatch")
	// ErrNoClass: no class of the key's namespace owns the key (no
	// spec.keys prefix of it), so it cannot be locked. Nothing was granted.
	ErrNoClass = errors.New("arbiter: no class")
	// ErrOpenGrace: etcd's quorum returned after an outage in which keys of
	// classes open on quorum loss may have been granted unprotected, on
	// any arbiter; grants of such classes wait until every unprotected
	// holder has lost its lock by its own deadline (open.go). Nothing was
	// granted.
	ErrOpenGrace = errors.New("arbiter: quorum has just returned: keys of classes open on quorum loss wait until every unprotected holder's deadline has passed")
	// ErrMoving: the key's range is being moved to another entity shard,
	// or the shard map changed under the request (this arbiter's map was
	// behind the shard's, or the key was homed elsewhere while it waited).
	// Nothing was granted; acquire again after a short pause: the range is
	// served again once its move completes, and the arbiter reads the new
	// map at once.
	ErrMoving = errors.New("arbiter: moving")
	// ErrPlanNotFound: no shard move plan has this id.
	ErrPlanNotFound = errors.New("arbiter: no shard move plan with this id")
	// ErrPlanState: the shard move plan is not in a state that allows the
	// call (approved already, another being carried out, or the map changed
	// since it was proposed); the message says which.
	ErrPlanState = errors.New("arbiter: shard move plan")
	// ErrInternal: the store returned something lockd cannot interpret.
	ErrInternal = errors.New("arbiter: internal error")
)
