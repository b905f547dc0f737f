package class

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Key ownership: every class lists the key prefixes it owns (spec.keys),
// and a key's class is the class owning the longest prefix of it in the
// key's namespace. Two classes of a namespace never claim the same prefix,
// and a prefix inside another class's prefix is allowed only when its class
// names that class in spec.nestedIn: keys then move from the outer class to
// the inner one, and review can see that they do.

// owned is one prefix and the class that owns it.
type owned struct {
	prefix string
	class  *Class
}

// ownersOf indexes classes' prefixes by namespace, longest first, so the
// first prefix of a key found is its class's. Ties (only in a set that
// broke [CheckOwnership]) go to the class first by name.
func ownersOf(classes map[string]map[string]*Class) map[string][]owned {
	out := make(map[string][]owned, len(classes))
	for ns, byName := range classes {
		var list []owned
		for _, c := range byName {
			for _, p := range c.Keys {
				list = append(list, owned{prefix: p, class: c})
			}
		}
		slices.SortFunc(list, func(a, b owned) int {
			return cmp.Or(cmp.Compare(len(b.prefix), len(a.prefix)), strings.Compare(a.prefix, b.prefix),
				strings.Compare(a.class.Name, b.class.Name))
		})
		out[ns] = list
	}
	return out
}

// Owner returns the class that owns key: the class of key's namespace
// with the longest prefix of key in its spec.keys. ok is false when no
// class of the namespace owns it (such a key cannot be locked). The
// returned class must not be modified.
func (s *Set) Owner(key string) (c *Class, ok bool) {
	ns, _, _ := strings.Cut(key, "/")
	for _, o := range s.owners[ns] {
		if strings.HasPrefix(key, o.prefix) {
			return o.class, true
		}
	}
	return nil, false
}

// OwnedPrefix returns the prefix of key that decides its class (the
// longest prefix of it any class of the namespace owns), or "" when no
// class owns key.
func (s *Set) OwnedPrefix(key string) string {
	ns, _, _ := strings.Cut(key, "/")
	for _, o := range s.owners[ns] {
		if strings.HasPrefix(key, o.prefix) {
			return o.prefix
		}
	}
	return ""
}

// CheckOwnership applies the key-ownership rule to classes, which may be
// of several namespaces (and may include classes that broke other rules:
// their spec.keys are still checked). For each namespace:
//
//   - no two classes claim the same prefix;
//   - a class with a prefix inside another class's prefix names that class
//     in spec.nestedIn;
//   - a class names in spec.nestedIn only classes of its namespace that
//     own a prefix containing one of its own.
//
// A problem is reported on the class that comes later in file and line
// order (the one a reviewer is most likely adding), naming the other.
func CheckOwnership(classes []*Class) []Problem {
	byNS := map[string][]*Class{}
	for _, c := range classes {
		if c != nil && c.Namespace != "" {
			byNS[c.Namespace] = append(byNS[c.Namespace], c)
		}
	}
	var ps []Problem
	for _, cs := range byNS {
		sortByFile(cs)
		ps = append(ps, checkNamespace(cs)...)
	}
	sortProblems(ps)
	return ps
}

// CheckOwnershipOf applies the key-ownership rule to c against the other
// classes of its namespace (others may hold classes of other namespaces,
// and c's earlier version: both are left out). It returns only c's own
// problems, worded from c's side as if c had been added last: what an
// admission review of c should say. Problems the others have among
// themselves are not c's.
func CheckOwnershipOf(others []*Class, c *Class) []Problem {
	var cs []*Class
	for _, o := range others {
		if o != nil && o.Namespace == c.Namespace && o.Name != c.Name {
			cs = append(cs, o)
		}
	}
	sortByFile(cs)
	var ps []Problem
	self := objectName(KindLockClass, c.Namespace, c.Name)
	for _, p := range checkNamespace(append(cs, c)) {
		if p.Object == self {
			ps = append(ps, p)
		}
	}
	return ps
}

