package authz

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
)

const (
	ledger    = "spiffe://example.org/ns/payments/sa/ledger"
	reporter  = "spiffe://example.org/ns/payments/sa/reporter"
	scheduler = "spiffe://example.org/ns/platform/sa/scheduler"
)

func testSet() *class.Set {
	return class.NewSet(
		[]*class.Class{{Namespace: "empty-grants", Name: "c"}},
		[]class.Grant{
			{Namespace: "payments", Name: "ledger", SPIFFEID: ledger, Prefixes: []string{"payments/ledger/", "payments/led/"}},
			{Namespace: "payments", Name: "ledger-acct", SPIFFEID: ledger, Prefixes: []string{"payments/ledger/acct/"}},
			{Namespace: "payments", Name: "reports", SPIFFEID: reporter, Prefixes: []string{"payments/reports/"}},
			{Namespace: "platform", Name: "all", SPIFFEID: scheduler, Prefixes: []string{"platform/"}},
			// Not inside its namespace: ignored.
			{Namespace: "platform", Name: "escape", SPIFFEID: scheduler, Prefixes: []string{"payments/"}},
		})
}

func TestMatch(t *testing.T) {
	a := New(testSet())
	tests := []struct {
		name      string
		id, key   string
		wantGrant string // grant name; empty means denied
	}{
		{"exact prefix plus one segment", ledger, "payments/ledger/x", "ledger"},
		{"deep key", ledger, "payments/ledger/a/b/c", "ledger"},
		{"nested prefix wins", ledger, "payments/ledger/acct/42", "ledger-acct"},
		{"nested prefix sibling", ledger, "payments/ledger/acctx", "ledger"},
		{"prefix itself is not a key", ledger, "payments/ledger/", ""},
		{"key equal to prefix without slash", ledger, "payments/ledger", ""},
		{"shorter granted prefix", ledger, "payments/led/x", "ledger"},
		{"prefix boundary", ledger, "payments/ledger-x", ""},
		{"prefix boundary deeper", ledger, "payments/ledgerx/y", ""},
		{"other identity's prefix", ledger, "payments/reports/q1", ""},
		{"second identity", reporter, "payments/reports/q1", "reports"},
		{"second identity outside", reporter, "payments/ledger/x", ""},
		{"namespace-wide grant", scheduler, "platform/leader/x", "all"},
		{"grant outside its namespace ignored", scheduler, "payments/ledger/x", ""},
		{"unknown identity", "spiffe://example.org/nobody", "payments/ledger/x", ""},
		{"empty identity", "", "payments/ledger/x", ""},
		{"absent namespace", ledger, "billing/ledger/x", ""},
		{"invalid key", ledger, "payments/ledger/../reports/x", ""},
		{"empty key", ledger, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, ok := a.Match(tt.id, tt.key)
			require.Equal(t, tt.wantGrant != "", ok)
			require.Equal(t, ok, a.Allow(tt.id, tt.key))
			if !ok {
				require.Nil(t, g)
				require.ErrorIs(t, a.Authorize(tt.id, tt.key), ErrDenied)
				return
			}
			require.Equal(t, tt.wantGrant, g.Name)
			require.Equal(t, tt.id, g.SPIFFEID)
			require.NoError(t, a.Authorize(tt.id, tt.key))
		})
	}
}

func TestDeniedMessage(t *testing.T) {
	a := New(testSet())
	for _, c := range []struct{ id, key string }{
		{ledger, "billing/x"}, {"spiffe://x/y", "payments/ledger/x"}, {ledger, "payments/reports/x"},
	} {
		err := a.Authorize(c.id, c.key)
		require.Equal(t, ErrDenied, err)
		require.NotContains(t, err.Error(), c.key)
		require.NotContains(t, err.Error(), c.id)
	}
}

