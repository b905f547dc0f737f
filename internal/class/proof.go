package class

import (
	"fmt"
	"strings"
	"time"
)

// Reasons a class is or is not proven fenced, as FenceProof.Reason and as
// the reason of the Fenced condition the class controller writes on a
// LockClass (CamelCase, as Kubernetes condition reasons are).
const (
	// ReasonPauseTestCurrent: a current PauseTestResult proves the class's
	// resource rejects a stale holder's write.
	ReasonPauseTestCurrent = "PauseTestCurrent"
	// ReasonNotDeclaredFenced: the class declares enforcement advisory.
	ReasonNotDeclaredFenced = "DeclaredAdvisory"
	// ReasonNoResource: the class declares fenced but names no spec.resource.
	ReasonNoResource = "NoResource"
	// ReasonNoPauseTest: no PauseTestResult names the class.
	ReasonNoPauseTest = "NoPauseTest"
	// ReasonResourceMismatch: the results found tested another resource.
	ReasonResourceMismatch = "ResourceMismatch"
	// ReasonSchemaVersionChanged: the results found tested another schema
	// version of the resource.
	ReasonSchemaVersionChanged = "SchemaVersionChanged"
	// ReasonPauseTestExpired: the results found are more than a year old or
	// past their own expiry.
	ReasonPauseTestExpired = "PauseTestExpired"
	// ReasonPauseTestInFuture: the results found say they ran later than now.
	ReasonPauseTestInFuture = "PauseTestInFuture"
	// ReasonInvalid: classes from the Kubernetes API only: the LockClass
	// breaks a rule lockd applies at load (the admission webhook was
	// bypassed or the rules changed), so nothing about it is proven.
	ReasonInvalid = "Invalid"
	// ReasonNoStatus: classes from the Kubernetes API only: the class
	// controller has not written the class's status yet.
	ReasonNoStatus = "NoStatus"
	// ReasonStatusStale: classes from the Kubernetes API only: the status
	// was written for an earlier generation of the class's spec.
	ReasonStatusStale = "StatusStale"
)

// FenceProof says whether a class declared fenced may be served as
// fenced: only while a current pause-test result for its resource, at its
// schema version, exists. Anything else is served as advisory.
type FenceProof struct {
	// Proven is true when a current result proves the class fenced.
	Proven bool
	// Until is when that proof stops counting (the result's expiry, at most
	// a year after it ran); zero when not proven.
	Until time.Time
	// Result names the result that proves it, "namespace/name".
	Result string
	// Reason is one of the Reason constants.
	Reason string
	// Message says why, for people, and what to do.
	Message string
}

// HoldsAt reports whether p proves fencing at now: proven, and now before
// Until. A proof read from elsewhere (a class's status) may outlive its
// result; this is where it stops counting.
func (p FenceProof) HoldsAt(now time.Time) bool {
	return p.Proven && !p.Until.IsZero() && now.Before(p.Until)
}

// ProveFenced finds the pause-test result that proves c fenced at now, of
// tests (results of any class). For a class declared advisory it returns
// ReasonNotDeclaredFenced. When several results fail, the reason is the
// newest one's, and the message lists each.
func ProveFenced(c *Class, tests []PauseTest, now time.Time) FenceProof {
	if c.Enforcement != EnforcementFenced {
		return FenceProof{Reason: ReasonNotDeclaredFenced, Message: "the class declares enforcement advisory"}
	}
	if c.Resource == "" {
		return FenceProof{Reason: ReasonNoResource,
			Message: "a fenced class must name its spec.resource: the pause test proves that resource rejects stale tokens"}
	}
	var (
		reasons []string
		reason  string
		newest  time.Time
	)
	for i := range tests {
		pt := &tests[i]
		if pt.Namespace != c.Namespace || pt.Class != c.Name {
			continue
		}
		where := pt.Source
		if pt.Line > 0 {
			where = fmt.Sprintf("%s:%d", pt.Source, pt.Line)
		}
		var why, code string
		switch {
		case pt.Resource != c.Resource:
			code, why = ReasonResourceMismatch, fmt.Sprintf("%s tested resource %q, the class guards %q", where, pt.Resource, c.Resource)
		case pt.ResourceSchemaVersion != c.ResourceSchemaVersion:
			code, why = ReasonSchemaVersionChanged, fmt.Sprintf("%s tested schema version %q of %s, the class says %q: the schema changed, run the test again",
				where, pt.ResourceSchemaVersion, c.Resource, c.ResourceSchemaVersion)
		case pt.RanAt.After(now):
			code, why = ReasonPauseTestInFuture, fmt.Sprintf("%s ran at %s, which is in the future", where, pt.RanAt.UTC().Format(time.RFC3339))
		case !now.Before(pauseTestExpiry(pt)):
			code, why = ReasonPauseTestExpired, fmt.Sprintf("%s expired on %s (results count for a year): run the test again",
				where, pauseTestExpiry(pt).UTC().Format(time.DateOnly))
		default:
			return FenceProof{Proven: true, Until: pauseTestExpiry(pt), Result: pt.Namespace + "/" + pt.Name, Reason: ReasonPauseTestCurrent,
				Message: fmt.Sprintf("PauseTestResult %s (ran %s) proves %s rejects a stale holder's write, until %s",
					pt.Name, pt.RanAt.UTC().Format(time.RFC3339), c.Resource, pauseTestExpiry(pt).UTC().Format(time.RFC3339))}
		}
		reasons = append(reasons, why)
		if reason == "" || pt.RanAt.After(newest) {
			reason, newest = code, pt.RanAt
		}
	}
	if len(reasons) == 0 {
		return FenceProof{Reason: ReasonNoPauseTest,
			Message: fmt.Sprintf("no PauseTestResult for class %s and resource %s: run `lockctl fence-test --class %s …` against the resource and commit the result next to the class, or declare the class advisory with a risk owner",
				c.Name, c.Resource, c.Name)}
	}
	return FenceProof{Reason: reason, Message: "no current PauseTestResult: " + strings.Join(reasons, "; ")}
}

// pauseTestExpiry is when pt stops counting: its own expiry, or a year
// after it ran, whichever is first. A result without an expiry has none
// left.
func pauseTestExpiry(pt *PauseTest) time.Time {
	exp := pt.Expires
	if e := pt.RanAt.Add(PauseTestValidity); e.Before(exp) {
		exp = e
	}
	return exp
}

// CurrentPauseTest returns the pause-test result that proves c fenced at
// now, or an explanation of why there is none. tests may hold results of
// any class. It is [ProveFenced] for a class declared fenced.
func CurrentPauseTest(c *Class, tests []PauseTest, now time.Time) (*PauseTest, string) {
	cc := *c
	cc.Enforcement = EnforcementFenced
	p := ProveFenced(&cc, tests, now)
	if !p.Proven {
		return nil, p.Message
	}
	for i := range tests {
		if tests[i].Namespace+"/"+tests[i].Name == p.Result {
			return &tests[i], ""
		}
	}
	return nil, p.Message // unreachable: Result names one of tests
}
