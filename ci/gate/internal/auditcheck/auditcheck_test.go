package auditcheck

import (
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/internal/audit"
)

func TestRunFindsWhatTheHistoryMisses(t *testing.T) {
	grant := history.Op{Worker: 1, Kind: history.Acquire, Key: "gate/k0", Token: 100, Outcome: history.Ok, Call: 50e9}
	release := history.Op{Worker: 1, Kind: history.Release, Key: "gate/k0", Token: 100, Outcome: history.Ok, Call: 51e9}
	force := history.Op{Worker: 999, Kind: history.Force, Key: "gate/k1", Token: 200, Outcome: history.Ok, Call: 52e9}
	complete := []audit.Event{
		{ClusterID: 1, Revision: 100, Key: "gate/k0", Kind: audit.KindGrant, Token: 100},
		{ClusterID: 1, Revision: 101, Key: "gate/k0", Kind: audit.KindRelease, EndedToken: 100},
		{ClusterID: 1, Revision: 200, Key: "gate/k1", Kind: audit.KindGrant, Token: 200},
		{ClusterID: 1, Revision: 201, Key: "gate/k1", Kind: audit.KindForceRelease, EndedToken: 200, Requester: "a", Approver: "b", Reason: "r"},
	}
	restore := history.Fault{Kind: "restore", Start: 53e9, End: 60e9}
	advance := audit.Event{ClusterID: 2, Epoch: 2, Revision: 9, Key: audit.EpochKey, Kind: audit.KindEpochAdvance, FromEpoch: 1, ToEpoch: 2}
	tests := []struct {
		name   string
		rows   []audit.Event
		faults []history.Fault
		want   string // a problem containing this; "" passes
	}{
		{"complete", complete, nil, ""},
		{"a grant missing", complete[1:], nil, "grant of gate/k0 (token 100) is not in the history"},
		{"a release recorded as an expiry", []audit.Event{complete[0], {ClusterID: 1, Revision: 101, Key: "gate/k0", Kind: audit.KindExpiry, EndedToken: 100}, complete[2], complete[3]}, nil, "the history says expiry"},
		{"a force without its approver", []audit.Event{complete[0], complete[1], complete[2], {ClusterID: 1, Revision: 201, Key: "gate/k1", Kind: audit.KindForceRelease, EndedToken: 200, Requester: "a", Reason: "r"}}, nil, "not recorded as one with its operators"},
		{"a token started twice", append(append([]audit.Event{}, complete...), audit.Event{ClusterID: 1, Revision: 300, Key: "gate/k0", Kind: audit.KindGrant, Token: 100}), nil, "token 100 started 2 holds"},
		{"a gap", append(append([]audit.Event{}, complete...), audit.Event{ClusterID: 1, Revision: 400, Kind: audit.KindGap, GapFrom: 300, GapTo: 400}), nil, "gap: revisions 300-400"},
		{"lost with a restore that followed within the window", append(append([]audit.Event{}, complete[2:]...), advance), []history.Fault{restore}, ""},
		{"a restore long after does not excuse it", append(append([]audit.Event{}, complete[2:]...), advance), []history.Fault{{Kind: "restore", Start: 80e9, End: 90e9}}, "is not in the history"},
		{"no tailer caught up before the rebuild: that store life may be lost", append(append([]audit.Event{}, complete[2:]...), advance),
			[]history.Fault{{Kind: "store-rebuild", Start: 80e9, End: 90e9, HistoryBehind: true}}, ""},
		{"a restore's advance missing", complete, []history.Fault{{Kind: "restore", Start: 80e9, End: 90e9}}, "1 restores and rebuilds advanced the epoch, the history has 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Run([]history.Op{grant, release, force}, tt.rows, tt.faults)
			if tt.want == "" {
				if !res.Passed() {
					t.Fatalf("problems: %v", res.Problems)
				}
				return
			}
			if res.Passed() || !strings.Contains(strings.Join(res.Problems, "\n"), tt.want) {
				t.Fatalf("problems %v; want one with %q", res.Problems, tt.want)
			}
		})
	}
}