func TestNamespacesOf(t *testing.T) {
	set := class.NewSet(nil, []class.Grant{
		{Namespace: "platform", Name: "a", SPIFFEID: ledger, Prefixes: []string{"platform/x/"}},
		{Namespace: "payments", Name: "a", SPIFFEID: ledger, Prefixes: []string{"payments/x/"}},
		{Namespace: "payments", Name: "b", SPIFFEID: ledger, Prefixes: []string{"payments/y/"}},
		{Namespace: "demo", Name: "a", SPIFFEID: reporter, Prefixes: []string{"demo/"}},
	})
	a := New(set)
	tests := []struct {
		id   string
		want []string
	}{
		{ledger, []string{"payments", "platform"}},
		{reporter, []string{"demo"}},
		{"spiffe://x/unknown", nil},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			require.Equal(t, tt.want, a.NamespacesOf(tt.id))
		})
	}
}

func TestRepositoryClasses(t *testing.T) {
	set, err := class.LoadDir("../../classes", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	a := New(set)
	require.True(t, a.Allow("spiffe://lockd.local/dev", "demo/anything"))
	require.True(t, a.Allow("spiffe://lockd.local/ns/payments/sa/ledger", "payments/ledger/acct-1"))
	require.False(t, a.Allow("spiffe://lockd.local/ns/payments/sa/ledger", "demo/x"))
	require.True(t, a.Allow("spiffe://lockd.local/ns/platform/sa/scheduler", "platform/leader/scheduler"))
}

// TestRadixAgainstBruteForce compares the tree with a linear scan over
// random prefixes and keys drawn from a small alphabet, so that edges are
// split in every way.
func TestRadixAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, 1+r.IntN(n))
		for i := range b {
			b[i] = "ab/"[r.IntN(3)]
		}
		return string(b)
	}
	for round := range 50 {
		root := &node{}
		var prefixes []string
		grants := map[string]*class.Grant{}
		for range 1 + r.IntN(40) {
			p := word(8)
			if _, dup := grants[p]; !dup {
				grants[p] = &class.Grant{Name: p}
				prefixes = append(prefixes, p)
			}
			root.insert(p, grants[p])
		}
		for range 200 {
			key := word(12)
			want := ""
			for _, p := range prefixes {
				if strings.HasPrefix(key, p) && len(p) > len(want) {
					want = p
				}
			}
			got := root.longest(key)
			if want == "" {
				require.Nil(t, got, "round %d key %q", round, key)
			} else {
				require.NotNil(t, got, "round %d key %q", round, key)
				require.Equal(t, want, got.Name, "round %d key %q", round, key)
			}
		}
	}
}

func TestAllowDoesNotAllocate(t *testing.T) {
	a := New(testSet())
	allocs := testing.AllocsPerRun(100, func() {
		if !a.Allow(ledger, "payments/ledger/acct/42") || a.Allow(ledger, "payments/reports/x") {
			t.Fatal("unexpected decision")
		}
	})
	require.Zero(t, allocs)
}

func bigSet(n int) (*class.Set, []string, []string) {
	grants := make([]class.Grant, 0, n)
	var ids, keys []string
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%50)
		id := fmt.Sprintf("spiffe://example.org/ns/%s/sa/svc%d", ns, i%1000)
		p := fmt.Sprintf("%s/svc%d/shard-%d/", ns, i%1000, i)
		grants = append(grants, class.Grant{Namespace: ns, Name: fmt.Sprintf("g%d", i), SPIFFEID: id, Prefixes: []string{p}})
		ids = append(ids, id)
		keys = append(keys, p+"entity-42")
	}
	return class.NewSet(nil, grants), ids, keys
}

func BenchmarkAllow10kGrants(b *testing.B) {
	set, ids, keys := bigSet(10_000)
	a := New(set)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if !a.Allow(ids[i], keys[i]) {
			b.Fatal("denied")
		}
		i++
		if i == len(ids) {
			i = 0
		}
	}
}

func BenchmarkAllow10kGrantsOneIdentity(b *testing.B) {
	grants := make([]class.Grant, 0, 10_000)
	for i := range 10_000 {
		grants = append(grants, class.Grant{Namespace: "payments", Name: fmt.Sprintf("g%d", i), SPIFFEID: ledger,
			Prefixes: []string{fmt.Sprintf("payments/tenant-%d/", i)}})
	}
	a := New(class.NewSet(nil, grants))
	b.ReportAllocs()
	for b.Loop() {
		if !a.Allow(ledger, "payments/tenant-7777/orders/42") {
			b.Fatal("denied")
		}
	}
}
