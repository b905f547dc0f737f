package server_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestHistoryStatsShowsOnlyTheCallersNamespaces: HistoryStats answers as
// ClassStats does. A caller sees the classes of the namespaces it has
// grants in and nothing of another namespace (not its class names, counts
// or longest hold); an operator sees every namespace.
func TestHistoryStatsShowsOnlyTheCallersNamespaces(t *testing.T) {
	const other = "spiffe://test.local/other" // granted other/ only
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	ctx := t.Context()
	for _, h := range []struct{ id, key string }{{lockdtest.Alice, "t/hstats"}, {other, "other/hstats"}} {
		l, err := env.Client(t, h.id).Acquire(ctx, h.key, "std", func(*client.Lock) {})
		if err != nil {
			t.Fatalf("%s acquires %s: %v", h.id, h.key, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	statsOf := func(id string) []string {
		t.Helper()
		raw, _ := env.Raw(t, id)
		resp, err := raw.HistoryStats(ctx, &lockv1.HistoryStatsRequest{})
		if err != nil {
			t.Fatalf("HistoryStats as %s: %v", id, err)
		}
		var refs []string
		for _, c := range resp.GetClasses() {
			refs = append(refs, c.GetNamespace()+"/"+c.GetClass())
		}
		slices.Sort(refs)
		return refs
	}
	both := []string{"other/std", "t/std"}
	lockdtest.WaitFor(t, 10*time.Second, "both namespaces' grants in the history", func() bool {
		return slices.Equal(statsOf(lockdtest.Operator), both)
	})

	for _, tc := range []struct {
		name, id string
		want     []string
	}{
		{"a caller granted only other/ sees other's classes", other, []string{"other/std"}},
		{"a caller granted only t/ sees t's classes", lockdtest.Alice, []string{"t/std"}},
		{"a caller granted nothing sees nothing", "spiffe://test.local/nobody", nil},
		{"an operator sees every namespace", lockdtest.Operator, both},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statsOf(tc.id); !slices.Equal(got, tc.want) {
				t.Errorf("HistoryStats as %s: classes %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}
