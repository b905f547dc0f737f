package check

import (
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

func splitClusterOf(key string, _ uint64) string {
	if strings.HasPrefix(key, "gate/d/") {
		return "coord"
	}
	return "entity"
}

func tok(epoch uint32, rev int64) uint64 { return uint64(epoch)<<48 | uint64(rev) }

func TestSplitCheck(t *testing.T) {
	// The entity cluster restored from 100 s to 110 s, grants closed until 112 s.
	restore := history.Fault{Kind: "restore", Cluster: "entity", Start: 100e9, End: 110e9, GrantsClosedUntil: 112e9, Epoch: 4}
	acquire := func(w int, key string, tk uint64, call, ret int64) history.Op {
		return history.Op{Worker: w, Kind: history.Acquire, Key: key, Token: tk, Outcome: history.Ok, Call: call, Return: ret}
	}
	lost := func(w int, key string, tk uint64, at int64) history.Op {
		return history.Op{Worker: w, Kind: history.Lost, Key: key, Token: tk, Outcome: history.Ok, Call: at, Return: at}
	}
	// Worker 0 holds a coord key and an entity key as the restore begins.
	straddle := []history.Op{acquire(0, "gate/d/k2", tok(1, 10), 90e9, 91e9), acquire(0, "gate/k0", tok(2, 11), 92e9, 93e9)}
	var coordGrants []history.Op
	for i := range 24 { // two a second over the 12 s window
		at := int64(100e9 + int64(i)*5e8)
		coordGrants = append(coordGrants, acquire(1, "gate/d/k3", tok(1, int64(20+i)), at, at+1e8))
	}
	tests := []struct {
		name    string
		ops     []history.Op
		records map[string][]uint32
		want    string // a violation containing this; "" for none
		fenced  int
	}{
		{"entity hold fenced, coord hold kept", append(append(straddle, lost(0, "gate/k0", tok(2, 11), 105e9)), coordGrants...), nil, "", 1},
		{"coord hold fenced in the entity's restore", append(append(straddle, lost(0, "gate/k0", tok(2, 11), 105e9), lost(0, "gate/d/k2", tok(1, 10), 106e9)), coordGrants...),
			nil, "coord hold of \"gate/d/k2\"", 0},
		{"coord granting under the floor", straddle, nil, "under the floor", 0},
		{"an epoch granted on both clusters", append(append(straddle, acquire(2, "gate/d/k3", tok(2, 40), 95e9, 96e9)), coordGrants...), nil, "epoch 2 is used by cluster coord and by cluster entity", 0},
		{"an epoch in one's records and the other's grants", append(straddle, coordGrants...), map[string][]uint32{"coord": {4}}, "epoch 4 is used", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Split(tt.ops, []history.Fault{restore}, SplitOptions{ClusterOf: splitClusterOf, Coord: "coord", Records: tt.records, Floor: 1})
			switch {
			case tt.want == "" && !res.Passed():
				t.Fatalf("violations %v, want none", res.Details)
			case tt.want != "" && !strings.Contains(strings.Join(res.Details, "\n"), tt.want):
				t.Fatalf("violations %v, want one containing %q", res.Details, tt.want)
			}
			if res.BlastWindows != 1 || res.Straddles != 1 || res.FencedOnFailedOnly != tt.fenced {
				t.Fatalf("windows %d, straddles %d, fenced on the failed cluster only %d; want 1, 1, %d", res.BlastWindows, res.Straddles, res.FencedOnFailedOnly, tt.fenced)
			}
		})
	}
}
