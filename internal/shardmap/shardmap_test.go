package shardmap

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestRange(t *testing.T) {
	r := mustNew(t, &Map{Shards: []Shard{{Name: "e1"}}, Depth: map[string]int{"orders": 2}})
	tests := []struct{ key, want string }{
		{"payments/ledger/42", "payments/ledger/"},
		{"payments/ledger/42/refund", "payments/ledger/"},
		{"payments/x", "payments/"}, // the last segment is the entity itself
		{"orders/order/7/line/3", "orders/order/7/"},
		{"orders/order/7", "orders/order/"},
		{"orders/x", "orders/"},
	}
	for _, tt := range tests {
		if got := r.Range(tt.key); got != tt.want {
			t.Errorf("Range(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	two := []Shard{{Name: "e1"}, {Name: "e2"}}
	tests := []struct {
		name string
		m    Map
		want string // in the error; "" for valid
	}{
		{"valid", Map{Shards: two, Overrides: []Override{{Prefix: "big/", Shard: "e2"}}, Depth: map[string]int{"orders": 2}}, ""},
		{"no shards", Map{}, "shards: at least one"},
		{"unnamed", Map{Shards: []Shard{{}}}, "shards[0].name: required"},
		{"twice", Map{Shards: []Shard{{Name: "e1"}, {Name: "e1"}}}, `shards[1].name: "e1" appears twice`},
		{"negative weight", Map{Shards: []Shard{{Name: "e1", Weight: -1}}}, "shards[0].weight: must be a positive number"},
		{"NaN weight", Map{Shards: []Shard{{Name: "e1", Weight: math.NaN()}}}, "shards[0].weight"},
		{"override to an unknown shard", Map{Shards: two, Overrides: []Override{{Prefix: "big/", Shard: "e9"}}}, `overrides[0].shard: "e9" is not one of`},
		{"override prefix without its slash", Map{Shards: two, Overrides: []Override{{Prefix: "big", Shard: "e1"}}}, "overrides[0].prefix"},
		{"a prefix pinned twice", Map{Shards: two, Overrides: []Override{{Prefix: "big/", Shard: "e1"}, {Prefix: "big/", Shard: "e2"}}}, `overrides[1].prefix: "big/" is pinned twice`},
		{"depth too deep", Map{Shards: two, Depth: map[string]int{"orders": 9}}, `depth["orders"]: must be 1 to 4`},
		{"depth of no namespace", Map{Shards: two, Depth: map[string]int{"Orders!": 1}}, `depth["Orders!"]: not a namespace`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v; want ErrInvalid naming %q", err, tt.want)
			}
		})
	}
}

// keys are n generated keys, five to a range, over 50 namespaces: the
// shape of an estate where a range holds a handful of related keys.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		rid := i / 5
		out[i] = fmt.Sprintf("ns%d/r%d/k%d", rid%50, rid, i)
	}
	return out
}

func shards(n int) []Shard {
	s := make([]Shard, n)
	for i := range s {
		s[i] = Shard{Name: fmt.Sprintf("entity-%d", i+1)}
	}
	return s
}

func mustNew(t testing.TB, m *Map) *Router {
	t.Helper()
	r, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func homes(r *Router, ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i], _ = r.Home(k)
	}
	return out
}

// TestHomingMovesFewKeys is the property test: over 10^6 generated keys,
// adding shard N+1 moves 1/(N+1) of the keys (±10 %), all of them to the
// new shard; removing a shard moves only its keys; weights are honoured
// (±5 %); overrides win. It logs its figures (go test -v).
func TestHomingMovesFewKeys(t *testing.T) {
	ks := keys(1_000_000)
	ranges := map[string]bool{}
	r0 := mustNew(t, &Map{Shards: shards(1)})
	for _, k := range ks {
		ranges[r0.Range(k)] = true
	}
	t.Logf("%d keys in %d ranges", len(ks), len(ranges))

	for n := 2; n <= 8; n++ {
		before := homes(mustNew(t, &Map{Shards: shards(n)}), ks)
		after := homes(mustNew(t, &Map{Shards: shards(n + 1)}), ks)
		added := shards(n + 1)[n].Name
		moved := 0
		for i := range ks {
			if before[i] == after[i] {
				continue
			}
			moved++
			if after[i] != added {
				t.Fatalf("adding %s moved %s from %s to %s", added, ks[i], before[i], after[i])
			}
		}
		frac, want := float64(moved)/float64(len(ks)), 1/float64(n+1)
		t.Logf("adding shard %d to %d: %.4f of keys moved, ideal %.4f (%+.1f %%)", n+1, n, frac, want, 100*(frac/want-1))
		if math.Abs(frac/want-1) > 0.10 {
			t.Errorf("adding shard %d to %d moved %.4f of keys; want %.4f ± 10 %%", n+1, n, frac, want)
		}

		// Remove the first shard: only its keys move.
		rest := shards(n)[1:]
		without := homes(mustNew(t, &Map{Shards: rest}), ks)
		for i := range ks {
			if before[i] != without[i] && before[i] != "entity-1" {
				t.Fatalf("removing entity-1 from %d shards moved %s from %s", n, ks[i], before[i])
			}
		}
	}

	weights := []float64{1, 2, 3, 4}
	ws := shards(4)
	for i := range ws {
		ws[i].Weight = weights[i]
	}
	count := map[string]int{}
	for _, h := range homes(mustNew(t, &Map{Shards: ws}), ks) {
		count[h]++
	}
	for i, s := range ws {
		frac, want := float64(count[s.Name])/float64(len(ks)), weights[i]/10
		t.Logf("weight %v of 10: %.4f of keys, ideal %.4f (%+.1f %%)", weights[i], frac, want, 100*(frac/want-1))
		if math.Abs(frac/want-1) > 0.05 {
			t.Errorf("shard %s of weight %v homes %.4f of keys; want %.4f ± 5 %%", s.Name, weights[i], frac, want)
		}
	}

	plain := mustNew(t, &Map{Shards: shards(4)})
	pinned := mustNew(t, &Map{Shards: shards(4), Overrides: []Override{{Prefix: "ns7/", Shard: "entity-2"}, {Prefix: "ns7/r3/", Shard: "entity-4"}}})
	for _, k := range ks {
		got, _ := pinned.Home(k)
		want, _ := plain.Home(k)
		switch {
		case strings.HasPrefix(k, "ns7/r3/"):
			want = "entity-4" // the longer prefix wins
		case strings.HasPrefix(k, "ns7/"):
			want = "entity-2"
		}
		if got != want {
			t.Fatalf("with overrides, %s is homed to %s; want %s", k, got, want)
		}
	}
}

// BenchmarkHome is routing's cost per Acquire: one key homed by a map of
// 3 and of 10 shards with an override (the bound: 5 µs).
func BenchmarkHome(b *testing.B) {
	ks := keys(1 << 12)
	for _, n := range []int{3, 10} {
		r := mustNew(b, &Map{Shards: shards(n), Overrides: []Override{{Prefix: "big/", Shard: "entity-1"}}, Depth: map[string]int{"ns3": 2}})
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Home(ks[i&(len(ks)-1)])
				i++
			}
		})
	}
}
