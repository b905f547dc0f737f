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
)

// TTL bounds.
const (
	// DefaultTTL is the TTL of a class that does not set spec.ttl.
	DefaultTTL = 15 * time.Second
	// MinTTL is the smallest allowed TTL.
	MinTTL = 5 * time.Second
	// MaxTTL is the largest allowed TTL.
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
	// QuorumLossOpen grants locks while quorum is lost (not yet supported).
	QuorumLossOpen QuorumLossPolicy = "open"
)

// Fairness states the ordering guarantee among waiters.
type Fairness string

// Fairness levels.
const (
	// FairnessBestEffort gives no durable queue position.
	FairnessBestEffort Fairness = "best-effort"
	// FairnessDurable keeps queue positions across failures (not yet supported).
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
	// Resource optionally names the guarded resource.
	Resource string
	// RiskOwner owns the risk of an advisory class.
	RiskOwner string
	// WaiverExpires is when the risk waiver of an advisory class lapses; a
	// date-only value means 00:00 UTC that day. Zero when unset.
	WaiverExpires time.Time
	// Source is the file the class was read from.
	Source string
	// Line is the line of Source where the class document starts.
	Line int
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
	// Source is the file the grant was read from.
	Source string
	// Line is the line of Source where the grant document starts.
	Line int
}
