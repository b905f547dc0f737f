package class

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Set is an immutable snapshot of classes and grants.
type Set struct {
	classes    map[string]map[string]*Class // namespace → name → class
	grants     []Grant
	namespaces []string
	owners     map[string][]owned // namespace → prefixes, longest first
	homes      map[string]string  // namespace → region
	regions    []string           // sorted, once each
	// Fence proofs: from pause-test results (a class directory), or, when
	// proofs is not nil, as read from each class's status.
	pauseTests []PauseTest
	proofs     map[string]FenceProof
}

// NewSet builds a Set from classes, grants and namespace homes. It does not
// validate them: use [LoadDir] or [ParseFile] for that (and
// [CheckOwnership] and [CheckRegions] for objects from elsewhere). NewSet
// copies its arguments; a
// later class or grant with the same namespace and name replaces an earlier
// one. The namespaces of the set are those of its classes and grants.
func NewSet(classes []*Class, grants []Grant, homes ...Home) *Set {
	s := &Set{classes: make(map[string]map[string]*Class), homes: map[string]string{}}
	for _, h := range homes {
		s.homes[h.Namespace] = h.Region
		if !slices.Contains(s.regions, h.Region) {
			s.regions = append(s.regions, h.Region)
		}
	}
	slices.Sort(s.regions)
	ns := make(map[string]bool)
	for _, c := range classes {
		byName := s.classes[c.Namespace]
		if byName == nil {
			byName = make(map[string]*Class)
			s.classes[c.Namespace] = byName
		}
		cp := *c
		cp.Keys, cp.NestedIn = slices.Clone(c.Keys), slices.Clone(c.NestedIn)
		byName[c.Name] = &cp
		ns[c.Namespace] = true
	}
	for _, g := range grants {
		g.Prefixes = slices.Clone(g.Prefixes)
		if i := slices.IndexFunc(s.grants, func(o Grant) bool {
			return o.Namespace == g.Namespace && o.Name == g.Name
		}); i >= 0 {
			s.grants[i] = g
		} else {
			s.grants = append(s.grants, g)
		}
		ns[g.Namespace] = true
	}
	slices.SortFunc(s.grants, func(a, b Grant) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	s.owners = ownersOf(s.classes)
	for n := range ns {
		s.namespaces = append(s.namespaces, n)
	}
	slices.Sort(s.namespaces)
	return s
}

// Class returns the class namespace/name. The returned class must not be
// modified.
func (s *Set) Class(namespace, name string) (*Class, bool) {
	c, ok := s.classes[namespace][name]
	return c, ok
}

// Home returns the region namespace ns is homed to, if a LockNamespace
// homes it.
func (s *Set) Home(ns string) (region string, ok bool) {
	region, ok = s.homes[ns]
	return region, ok
}

// Regions returns the regions namespaces are homed to, sorted.
func (s *Set) Regions() []string { return slices.Clone(s.regions) }

// Namespaces returns the sorted namespaces that have at least one class or
// grant.
func (s *Set) Namespaces() []string {
	return slices.Clone(s.namespaces)
}

// HasNamespace reports whether ns has at least one class or grant.
func (s *Set) HasNamespace(ns string) bool {
	_, ok := slices.BinarySearch(s.namespaces, ns)
	return ok
}

// Grants returns a copy of the grants, sorted by namespace and name.
func (s *Set) Grants() []Grant {
	out := make([]Grant, len(s.grants))
	for i, g := range s.grants {
		g.Prefixes = slices.Clone(g.Prefixes)
		out[i] = g
	}
	return out
}

// MaxTTL is the longest TTL of any class (zero for an empty set).
func (s *Set) MaxTTL() time.Duration {
	var m time.Duration
	for _, byName := range s.classes {
		for _, c := range byName {
			m = max(m, c.TTL)
		}
	}
	return m
}

// Classes returns the classes sorted by namespace and name. The classes
// must not be modified.
func (s *Set) Classes() []*Class {
	var out []*Class
	for _, byName := range s.classes {
		for _, c := range byName {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *Class) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// WithPauseTests returns a copy of s whose classes are proven fenced by
// the results in tests ([ProveFenced]), as a class directory proves them.
func (s *Set) WithPauseTests(tests []PauseTest) *Set {
	cp := *s
	cp.pauseTests = slices.Clone(tests)
	cp.proofs = nil
	return &cp
}

// WithFenceProofs returns a copy of s whose classes' fence proofs are
// those given, by class ref ("namespace/name"), as the class controller
// wrote them in each LockClass's status. A class without one is not
// proven (ReasonNoStatus).
func (s *Set) WithFenceProofs(proofs map[string]FenceProof) *Set {
	cp := *s
	cp.pauseTests = nil
	cp.proofs = maps.Clone(proofs)
	if cp.proofs == nil {
		cp.proofs = map[string]FenceProof{}
	}
	return &cp
}

// PauseTests returns the pause-test results the set proves classes with
// (none for a set whose proofs come from the classes' status).
func (s *Set) PauseTests() []PauseTest { return slices.Clone(s.pauseTests) }

// Proof says whether c, a class of s, is proven fenced at now. A class
// declared advisory never is.
func (s *Set) Proof(c *Class, now time.Time) FenceProof {
	if c.Enforcement != EnforcementFenced {
		return FenceProof{Reason: ReasonNotDeclaredFenced, Message: "the class declares enforcement advisory"}
	}
	if s.proofs == nil {
		return ProveFenced(c, s.pauseTests, now)
	}
	p, ok := s.proofs[c.Ref()]
	if !ok {
		return FenceProof{Reason: ReasonNoStatus,
			Message: "the class controller has not written this class's status: it is served as advisory until it does"}
	}
	if p.Proven && !p.HoldsAt(now) {
		return FenceProof{Reason: ReasonPauseTestExpired, Result: p.Result,
			Message: fmt.Sprintf("the class's status proved it fenced until %s, which has passed: the class controller has not renewed it (is it running?)",
				p.Until.UTC().Format(time.RFC3339))}
	}
	return p
}

// Served is the enforcement lockd serves c with at now: fenced only while
// c declares fenced and a current pause test proves it, else advisory.
func (s *Set) Served(c *Class, now time.Time) Enforcement {
	if s.Proof(c, now).HoldsAt(now) {
		return EnforcementFenced
	}
	return EnforcementAdvisory
}
