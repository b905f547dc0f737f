package arbiter_test

import (
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestStatsPerVisibleClass(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	other, _ := env.Raw(t, "spiffe://test.local/other")
	sid := openSession(t, alice, 15*time.Second)
	osid := openSession(t, other, 15*time.Second)
	for range 3 {
		g, err := acquire(t.Context(), alice, sid, "t/s", "std", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: "t/s", Token: g.GetToken().GetValue()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acquire(t.Context(), other, osid, "other/s", "std", 0); err != nil {
		t.Fatal(err)
	}
	find := func(id, ns string) (uint64, bool) {
		for _, st := range env.Arbiter.Stats(identity.Workload(id)) {
			if st.Namespace == ns && st.Class == "std" {
				if st.P99 <= 0 || st.P50 > st.P99 {
					t.Fatalf("%s/std latency p50 %s p99 %s", ns, st.P50, st.P99)
				}
				return st.Grants, true
			}
		}
		return 0, false
	}
	if n, ok := find(lockdtest.Operator, "t"); !ok || n != 3 {
		t.Fatalf("operator sees t/std with %d grants (%v), want 3", n, ok)
	}
	if _, ok := find(lockdtest.Operator, "other"); !ok {
		t.Fatal("operator does not see other/std")
	}
	if _, ok := find(lockdtest.Alice, "other"); ok {
		t.Fatal("alice sees the statistics of a namespace she has no grant in")
	}
}
