package gate

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRestoresTakeTheEntityClusterThenTheCoordThenTheShards: with entity
// shards, the outages of a round still hit the entity cluster and then
// the coord cluster (each rebuild where its restore went), and the
// shards after them.
func TestRestoresTakeTheEntityClusterThenTheCoordThenTheShards(t *testing.T) {
	r := &run{clusters: []*etcdCluster{{name: CoordCluster}, {name: EntityCluster}, {name: Shard2}, {name: Shard3}}, hits: map[string]int{}}
	var got []string
	for _, k := range []string{KindRestore, KindStoreRebuild, KindQuorumLoss, KindRestore, KindStoreRebuild, KindQuorumLoss, KindRestore, KindStoreRebuild} {
		got = append(got, k+"@"+r.target(k).name)
	}
	want := []string{"restore@entity", "store-rebuild@entity", "quorum-loss@entity", "restore@coord", "store-rebuild@coord", "quorum-loss@coord",
		"restore@shard-2", "store-rebuild@shard-2"}
	if !slices.Equal(got, want) {
		t.Errorf("targets %v; want %v", got, want)
	}
}

// TestAMoveIsHeldToItsBound: a drain or a stragglers' wait longer than
// the bound plus MoveSlack plus the fault's own time fails the run; one
// within it does not.
func TestAMoveIsHeldToItsBound(t *testing.T) {
	tests := []struct {
		name string
		m    Move
		fail string
	}{
		{"drained within the bound", Move{Drain: 6 * time.Second, Bound: 6 * time.Second}, ""},
		{"drained at the limit", Move{Drain: 11 * time.Second, Bound: 6 * time.Second}, ""},
		{"drained past the limit", Move{Drain: 11*time.Second + time.Millisecond, Bound: 6 * time.Second}, "closed for its drain"},
		{"a fault's time allowed", Move{Drain: 20 * time.Second, Bound: 6 * time.Second, Allow: 10 * time.Second}, ""},
		{"stragglers past the limit", Move{Drain: time.Second, Settle: 12 * time.Second, Bound: 6 * time.Second, Stragglers: 1}, "stragglers kept"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &run{moves: []Move{tt.m}}
			var res MoveResult
			r.checkMoves(&res)
			switch {
			case tt.fail == "" && len(res.Details) > 0:
				t.Fatalf("details %v; want none", res.Details)
			case tt.fail != "" && (len(res.Details) != 1 || !strings.Contains(res.Details[0], tt.fail)):
				t.Fatalf("details %v; want one saying %q", res.Details, tt.fail)
			}
		})
	}
}

// TestEveryMoveKindAskedForMustBeInjected.
func TestEveryMoveKindAskedForMustBeInjected(t *testing.T) {
	asked := []string{KindRestore, KindShardMove, KindMapStall}
	if got := missingMoves(asked, map[string]int{KindShardMove: 2}); !slices.Equal(got, []string{KindMapStall}) {
		t.Errorf("missing %v; want [map-stall] (restore is not a move)", got)
	}
	if got := missingMoves(asked, map[string]int{KindShardMove: 1, KindMapStall: 1}); len(got) != 0 {
		t.Errorf("missing %v; want none", got)
	}
}
