package authz

import (
	"strings"

	"github.com/lockd-dev/lockd/internal/class"
)

// node is a node of a compressed radix tree of granted prefixes. The path
// from the root to a node spells a string; grant is set when that string
// is a granted prefix.
type node struct {
	label    string       // edge label from the parent; empty only at the root
	grant    *class.Grant // the grant of the prefix ending here, or nil
	first    []byte       // first[i] == children[i].label[0]
	children []*node
}

// child returns the child whose label starts with c, or nil.
func (n *node) child(c byte) *node {
	for i, f := range n.first {
		if f == c {
			return n.children[i]
		}
	}
	return nil
}

func (n *node) addChild(c *node) {
	n.first = append(n.first, c.label[0])
	n.children = append(n.children, c)
}

// insert adds prefix with grant g. If prefix is already present, the
// existing grant is kept.
func (n *node) insert(prefix string, g *class.Grant) {
	for {
		if prefix == "" {
			if n.grant == nil {
				n.grant = g
			}
			return
		}
		c := n.child(prefix[0])
		if c == nil {
			n.addChild(&node{label: prefix, grant: g})
			return
		}
		common := commonPrefixLen(prefix, c.label)
		if common < len(c.label) {
			// Split c: a new node for the common part, with c below it.
			mid := &node{label: c.label[:common]}
			c.label = c.label[common:]
			mid.addChild(c)
			for i, ch := range n.children {
				if ch == c {
					n.children[i] = mid
				}
			}
			c = mid
		}
		n, prefix = c, prefix[common:]
	}
}

// longest returns the grant of the longest granted prefix of key, or nil.
// It does not allocate.
func (n *node) longest(key string) *class.Grant {
	best := n.grant
	for key != "" {
		c := n.child(key[0])
		if c == nil || !strings.HasPrefix(key, c.label) {
			break
		}
		key = key[len(c.label):]
		n = c
		if n.grant != nil {
			best = n.grant
		}
	}
	return best
}

func commonPrefixLen(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
