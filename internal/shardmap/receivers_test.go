package shardmap

import (
	"fmt"
	"slices"
	"testing"
)

// TestReceiversCoverEveryMovedKey: for each kind of map change, every key
// whose home changes moves to a shard Receivers names, and a change that
// only adds or weighs up a shard names no other.
func TestReceiversCoverEveryMovedKey(t *testing.T) {
	base := &Map{Version: 1, Shards: shards(3), Overrides: []Override{{Prefix: "ns1/", Shard: "entity-1"}}}
	with := func(edit func(m *Map)) *Map {
		m := &Map{Version: 2, Shards: slices.Clone(base.Shards), Overrides: slices.Clone(base.Overrides)}
		edit(m)
		return m
	}
	tests := []struct {
		name string
		next *Map
		want []string // nil: any set that covers the moves
	}{
		{"add a shard", with(func(m *Map) { m.Shards = append(m.Shards, Shard{Name: "entity-4"}) }), []string{"entity-4"}},
		{"weigh a shard up", with(func(m *Map) { m.Shards[1].Weight = 3 }), []string{"entity-2"}},
		{"add two, weigh one up", with(func(m *Map) {
			m.Shards = append(m.Shards, Shard{Name: "entity-4"}, Shard{Name: "entity-5", Weight: 2})
			m.Shards[0].Weight = 2
		}), []string{"entity-1", "entity-4", "entity-5"}},
		{"pin a prefix", with(func(m *Map) { m.Overrides = append(m.Overrides, Override{Prefix: "ns2/", Shard: "entity-3"}) }), []string{"entity-3"}},
		{"re-point a pin", with(func(m *Map) { m.Overrides[0].Shard = "entity-2" }), []string{"entity-2"}},
		{"remove a shard", with(func(m *Map) { m.Shards = m.Shards[:2] }), []string{"entity-1", "entity-2"}},
		{"weigh a shard down", with(func(m *Map) { m.Shards[2].Weight = 0.5 }), []string{"entity-1", "entity-2", "entity-3"}},
		{"unpin a prefix", with(func(m *Map) { m.Overrides = nil }), []string{"entity-1", "entity-2", "entity-3"}},
		{"change a depth", with(func(m *Map) { m.Depth = map[string]int{"ns3": 2} }), []string{"entity-1", "entity-2", "entity-3"}},
	}
	ks := keys(100_000)
	for i := range 5000 {
		ks = append(ks, fmt.Sprintf("ns3/r%d/s%d/k", i%100, i)) // deeper keys, for the depth change
	}
	before := homes(mustNew(t, base), ks)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Receivers(base, tt.next)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Receivers = %v; want %v", got, tt.want)
			}
			moved := 0
			for i, h := range homes(mustNew(t, tt.next), ks) {
				if h != before[i] {
					moved++
					if !slices.Contains(got, h) {
						t.Fatalf("%s moved from %s to %s, which Receivers does not name", ks[i], before[i], h)
					}
				}
			}
			if moved == 0 {
				t.Fatalf("no key moved: the case tests nothing")
			}
		})
	}
	if got := Receivers(nil, base); !slices.Equal(got, []string{"entity-1", "entity-2", "entity-3"}) {
		t.Fatalf("Receivers from no map = %v; want every shard", got)
	}
}