func sortByFile(cs []*Class) {
	slices.SortFunc(cs, func(a, b *Class) int {
		return cmp.Or(strings.Compare(a.Source, b.Source), cmp.Compare(a.Line, b.Line), strings.Compare(a.Name, b.Name))
	})
}

// checkNamespace is CheckOwnership for the classes of one namespace, in
// file order: a clash is reported on the later class.
func checkNamespace(cs []*Class) []Problem {
	var ps []Problem
	problem := func(c *Class, field, rule string) {
		ps = append(ps, Problem{
			File: c.Source, Line: fieldLineIn(c.Source, c.Line, field), Object: objectName(KindLockClass, c.Namespace, c.Name),
			Field: field, ID: RuleKeyOwnership, Rule: rule,
		})
	}
	where := func(c *Class) string {
		if c.Source == "" {
			return "LockClass " + c.Name
		}
		return fmt.Sprintf("LockClass %s (%s:%d)", c.Name, c.Source, c.Line)
	}
	for i, b := range cs {
		for k, pb := range b.Keys {
			field := fmt.Sprintf("spec.keys[%d]", k)
			// The same prefix in a class earlier in file order.
			for _, a := range cs[:i] {
				if a.Name != b.Name && slices.Contains(a.Keys, pb) {
					problem(b, field, fmt.Sprintf("%q is also claimed by %s: a key has exactly one class; give the prefix to one of them", pb, where(a)))
				}
			}
			// The class that would own pb's keys without b: the longest
			// prefix of another class strictly containing pb. b must name it.
			j, pa := immediateOuter(cs, b, pb)
			if j < 0 || slices.Contains(b.NestedIn, cs[j].Name) {
				continue
			}
			a := cs[j]
			if j < i {
				problem(b, field, fmt.Sprintf("%q is inside %q, owned by %s: keys under it would move to this class from %s; if that is meant, say so with spec.nestedIn: [%s]",
					pb, pa, where(a), a.Name, a.Name))
				continue
			}
			k := slices.Index(a.Keys, pa)
			problem(a, fmt.Sprintf("spec.keys[%d]", k), fmt.Sprintf("%q contains %q, owned by %s: keys under %q would stay with %s; if that is meant, say so with spec.nestedIn: [%s] on %s",
				pa, pb, where(b), pb, b.Name, a.Name, b.Name))
		}
		for k, n := range b.NestedIn {
			field := fmt.Sprintf("spec.nestedIn[%d]", k)
			i := slices.IndexFunc(cs, func(c *Class) bool { return c.Name == n })
			if n == b.Name || i < 0 {
				if n != b.Name { // naming itself is class-keys' to report
					problem(b, field, fmt.Sprintf("names %q, which is not a LockClass of namespace %s", n, b.Namespace))
				}
				continue
			}
			if !nestedIn(b, cs[i]) {
				problem(b, field, fmt.Sprintf("names %s, but none of this class's spec.keys is inside one of its: remove it", where(cs[i])))
			}
		}
	}
	return ps
}

// immediateOuter finds the longest prefix of a class other than b that
// strictly contains p: the class (its index in cs, -1 when none) whose keys
// under p move to b.
func immediateOuter(cs []*Class, b *Class, p string) (int, string) {
	best, prefix := -1, ""
	for j, a := range cs {
		if a.Name == b.Name {
			continue
		}
		for _, pa := range a.Keys {
			if len(pa) < len(p) && strings.HasPrefix(p, pa) && len(pa) > len(prefix) {
				best, prefix = j, pa
			}
		}
	}
	return best, prefix
}

// nestedIn reports whether some prefix of inner is strictly inside some
// prefix of outer.
func nestedIn(inner, outer *Class) bool {
	for _, pi := range inner.Keys {
		for _, po := range outer.Keys {
			if len(pi) > len(po) && strings.HasPrefix(pi, po) {
				return true
			}
		}
	}
	return false
}
