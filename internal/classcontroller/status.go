package classcontroller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockd-dev/lockd/internal/class"
)

// maxMessage is the longest condition message the controller writes:
// metav1.Condition's schema allows 32768 bytes.
const maxMessage = 32768

// recheckMargin is how long after a proof's end the controller looks at
// the class again: the proof has then stopped counting at any clock.
const recheckMargin = time.Second

// desired is the status the controller writes on a LockClass at now, and
// the proof it says.
type desired struct {
	status class.ClassStatus
	proof  class.FenceProof
}

// statusFor computes the status of the LockClass obj (an unstructured
// object's content) at now, from the PauseTestResults of its namespace
// (contents too; results of any class, invalid ones ignored). The Fenced
// condition keeps the lastTransitionTime of obj's current status when its
// status (True or False) is unchanged, else it is now.
func statusFor(obj map[string]any, results []map[string]any, now time.Time) desired {
	gen := generation(obj)
	var proof class.FenceProof
	o, problems := class.ParseObject(obj)
	if !o.Valid || o.Class == nil {
		proof = invalid(problems)
	} else {
		proof = class.ProveFenced(o.Class, pauseTests(results), now)
	}
	st := class.StatusFor(proof, gen)
	cond := &st.Conditions[0]
	cond.Message = truncate(cond.Message, maxMessage)
	cond.LastTransitionTime = now.UTC().Format(time.RFC3339)
	if old, ok := class.ClassStatusOf(obj); ok {
		if prev := fencedCondition(old); prev != nil && prev.Status == cond.Status && prev.LastTransitionTime != "" {
			cond.LastTransitionTime = prev.LastTransitionTime
		}
	}
	return desired{status: st, proof: proof}
}

// pauseTests parses results, keeping the valid ones, newest run first (by
// name among equals): ProveFenced takes the first current one, so the
// proof chosen is the one that lasts longest, the same at every reconcile.
func pauseTests(results []map[string]any) []class.PauseTest {
	var tests []class.PauseTest
	for _, r := range results {
		o, _ := class.ParseObject(r)
		if o.Valid && o.PauseTest != nil {
			tests = append(tests, *o.PauseTest)
		}
	}
	slices.SortFunc(tests, func(a, b class.PauseTest) int {
		if c := b.RanAt.Compare(a.RanAt); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return tests
}

// invalid is the proof of a LockClass that breaks a rule: none.
func invalid(problems []class.Problem) class.FenceProof {
	var rules []string
	for _, p := range problems {
		if p.Warning {
			continue
		}
		r := p.Rule
		if p.Field != "" {
			r = p.Field + ": " + r
		}
		if p.ID != "" {
			r += " (" + p.ID + ")"
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		rules = []string{"the object cannot be read as a LockClass"}
	}
	return class.FenceProof{Reason: class.ReasonInvalid,
		Message: fmt.Sprintf("the class breaks a rule lockd applies at load, so it is not proven fenced: %s; `class-lint check` shows the same", strings.Join(rules, "; "))}
}

// fencedCondition returns st's condition of type Fenced, or nil.
func fencedCondition(st class.ClassStatus) *class.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == class.ConditionFenced {
			return &st.Conditions[i]
		}
	}
	return nil
}

// generation is obj's metadata.generation, 0 when absent.
func generation(obj map[string]any) int64 {
	meta, _ := obj["metadata"].(map[string]any)
	switch g := meta["generation"].(type) {
	case int64:
		return g
	case float64:
		return int64(g)
	}
	return 0
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " …"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
