// Package class defines LockClass and LockGrant objects, parses them from a
// class directory of Kubernetes-style YAML files (one folder per namespace)
// and serves immutable snapshots of them.
package class

import (
	"errors"
	"time"
)

// ErrInvalid is wrapped by every error reporting invalid class definitions.
var ErrInvalid = errors.New("class: invalid")

// APIVersion is the only accepted apiVersion.
const APIVersion = "locks.lockd.dev/v1alpha1"

// Object kinds.
const (
	// KindLockClass is the kind of a [Class] document.
	KindLockClass = "LockClass"
	// KindLockGrant is the kind of a [Grant] document.
	KindLockGrant = "LockGrant"
	// KindPauseTestResult is the kind of a [PauseTest] document.
	KindPauseTestResult = "PauseTestResult"
	// KindLockNamespace is the kind of a [Home] document.
	KindLockNamespace = "LockNamespace"
)

// TTL bounds of classes and of the sessions that hold their locks.
const (
	// DefaultTTL is the TTL of a class that does not set spec.ttl.
	DefaultTTL = 15 * time.Second
	// MinTTL is the smallest allowed class or session TTL.
	MinTTL = 5 * time.Second
	// MaxTTL is the largest allowed class or session TTL.
	MaxTTL = 300 * time.Second
	// MinAdvisoryTTL is the smallest allowed TTL of an advisory class.
	MinAdvisoryTTL = 30 * time.Second
)

// Purpose states why a lock is taken.
type Purpose string

// Purposes.
const (
	// PurposeCorrectness means two holders at once would corrupt data.
	PurposeCorrectness Purpose = "correctness"
	// PurposeEfficiency means two holders at once only waste work.
	PurposeEfficiency Purpose = "efficiency"
)

// Enforcement states how exclusion is enforced at the guarded resource.
type Enforcement string

// Enforcements.
const (
	// EnforcementFenced means the resource checks fencing tokens.
	EnforcementFenced Enforcement = "fenced"
	// EnforcementAdvisory means nothing stops a stale holder; needs a risk waiver.
	EnforcementAdvisory Enforcement = "advisory"
)

// Tier selects the kind of lock workload.
type Tier string

// Tiers.
const (
	// TierEntity is for many short-lived per-entity locks.
	TierEntity Tier = "entity"
	// TierCoord is for few long-lived coordination locks (e.g. leader election).
	TierCoord Tier = "coord"
)

// QuorumLossPolicy states what happens to lock requests when the backing
// store loses quorum.
type QuorumLossPolicy string

// Quorum loss policies.
const (
	// QuorumLossClosed refuses locks while quorum is lost.
	QuorumLossClosed QuorumLossPolicy = "closed"
	// QuorumLossOpen grants locks from memory, unprotected (token 0), once
	// lockd has had no quorum for --open-after; only for purpose efficiency
	// and enforcement advisory.
	QuorumLossOpen QuorumLossPolicy = "open"
)

// Fairness states the ordering guarantee among waiters.
type Fairness string

// Fairness levels.
const (
	// FairnessBestEffort gives no durable queue position.
	FairnessBestEffort Fairness = "best-effort"
	// FairnessDurable keeps waiters in etcd, in arrival order by create
	// revision, across arbiter restarts: two more writes per waiter.
	FairnessDurable Fairness = "durable"
)

// Class is a validated LockClass. Values reachable from a [Set] are shared
// and must not be modified.
type Class struct {
	// Namespace is metadata.namespace.
	Namespace string
	// Name is metadata.name.
	Name string
	// Purpose is spec.purpose.
	Purpose Purpose
	// Enforcement is spec.enforcement.
	Enforcement Enforcement
	// TTL is spec.ttl, or DefaultTTL when unset.
	TTL time.Duration
	// Tier is spec.tier.
	Tier Tier
	// OnQuorumLoss is spec.onQuorumLoss, or QuorumLossClosed when unset.
	OnQuorumLoss QuorumLossPolicy
	// Fairness is spec.fairness, or FairnessBestEffort when unset.
	Fairness Fairness
	// Resource optionally names the guarded resource; a fenced class needs
	// it, because its pause test is run against that resource.
	Resource string
	// ResourceSchemaVersion is the resource's schema version label. A pause
	// test result counts only for the version it was run against.
	ResourceSchemaVersion string
	// RiskOwner owns the risk of an advisory class.
	RiskOwner string
	// WaiverExpires is when the risk waiver of an advisory class lapses; a
	// date-only value means 00:00 UTC that day. Zero when unset.
	WaiverExpires time.Time
	// Keys are the key prefixes the class owns (spec.keys), each
	// "<namespace>/…/" like a LockGrant's prefixes. A key's class is the
	// class with the longest prefix of it in its namespace ([Set.Owner]):
	// decided in review, never by a caller.
	Keys []string
	// NestedIn names the classes of the namespace whose prefixes contain
	// some of this class's (spec.nestedIn): a class that carves keys out of
	// another's must say so, so review sees keys move between classes.
	NestedIn []string
	// Source is the file the class was read from.
	Source string
	// Line is the line of Source where the class document starts.
	Line int
}

// Ref names c as holds, waiters and the wire do: "namespace/name".
func (c *Class) Ref() string { return c.Namespace + "/" + c.Name }

// Home is a validated LockNamespace: the region the namespace's keys are
// served in. A lockd of another region refuses them (it never forwards).
type Home struct {
	// Namespace is metadata.namespace: the lock namespace homed.
	Namespace string
	// Name is metadata.name.
	Name string
	// Region is spec.region.
	Region string
	// Source and Line locate the document.
	Source string
	Line   int
}

// Grant is a validated LockGrant: the SPIFFE ID may lock keys under the
// prefixes.
type Grant struct {
	// Namespace is metadata.namespace.
	Namespace string
	// Name is metadata.name.
	Name string
	// SPIFFEID is the identity granted.
	SPIFFEID string
	// Prefixes are the key prefixes granted; each ends with "/".
	Prefixes []string
	// SharedWith names other grants of the namespace that may give an
	// overlapping prefix to another identity: saying so is what makes an
	// overlap reviewed rather than accidental.
	SharedWith []string
	// Source is the file the grant was read from.
	Source string
	// Line is the line of Source where the grant document starts.
	Line int
}

// PauseTestOutcomePass is the only outcome a PauseTestResult records: the
// kit writes no result for a failed run.
const PauseTestOutcomePass = "pass"

// PauseTestValidity is how long a pause-test result counts.
const PauseTestValidity = 365 * 24 * time.Hour

// PauseTest is a PauseTestResult: the record that the pause test (lockctl
// fence-test) saw the resource reject a stale holder's write. It lives next
// to the class it proves fenced.
type PauseTest struct {
	// Namespace is metadata.namespace.
	Namespace string
	// Name is metadata.name.
	Name string
	// Class is the name of the class tested, in the same namespace.
	Class string
	// Resource is the resource the test wrote to; it must equal the
	// class's spec.resource.
	Resource string
	// ResourceSchemaVersion is the resource's schema version label when
	// the test ran.
	ResourceSchemaVersion string
	// Outcome is PauseTestOutcomePass.
	Outcome string
	// RanAt is when the test ran.
	RanAt time.Time
	// Expires is when the result stops counting (RanAt plus a year at most).
	Expires time.Time
	// FirstToken and SecondToken are the fencing tokens of the paused
	// holder and of the holder that took over, as decimal strings.
	FirstToken, SecondToken string
	// Source is the file the result was read from.
	Source string
	// Line is the line of Source where the document starts.
	Line int
}
