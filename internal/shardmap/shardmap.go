// Package shardmap homes entity-tier lock keys to entity shards (etcd
// clusters): weighted rendezvous hashing (highest random weight) of a key's
// range over the shards of a versioned map, with manual overrides that pin a
// namespace or a prefix to one shard.
//
// A key's range is its namespace and the first Depth segments of its path
// below it, not counting the key's last segment: with the default depth of
// one, "payments/ledger/42" and "payments/ledger/42/refund" are both in
// range "payments/ledger/". Keys a holder takes together (a resource and
// the things nested under it, the keys of one class) share a range and so a
// shard, and a range is coarse enough to be moved as one: a move waits for
// the range to have no holders, so it moves few, well-known prefixes rather
// than millions of single keys. A namespace whose first segment is one huge
// resource type may choose a greater depth (Map.Depth) to spread it.
//
// This package decides homes only. Safety does not rest on every arbiter
// holding the same map: a grant also compares, on the shard, that the shard
// owns the key's range (a stale map is refused there, never granted).
package shardmap

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// ErrInvalid is wrapped by every error Validate returns.
var ErrInvalid = errors.New("shardmap: invalid map")

// DefaultDepth is a namespace's range depth unless Map.Depth says otherwise.
const DefaultDepth = 1

// MaxDepth bounds Map.Depth: deeper ranges are per-entity, too many to move
// one at a time.
const MaxDepth = 4

// Map is the entity tier's shard map, a versioned document on the coord
// cluster.
type Map struct {
	// Version increases with every change; a grant names the version it
	// routed by.
	Version int64 `json:"version"`
	// Shards are the entity clusters keys are homed to, by name (the
	// topology's cluster names).
	Shards []Shard `json:"shards"`
	// Overrides pin a namespace ("payments/") or a key prefix
	// ("payments/ledger/") to a shard; the longest matching prefix wins
	// over hashing.
	Overrides []Override `json:"overrides,omitempty"`
	// Depth is, per namespace, how many path segments below it make a
	// key's range (1 to MaxDepth); DefaultDepth for the others.
	Depth map[string]int `json:"depth,omitempty"`
}

// Shard is one entity shard.
type Shard struct {
	Name string `json:"name"`
	// Weight is the shard's share of ranges relative to the others' (a
	// shard of weight 2 homes about twice the ranges of one of weight 1);
	// zero means 1.
	Weight float64 `json:"weight,omitempty"`
}

// Override pins the keys under Prefix to Shard.
type Override struct {
	Prefix string `json:"prefix"`
	Shard  string `json:"shard"`
}

// Validate checks m and returns an error naming the first field that
// breaks a rule.
func (m *Map) Validate() error {
	if len(m.Shards) == 0 {
		return fmt.Errorf("%w: shards: at least one shard is required", ErrInvalid)
	}
	seen := map[string]bool{}
	for i, s := range m.Shards {
		switch {
		case s.Name == "":
			return fmt.Errorf("%w: shards[%d].name: required", ErrInvalid, i)
		case seen[s.Name]:
			return fmt.Errorf("%w: shards[%d].name: %q appears twice", ErrInvalid, i, s.Name)
		case math.IsNaN(s.Weight) || math.IsInf(s.Weight, 0) || s.Weight < 0:
			return fmt.Errorf("%w: shards[%d].weight: must be a positive number (0 means 1), got %v", ErrInvalid, i, s.Weight)
		}
		seen[s.Name] = true
	}
	prefixes := map[string]bool{}
	for i, o := range m.Overrides {
		if err := lockkey.ValidatePrefix(o.Prefix); err != nil {
			return fmt.Errorf("%w: overrides[%d].prefix: %w", ErrInvalid, i, err)
		}
		if prefixes[o.Prefix] {
			return fmt.Errorf("%w: overrides[%d].prefix: %q is pinned twice", ErrInvalid, i, o.Prefix)
		}
		prefixes[o.Prefix] = true
		if !seen[o.Shard] {
			return fmt.Errorf("%w: overrides[%d].shard: %q is not one of the map's shards", ErrInvalid, i, o.Shard)
		}
	}
	for ns, d := range m.Depth {
		if !lockkey.IsDNSLabel(ns) {
			return fmt.Errorf("%w: depth[%q]: not a namespace (a DNS label)", ErrInvalid, ns)
		}
		if d < 1 || d > MaxDepth {
			return fmt.Errorf("%w: depth[%q]: must be 1 to %d, got %d", ErrInvalid, ns, MaxDepth, d)
		}
	}
	return nil
}

// Router homes keys by one map. Build it with New; it is immutable and
// safe for concurrent use.
type Router struct {
	version   int64
	names     []string
	seeds     []uint64  // per shard: the hash of its name
	weights   []float64 // per shard, > 0
	overrides []Override
	depth     map[string]int
}

// New validates m and returns its router.
func New(m *Map) (*Router, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	r := &Router{version: m.Version, overrides: slices.Clone(m.Overrides), depth: m.Depth}
	for _, s := range m.Shards {
		w := s.Weight
		if w == 0 {
			w = 1
		}
		r.names = append(r.names, s.Name)
		r.seeds = append(r.seeds, hashString(s.Name))
		r.weights = append(r.weights, w)
	}
	// Longest prefix first: the first match is the most specific.
	slices.SortStableFunc(r.overrides, func(a, b Override) int { return len(b.Prefix) - len(a.Prefix) })
	return r, nil
}

// Version is the map's version.
func (r *Router) Version() int64 { return r.version }

// Home is the shard key is homed to, and key's range. key must be a valid
// lock key (lockkey.Validate).
func (r *Router) Home(key string) (shard, rng string) {
	rng = r.Range(key)
	for _, o := range r.overrides {
		if strings.HasPrefix(key, o.Prefix) {
			return o.Shard, rng
		}
	}
	return r.names[r.pick(rng)], rng
}

// Range is key's range: its namespace and up to its namespace's depth of
// path segments below it, not counting its last segment, ending in "/".
func (r *Router) Range(key string) string {
	depth := DefaultDepth
	if d, ok := r.depth[lockkey.Namespace(key)]; ok {
		depth = d
	}
	end := strings.IndexByte(key, lockkey.Separator) // the namespace's "/"
	for range depth {
		next := strings.IndexByte(key[end+1:], lockkey.Separator)
		if next < 0 {
			break // what follows is the key's last segment
		}
		end += 1 + next
	}
	return key[:end+1]
}

// pick is weighted rendezvous hashing: each shard scores the range
// w / -ln(u), u uniform in (0, 1) from the range and the shard, and the
// highest score wins. A shard is chosen with probability w / sum(w), and
// adding a shard moves only ranges it now wins.
func (r *Router) pick(rng string) int {
	h := hashString(rng)
	best, bestScore := 0, math.Inf(-1)
	for i, seed := range r.seeds {
		u := (float64(mix(h^seed)>>11) + 0.5) / (1 << 53)
		if s := r.weights[i] / -math.Log(u); s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// hashString is 64-bit FNV-1a: stable across processes and releases, as
// homing must be.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix(h)
}

// mix is splitmix64's finalizer: every input bit affects every output bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
