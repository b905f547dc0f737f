package class

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// owning is a class of namespace payments owning keys, nested in nested.
func owning(name string, line int, keys []string, nested ...string) *Class {
	return &Class{Namespace: "payments", Name: name, Keys: keys, NestedIn: nested, Source: "payments/classes.yaml", Line: line}
}

func TestCheckOwnership(t *testing.T) {
	tests := []struct {
		name    string
		classes []*Class
		// want: "class field: substring" per problem, in order; none when empty.
		want []string
	}{
		{"disjoint", []*Class{owning("a", 1, []string{"payments/a/"}), owning("b", 10, []string{"payments/b/", "payments/c/"})}, nil},
		{"prefixes that only share characters", []*Class{owning("a", 1, []string{"payments/led/"}), owning("b", 10, []string{"payments/ledger/"})}, nil},
		{"other namespaces may reuse a path", []*Class{owning("a", 1, []string{"payments/a/"}),
			{Namespace: "billing", Name: "a", Keys: []string{"billing/a/"}, Source: "billing/classes.yaml", Line: 1}}, nil},
		{"same prefix twice", []*Class{owning("a", 1, []string{"payments/ledger/"}), owning("b", 10, []string{"payments/x/", "payments/ledger/"})},
			[]string{`b spec.keys[1]: "payments/ledger/" is also claimed by LockClass a (payments/classes.yaml:1): a key has exactly one class`}},
		{"inner without nestedIn", []*Class{owning("a", 1, []string{"payments/"}), owning("b", 10, []string{"payments/ledger/"})},
			[]string{`b spec.keys[0]: "payments/ledger/" is inside "payments/", owned by LockClass a (payments/classes.yaml:1): keys under it would move to this class from a; if that is meant, say so with spec.nestedIn: [a]`}},
		{"outer added after an inner without nestedIn", []*Class{owning("b", 1, []string{"payments/ledger/"}), owning("a", 10, []string{"payments/"})},
			[]string{`a spec.keys[0]: "payments/" contains "payments/ledger/", owned by LockClass b (payments/classes.yaml:1): keys under "payments/ledger/" would stay with b; if that is meant, say so with spec.nestedIn: [a] on b`}},
		{"inner with nestedIn", []*Class{owning("a", 1, []string{"payments/"}), owning("b", 10, []string{"payments/ledger/"}, "a")}, nil},
		{"nested twice deep names the class it carves from", []*Class{owning("a", 1, []string{"payments/"}), owning("b", 10, []string{"payments/ledger/"}, "a"),
			owning("c", 20, []string{"payments/ledger/archive/"}, "b")}, nil},
		{"nested twice deep naming only the outermost", []*Class{owning("a", 1, []string{"payments/"}), owning("b", 10, []string{"payments/ledger/"}, "a"),
			owning("c", 20, []string{"payments/ledger/archive/"}, "a")},
			[]string{`c spec.keys[0]: "payments/ledger/archive/" is inside "payments/ledger/", owned by LockClass b (payments/classes.yaml:10): keys under it would move to this class from b`}},
		{"nestedIn a class that is not there", []*Class{owning("b", 10, []string{"payments/ledger/"}, "a")},
			[]string{`b spec.nestedIn[0]: names "a", which is not a LockClass of namespace payments`}},
		{"nestedIn a class that does not contain it", []*Class{owning("a", 1, []string{"payments/a/"}), owning("b", 10, []string{"payments/b/"}, "a")},
			[]string{`b spec.nestedIn[0]: names LockClass a (payments/classes.yaml:1), but none of this class's spec.keys is inside one of its: remove it`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := CheckOwnership(tt.classes)
			var got []string
			for _, p := range ps {
				require.Equal(t, RuleKeyOwnership, p.ID)
				name := strings.TrimPrefix(p.Object, "LockClass payments/")
				got = append(got, name+" "+p.Field+": "+p.Rule)
			}
			require.Len(t, got, len(tt.want), "%q", got)
			for i, w := range tt.want {
				require.Contains(t, got[i], w)
			}
		})
	}
}

