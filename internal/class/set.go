package class

import (
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
