// Package authz decides which SPIFFE identities may lock which keys, from
// the prefix grants (LockGrant objects) of a class set.
package authz

import (
	"errors"
	"slices"
	"strings"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// ErrDenied is returned for every refused request, whatever the reason
// (unknown namespace, unknown identity, key outside the grants), so that
// the reason cannot be probed. It never names the key or the identity.
var ErrDenied = errors.New("authz: permission denied: this identity may not lock this key")

// Authorizer answers authorization questions for one class set. It is
// immutable and safe for concurrent use; build a new one when the set
// changes.
type Authorizer struct {
	set        *class.Set
	trees      map[string]*node    // SPIFFE ID → radix tree of prefixes
	namespaces map[string][]string // SPIFFE ID → sorted namespaces
	prefixes   map[string][]string // SPIFFE ID → granted prefixes
}

// New compiles the grants of set into one radix tree per SPIFFE ID.
// Prefixes that are invalid or outside their grant's namespace are
// ignored (a set from class.LoadDir has none). When several grants of an
// identity have the same prefix, the first in set.Grants order wins.
func New(set *class.Set) *Authorizer {
	a := &Authorizer{
		set:        set,
		trees:      make(map[string]*node),
		namespaces: make(map[string][]string),
		prefixes:   make(map[string][]string),
	}
	grants := set.Grants() // a private copy: the tree points into it
	for i := range grants {
		g := &grants[i]
		root := a.trees[g.SPIFFEID]
		if root == nil {
			root = &node{}
			a.trees[g.SPIFFEID] = root
		}
		inserted := false
		for _, p := range g.Prefixes {
			if !strings.HasPrefix(p, g.Namespace+"/") || lockkey.ValidatePrefix(p) != nil {
				continue
			}
			root.insert(p, g)
			a.prefixes[g.SPIFFEID] = append(a.prefixes[g.SPIFFEID], p)
			inserted = true
		}
		if inserted && !slices.Contains(a.namespaces[g.SPIFFEID], g.Namespace) {
			a.namespaces[g.SPIFFEID] = append(a.namespaces[g.SPIFFEID], g.Namespace)
		}
	}
	for _, ns := range a.namespaces {
		slices.Sort(ns)
	}
	return a
}

// Allow reports whether spiffeID may lock key: key must be valid (see
// lockkey.Validate), its namespace must exist in the set, and one of the
// identity's granted prefixes must be a prefix of key. Allow does not
// allocate.
func (a *Authorizer) Allow(spiffeID, key string) bool {
	_, ok := a.Match(spiffeID, key)
	return ok
}

// Match is like Allow and also returns the grant of the longest granted
// prefix of key. The grant must not be modified.
func (a *Authorizer) Match(spiffeID, key string) (grant *class.Grant, ok bool) {
	root := a.trees[spiffeID]
	if root == nil || lockkey.Validate(key) != nil || !a.set.HasNamespace(lockkey.Namespace(key)) {
		return nil, false
	}
	g := root.longest(key)
	return g, g != nil
}

// AllowPrefix reports whether spiffeID may lock some key under prefix (a
// valid prefix ending in "/"): one of its granted prefixes contains prefix
// or lies under it, in a namespace of the set.
func (a *Authorizer) AllowPrefix(spiffeID, prefix string) bool {
	if lockkey.ValidatePrefix(prefix) != nil || !a.set.HasNamespace(lockkey.Namespace(prefix)) {
		return false
	}
	for _, g := range a.prefixes[spiffeID] {
		if strings.HasPrefix(prefix, g) || strings.HasPrefix(g, prefix) {
			return true
		}
	}
	return false
}

// Authorize returns nil if spiffeID may lock key, and ErrDenied otherwise.
func (a *Authorizer) Authorize(spiffeID, key string) error {
	if a.Allow(spiffeID, key) {
		return nil
	}
	return ErrDenied
}

// NamespacesOf returns the sorted namespaces in which spiffeID has grants.
func (a *Authorizer) NamespacesOf(spiffeID string) []string {
	return slices.Clone(a.namespaces[spiffeID])
}
