package class

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a class directory, located precisely
// enough for a linter to print it.
type Problem struct {
	// File is the path of the offending file (or directory).
	File string
	// Line is the 1-based line in File, or 0 when unknown.
	Line int
	// Object is "Kind namespace/name", or empty when not known.
	Object string
	// Field is the field path, e.g. "spec.ttl", or empty.
	Field string
	// Rule describes the rule broken.
	Rule string
	// ID names the rule broken, e.g. "ttl-range" (see Rules), so that
	// tools and people can refer to it.
	ID string
	// Warning marks a problem that does not fail a check (for example a
	// waiver that lapses soon). Loaders never return warnings.
	Warning bool
}

// Error formats the problem as "file:line: Kind ns/name: field: rule",
// leaving out parts that are empty.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
	}
	for _, part := range []string{p.Object, p.Field, p.Rule} {
		if part != "" {
			b.WriteString(": ")
			b.WriteString(part)
		}
	}
	return b.String()
}

// LoadError reports every problem found while loading a class directory.
// It wraps [ErrInvalid] and each [Problem].
type LoadError struct {
	// Problems lists the problems in file and line order.
	Problems []Problem
}

// Error lists all problems, one per line.
func (e *LoadError) Error() string {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	n := "problems"
	if len(e.Problems) == 1 {
		n = "problem"
	}
	return fmt.Sprintf("%v: %d %s:\n%v", ErrInvalid, len(e.Problems), n, errors.Join(errs...))
}

// Unwrap returns ErrInvalid followed by the problems, so that errors.Is
// and errors.As see them.
func (e *LoadError) Unwrap() []error {
	errs := make([]error, 0, len(e.Problems)+1)
	errs = append(errs, ErrInvalid)
	for _, p := range e.Problems {
		errs = append(errs, p)
	}
	return errs
}

// Rule IDs. The first group is checked whenever classes are loaded (lockd
// refuses a directory that breaks one); the review group is checked by
// class-lint only, because it depends on other files or on the date.
const (
	// RuleSchema: the document is not a well-formed LockClass, LockGrant or
	// PauseTestResult (YAML, apiVersion, kind, unknown fields, types,
	// required metadata, enum values, duration and date formats).
	RuleSchema = "schema"
	// RuleLayout: files must be YAML directly inside a namespace folder.
	RuleLayout = "layout"
	// RuleDuplicate: an object's kind, namespace and name are defined twice.
	RuleDuplicate = "duplicate"
	// RuleNamespaceFolder: metadata.namespace must equal the folder name.
	RuleNamespaceFolder = "namespace-folder"
	// RuleTTLRange: spec.ttl must be between MinTTL and MaxTTL.
	RuleTTLRange = "ttl-range"
	// RuleAdvisoryTTLFloor: advisory classes need a ttl of at least MinAdvisoryTTL.
	RuleAdvisoryTTLFloor = "advisory-ttl-floor"
	// RuleAdvisoryRiskOwner: advisory classes need spec.riskOwner.
	RuleAdvisoryRiskOwner = "advisory-risk-owner"
	// RuleAdvisoryWaiver: advisory classes need a spec.waiverExpires in the future.
	RuleAdvisoryWaiver = "advisory-waiver"
	// RuleQuorumLossOpen: onQuorumLoss open only for efficiency purpose and
	// advisory enforcement.
	RuleQuorumLossOpen = "quorum-loss-open"
	// RuleTierRequired: spec.tier is required.
	RuleTierRequired = "tier-required"
	// RuleGrantNamespace: a grant's prefixes must be inside its namespace.
	RuleGrantNamespace = "grant-namespace"
	// RuleClassKeys: a class must list the key prefixes it owns
	// (spec.keys), each inside its namespace and listed once; spec.nestedIn
	// names other classes of the namespace.
	RuleClassKeys = "class-keys"
	// RuleKeyOwnership: a key has exactly one class. No two classes of a
	// namespace claim the same prefix; a class whose prefix is inside
	// another class's names that class in spec.nestedIn, and only such
	// classes (see [CheckOwnership]).
	RuleKeyOwnership = "key-ownership"
	// RuleNamespaceRegion: a namespace is homed to one region. At most one
	// LockNamespace per namespace; once the repository names more than one
	// region, every namespace with a class has one (see [CheckRegions]).
	RuleNamespaceRegion = "namespace-region"

	// RuleWaiverExpiring (review, warning): an advisory waiver lapses within
	// WaiverWarning.
	RuleWaiverExpiring = "waiver-expiring"
	// RuleFencedPauseTest (review): a fenced class needs a current, passing
	// PauseTestResult for its class, resource and resource schema version.
	RuleFencedPauseTest = "fenced-pause-test"
	// RuleGrantOverlap (review): two grants give overlapping prefixes to
	// different identities without naming each other in spec.sharedWith.
	RuleGrantOverlap = "grant-overlap"
	// RuleCodeowners (review): every namespace folder needs its own
	// CODEOWNERS entry.
	RuleCodeowners = "codeowners"
)

// Rules lists every rule ID, load rules first.
var Rules = []string{
	RuleSchema, RuleLayout, RuleDuplicate, RuleNamespaceFolder, RuleTTLRange, RuleAdvisoryTTLFloor,
	RuleAdvisoryRiskOwner, RuleAdvisoryWaiver, RuleQuorumLossOpen, RuleTierRequired,
	RuleGrantNamespace, RuleClassKeys, RuleKeyOwnership, RuleNamespaceRegion,
	RuleWaiverExpiring, RuleFencedPauseTest, RuleGrantOverlap, RuleCodeowners,
}