func TestOwnerIsTheLongestPrefix(t *testing.T) {
	set := NewSet([]*Class{
		owning("all", 1, []string{"payments/"}),
		owning("ledger", 10, []string{"payments/ledger/", "payments/ledger-archive/"}, "all"),
		owning("hot", 20, []string{"payments/ledger/hot/"}, "ledger"),
		{Namespace: "billing", Name: "x", Keys: []string{"billing/x/"}},
	}, nil)
	tests := []struct{ key, class, prefix string }{
		{"payments/other", "all", "payments/"},
		{"payments/ledger/42", "ledger", "payments/ledger/"},
		{"payments/ledger-archive/1", "ledger", "payments/ledger-archive/"},
		{"payments/ledgerx/1", "all", "payments/"},
		{"payments/ledger/hot/1", "hot", "payments/ledger/hot/"},
		{"billing/x/1", "x", "billing/x/"},
		{"billing/y", "", ""},
		{"nowhere/y", "", ""},
	}
	for _, tt := range tests {
		c, ok := set.Owner(tt.key)
		if tt.class == "" {
			require.False(t, ok, tt.key)
			require.Empty(t, set.OwnedPrefix(tt.key))
			continue
		}
		require.True(t, ok, tt.key)
		require.Equal(t, tt.class, c.Name, tt.key)
		require.Equal(t, tt.prefix, set.OwnedPrefix(tt.key))
	}
}

func TestCheckOwnershipOfReportsOnlyTheClassUnderReview(t *testing.T) {
	others := []*Class{
		owning("a", 1, []string{"payments/a/"}),
		owning("b", 10, []string{"payments/a/"}), // a clash among the others: not c's
		owning("inner", 20, []string{"payments/all/inner/"}),
		{Namespace: "billing", Name: "x", Keys: []string{"billing/"}},
	}
	c := &Class{Namespace: "payments", Name: "all", Keys: []string{"payments/all/", "payments/a/"}}
	ps := CheckOwnershipOf(others, c)
	var got []string
	for _, p := range ps {
		require.Equal(t, "LockClass payments/all", p.Object)
		got = append(got, p.Field+": "+p.Rule)
	}
	require.Len(t, got, 3, "%q", got)
	require.Contains(t, got[0], `spec.keys[0]: "payments/all/" contains "payments/all/inner/", owned by LockClass inner`)
	require.Contains(t, got[1], `spec.keys[1]: "payments/a/" is also claimed by LockClass a`)
	require.Contains(t, got[2], `spec.keys[1]: "payments/a/" is also claimed by LockClass b`)

	// The class's own earlier version is not a clash.
	require.Empty(t, CheckOwnershipOf([]*Class{owning("all", 1, []string{"payments/all/"})}, &Class{Namespace: "payments", Name: "all", Keys: []string{"payments/all/"}}))
}

// BenchmarkOwner is the class lookup every Acquire makes, in a namespace
// of 100 classes (one nested): a key of the nested class (its prefix is
// the longest, found first) and one whose class's prefix is among the
// shortest (found after most of the others).
func BenchmarkOwner(b *testing.B) {
	var cs []*Class
	for i := range 100 {
		cs = append(cs, owning(fmt.Sprintf("c%d", i), i, []string{fmt.Sprintf("payments/area-%d/", i)}))
	}
	cs = append(cs, owning("hot", 200, []string{"payments/area-50/hot/"}, "c50"))
	set := NewSet(cs, nil)
	b.ReportAllocs()
	for _, k := range []struct{ key, class string }{{"payments/area-50/hot/order-42", "hot"}, {"payments/area-7/order-42", "c7"}} {
		b.Run(k.class, func(b *testing.B) {
			for b.Loop() {
				if c, ok := set.Owner(k.key); !ok || c.Name != k.class {
					b.Fatal(c, ok)
				}
			}
		})
	}
}
