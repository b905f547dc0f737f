package class

import (
	"fmt"
	"slices"
	"strings"
)

// CheckRegions checks that every namespace is homed to one region: at most
// one LockNamespace per namespace, and, once the homes name more than one
// region, one for every namespace with a class (a lockd of a region must
// know which keys are not its own). With one region or none, a namespace
// without a home is served by every lockd.
func CheckRegions(classes []*Class, homes []Home) []Problem {
	var ps []Problem
	first := map[string]Home{}
	var kept []Home
	for _, h := range homes {
		if f, dup := first[h.Namespace]; dup {
			ps = append(ps, Problem{File: h.Source, Line: h.Line, Object: objectName(KindLockNamespace, h.Namespace, h.Name),
				Field: "metadata.namespace", ID: RuleNamespaceRegion,
				Rule: fmt.Sprintf("namespace %s is homed already, by LockNamespace %s (%s:%d): a namespace has one region", h.Namespace, f.Name, f.Source, f.Line)})
			continue
		}
		first[h.Namespace] = h
		kept = append(kept, h)
	}
	regions, homed := regionsOf(kept)
	if len(regions) < 2 {
		return ps
	}
	told := map[string]bool{}
	for _, c := range classes {
		if homed[c.Namespace] || told[c.Namespace] {
			continue
		}
		told[c.Namespace] = true
		ps = append(ps, Problem{File: c.Source, Line: c.Line, Object: objectName(KindLockClass, c.Namespace, c.Name),
			Field: "metadata.namespace", ID: RuleNamespaceRegion,
			Rule: fmt.Sprintf("namespace %s has classes but no region: with namespaces homed to %s, every namespace needs a LockNamespace naming its region",
				c.Namespace, strings.Join(regions, ", "))})
	}
	return ps
}

// CheckRegionsOf applies the namespace-region rule to one object under
// review against the rest of the repository (as admission sees it): a
// LockNamespace h (others are the repository's other LockNamespaces;
// withClasses the namespaces that have a LockClass), worded for h.
func CheckRegionsOf(h Home, others []Home, withClasses []string) []Problem {
	obj := objectName(KindLockNamespace, h.Namespace, h.Name)
	homes := []Home{h}
	for _, o := range others {
		if o.Namespace == h.Namespace && o.Name != h.Name {
			return []Problem{{Object: obj, Field: "metadata.namespace", ID: RuleNamespaceRegion,
				Rule: fmt.Sprintf("namespace %s is homed already, by LockNamespace %s (region %s): a namespace has one region; change that one instead", h.Namespace, o.Name, o.Region)}}
		}
		if o.Namespace != h.Namespace {
			homes = append(homes, o)
		}
	}
	regions, homed := regionsOf(homes)
	if len(regions) < 2 {
		return nil
	}
	var unhomed []string
	for _, ns := range withClasses {
		if !homed[ns] && !slices.Contains(unhomed, ns) {
			unhomed = append(unhomed, ns)
		}
	}
	if len(unhomed) == 0 {
		return nil
	}
	slices.Sort(unhomed)
	return []Problem{{Object: obj, Field: "spec.region", ID: RuleNamespaceRegion,
		Rule: fmt.Sprintf("with this, namespaces are homed to %s, and then every namespace with classes needs a LockNamespace; %s has none: home it first",
			strings.Join(regions, ", "), strings.Join(unhomed, ", "))}}
}

// CheckClassRegion applies the namespace-region rule to a LockClass under
// review: once the repository's LockNamespaces (homes) name more than one
// region, its namespace must be homed.
func CheckClassRegion(c *Class, homes []Home) []Problem {
	regions, homed := regionsOf(homes)
	if len(regions) < 2 || homed[c.Namespace] {
		return nil
	}
	return []Problem{{Object: objectName(KindLockClass, c.Namespace, c.Name), Field: "metadata.namespace", ID: RuleNamespaceRegion,
		Rule: fmt.Sprintf("namespace %s has no region: with namespaces homed to %s, every namespace needs a LockNamespace naming its region; add one first",
			c.Namespace, strings.Join(regions, ", "))}}
}

// regionsOf is the sorted regions of homes, and the namespaces they home.
func regionsOf(homes []Home) ([]string, map[string]bool) {
	var regions []string
	homed := map[string]bool{}
	for _, h := range homes {
		homed[h.Namespace] = true
		if !slices.Contains(regions, h.Region) {
			regions = append(regions, h.Region)
		}
	}
	slices.Sort(regions)
	return regions, homed
}
