package shardmap

import (
	"maps"
	"slices"
)

// Receivers are the shards of next that may be given ranges by replacing
// prev with next, derived from what changed, not by enumerating ranges
// (there is no list of every range): with rendezvous hashing a range only
// moves to a shard whose score rose against its old home's, so
//
//   - a shard added, or whose weight rose, may receive;
//   - a shard removed, or whose weight fell, gives its ranges to any other;
//   - an override added or re-pointed gives its prefix to its target, and
//     one removed gives it back to hashing (any shard);
//   - a namespace whose depth changed has new ranges (any shard).
//
// A token never goes backwards across a move only if every receiver's
// epoch is above every other shard's (the move controller checks it).
func Receivers(prev, next *Map) []string {
	all := func() []string {
		out := make([]string, 0, len(next.Shards))
		for _, s := range next.Shards {
			out = append(out, s.Name)
		}
		return out
	}
	if prev == nil {
		return all()
	}
	weight := func(m *Map) map[string]float64 {
		w := map[string]float64{}
		for _, s := range m.Shards {
			w[s.Name] = s.Weight
			if s.Weight == 0 {
				w[s.Name] = 1
			}
		}
		return w
	}
	pw, nw := weight(prev), weight(next)
	for name, w := range pw {
		if nw[name] < w { // removed (0) or lighter
			return all()
		}
	}
	if !maps.Equal(prev.Depth, next.Depth) {
		return all()
	}
	pinned := func(m *Map) map[string]string {
		o := map[string]string{}
		for _, ov := range m.Overrides {
			o[ov.Prefix] = ov.Shard
		}
		return o
	}
	po, no := pinned(prev), pinned(next)
	for prefix := range po {
		if _, ok := no[prefix]; !ok {
			return all()
		}
	}
	var out []string
	for name, w := range nw {
		if pwv, ok := pw[name]; !ok || w > pwv {
			out = append(out, name)
		}
	}
	for prefix, shard := range no {
		if po[prefix] != shard && !slices.Contains(out, shard) {
			out = append(out, shard)
		}
	}
	slices.Sort(out)
	return out
}
