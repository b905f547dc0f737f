package gate

import (
	"slices"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

func TestGrantsClosedCountsTheUnionInsideTheRun(t *testing.T) {
	s := int64(time.Second)
	tests := []struct {
		name   string
		faults []history.Fault
		want   time.Duration
	}{
		{"none", nil, 0},
		{"a fault without a window", []history.Fault{{Kind: KindLeaderIsolate, Start: 10 * s, End: 13 * s}}, 0},
		{"one window", []history.Fault{{Kind: KindRestore, Start: 10 * s, GrantsClosedUntil: 26 * s}}, 16 * time.Second},
		{"overlapping windows count once", []history.Fault{
			{Kind: KindRestore, Start: 10 * s, GrantsClosedUntil: 26 * s},
			{Kind: KindStoreRebuild, Start: 20 * s, GrantsClosedUntil: 30 * s},
		}, 20 * time.Second},
		{"clipped to the run", []history.Fault{{Kind: KindRestore, Start: 110 * s, GrantsClosedUntil: 130 * s}}, 10 * time.Second},
		{"a failed injection does not count", []history.Fault{{Kind: KindRestore, Start: 10 * s, GrantsClosedUntil: 26 * s, Err: "boom"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := grantsClosed(tt.faults, 0, 120*s); got != tt.want {
				t.Fatalf("grantsClosed = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestEveryRoundRebuildsRightAfterTheRestore(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{KindStoreRebuild, KindLeaderPause, KindRestore, KindTailerKill}, []string{KindLeaderPause, KindRestore, KindStoreRebuild, KindTailerKill}},
		{[]string{KindRestore, KindLeaderPause, KindStoreRebuild}, []string{KindRestore, KindStoreRebuild, KindLeaderPause}},
		{[]string{KindLeaderPause, KindStoreRebuild}, []string{KindLeaderPause, KindStoreRebuild}},
	} {
		if got := rebuildAfterRestore(slices.Clone(tc.in)); !slices.Equal(got, tc.want) {
			t.Errorf("rebuildAfterRestore(%v) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

// TestASplitRoundTakesEachClusterOut: with the tiers split, a round of the
// schedule restores and then rebuilds the entity cluster, and later the
// coord cluster, each rebuild right after its restore.
func TestASplitRoundTakesEachClusterOut(t *testing.T) {
	base := rebuildAfterRestore([]string{KindLeaderPause, KindStoreRebuild, KindRestore, KindTailerKill})
	for at := range len(base) + 1 {
		r := &run{clusters: []*etcdCluster{{name: CoordCluster}, {name: EntityCluster}}, hits: map[string]int{}}
		var got []string
		for _, k := range eachClusterOut(base, at) {
			if k == KindRestore || k == KindStoreRebuild {
				got = append(got, k+"@"+r.target(k).name)
			}
		}
		want := []string{"restore@entity", "store-rebuild@entity", "restore@coord", "store-rebuild@coord"}
		if !slices.Equal(got, want) {
			t.Errorf("at %d: %v; want %v", at, got, want)
		}
	}
}
