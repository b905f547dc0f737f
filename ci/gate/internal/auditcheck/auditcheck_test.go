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
	restore := history.Fault{Kind: "restore", Start: 53e9, End: 60e9, Epoch: 2}
	advance := audit.Event{ClusterID: 2, Epoch: 2, Revision: 9, Key: audit.EpochKey, Kind: audit.KindEpochAdvance, FromEpoch: 1, ToEpoch: 2}
	first := audit.Event{ClusterID: 1, Epoch: 1, Revision: 2, Key: audit.EpochKey, Kind: audit.KindEpochAdvance, FromEpoch: 0, ToEpoch: 1}
	rebuilt := audit.Event{ClusterID: 1, Epoch: 3, Revision: 3, Key: audit.EpochKey, Kind: audit.KindEpochAdvance, FromEpoch: 0, ToEpoch: 3}
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
		// Group commit: keys granted in one batch share a token.
		{"one token on two keys (one batch)", append(append([]audit.Event{}, complete...), audit.Event{ClusterID: 1, Revision: 100, Key: "gate/k9", Kind: audit.KindGrant, Token: 100}), nil, ""},
		{"another key's grant with the token does not stand in for a missing one", append([]audit.Event{{ClusterID: 1, Revision: 100, Key: "gate/k9", Kind: audit.KindGrant, Token: 100}}, complete[1:]...), nil,
			"grant of gate/k0 (token 100) is not in the history"},
		{"another key's release with the token does not stand in for a missing one", []audit.Event{complete[0], {ClusterID: 1, Revision: 101, Key: "gate/k9", Kind: audit.KindRelease, EndedToken: 100}, complete[2], complete[3]}, nil,
			"release of gate/k0 (token 100) is not in the history"},
		{"a gap", append(append([]audit.Event{}, complete...), audit.Event{ClusterID: 1, Revision: 400, Kind: audit.KindGap, GapFrom: 300, GapTo: 400}), nil, "gap: revisions 300-400"},
		{"lost with a restore that followed within the window", append(append([]audit.Event{}, complete[2:]...), advance), []history.Fault{restore}, ""},
		{"a restore long after does not excuse it", append(append([]audit.Event{}, complete[2:]...), advance), []history.Fault{{Kind: "restore", Start: 80e9, End: 90e9, Epoch: 2}}, "is not in the history"},
		{"no tailer caught up before the rebuild: that store life may be lost", append(append([]audit.Event{}, complete[2:]...), advance),
			[]history.Fault{{Kind: "store-rebuild", Start: 80e9, End: 90e9, HistoryBehind: true, Epoch: 2}}, ""},
		{"a restore's advance missing", complete, []history.Fault{{Kind: "restore", Start: 80e9, End: 90e9, Epoch: 2}}, "the restore at +0.0s advanced the epoch to 2; the history has no advance to it"},
		// The gate once counted advances: the store's first epoch stood in
		// for a restore's advance that the history missed.
		{"the store's first epoch does not stand in for a restore's advance", append(append([]audit.Event{}, complete...), first),
			[]history.Fault{{Kind: "restore", Start: 80e9, End: 90e9, Epoch: 2}}, "advanced the epoch to 2; the history has no advance to it"},
		{"an advance lost with the store life a rebuild destroyed before any tailer caught up", append(append([]audit.Event{}, complete...), first, rebuilt),
			[]history.Fault{{Kind: "restore", Start: 80e9, End: 90e9, Epoch: 2}, {Kind: "store-rebuild", Start: 92e9, End: 95e9, Epoch: 3, HistoryBehind: true}}, ""},
		{"a rebuild after the history caught up does not excuse a missing advance", append(append([]audit.Event{}, complete...), first, rebuilt),
			[]history.Fault{{Kind: "restore", Start: 80e9, End: 90e9, Epoch: 2}, {Kind: "store-rebuild", Start: 92e9, End: 95e9, Epoch: 3}}, "the restore at +0.0s advanced the epoch to 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Run([]history.Op{grant, release, force}, tt.rows, tt.faults, nil)
			wantProblem(t, res, tt.want)
		})
	}
}

func TestARevokedSessionsOtherHoldsAreForcedNotExpired(t *testing.T) {
	// Session 7 holds gate/k1 (token 200) and gate/k3 (token 300). The
	// operators force gate/k1's hold and revoke the session, which ends
	// gate/k3's hold too, a revision later.
	force := history.Op{Worker: 999, Kind: history.Force, Key: "gate/k1", Token: 200, Outcome: history.Ok, Call: 52e9, Session: 7, Revoke: true}
	grants := []audit.Event{
		{ClusterID: 1, Revision: 200, Key: "gate/k1", Kind: audit.KindGrant, Token: 200, Session: 7},
		{ClusterID: 1, Revision: 150, Key: "gate/k3", Kind: audit.KindGrant, Token: 300, Session: 7},
		{ClusterID: 1, Revision: 201, Key: "gate/k1", Kind: audit.KindForceRelease, EndedToken: 200, EndedSession: 7, Requester: "a", Approver: "b", Reason: "r"},
	}
	ended := func(kind audit.Kind, rev int64, operators bool) audit.Event {
		r := audit.Event{ClusterID: 1, Revision: rev, Key: "gate/k3", Kind: kind, EndedToken: 300, EndedSession: 7}
		if operators {
			r.Requester, r.Approver, r.Reason = "a", "b", "r"
		}
		return r
	}
	withOther := force
	withOther.Others = []history.Held{{Key: "gate/k5", Token: 500}}
	onOther := func(kind audit.Kind, operators bool) audit.Event {
		r := audit.Event{ClusterID: 2, Revision: 9, Key: "gate/k5", Kind: kind, EndedToken: 500, EndedSession: 0x70}
		if operators {
			r.Requester, r.Approver, r.Reason = "a", "b", "r"
		}
		return r
	}
	tests := []struct {
		name    string
		force   history.Op
		end     audit.Event
		revoked int
		want    string // a problem containing this; "" passes
	}{
		{"forced at the revoke", force, ended(audit.KindForceRelease, 202, true), 1, ""},
		{"recorded as an expiry at the revoke", force, ended(audit.KindExpiry, 202, false), 1,
			"revoked session 7, which ended its hold of gate/k3 (token 300); the history says expiry gate/k3 at 1/0/202"},
		{"forced without the operators", force, ended(audit.KindForceRelease, 202, false), 1, "the history says force-release gate/k3"},
		{"released by its holder before the revoke", force, ended(audit.KindRelease, 202, false), 0, ""},
		{"ended before the force-release", force, ended(audit.KindExpiry, 180, false), 0, ""},
		{"a force-release that did not revoke: a later expiry is an expiry", func() history.Op { f := force; f.Revoke = false; return f }(),
			ended(audit.KindExpiry, 400, false), 0, ""},
		// Session 7 held gate/k5 (token 500) on another cluster, where its
		// lease stands for it: the revoke ends that lease too, and records
		// why there.
		{"its hold on another cluster forced by the revoke", withOther, onOther(audit.KindForceRelease, true), 1, ""},
		{"its hold on another cluster left to lapse, an expiry", withOther, onOther(audit.KindExpiry, false), 1,
			"which ended its hold of gate/k5 (token 500); the history says expiry gate/k5 at 2/0/9"},
		{"its hold on another cluster released by its holder first", withOther, onOther(audit.KindRelease, false), 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Run([]history.Op{tt.force}, append(append([]audit.Event{}, grants...), tt.end), nil, nil)
			if res.RevokedHolds != tt.revoked {
				t.Fatalf("revoked holds checked: %d, want %d", res.RevokedHolds, tt.revoked)
			}
			wantProblem(t, res, tt.want)
		})
	}
}

// TestAHoldThatEndedWithItsLeaseIsNotRecordedAsReleased: the history once
// recorded the holds an entity cluster's session lease took with it (an
// expiry, a close, a revoke) as releases; a hold recorded released must
// have been released by its holder.
func TestAHoldThatEndedWithItsLeaseIsNotRecordedAsReleased(t *testing.T) {
	grant := history.Op{Worker: 2, Kind: history.Acquire, Key: "gate/k2", Token: 300, Outcome: history.Ok, Call: 50e9}
	release := func(out history.Outcome, err string) history.Op {
		return history.Op{Worker: 2, Kind: history.Release, Key: "gate/k2", Token: 300, Outcome: out, Err: err, Call: 60e9}
	}
	row := func(kind audit.Kind) []audit.Event {
		return []audit.Event{{ClusterID: 1, Revision: 10, Key: "gate/k2", Kind: audit.KindGrant, Token: 300},
			{ClusterID: 1, Revision: 11, Key: "gate/k2", Kind: kind, EndedToken: 300}}
	}
	tests := []struct {
		name string
		ops  []history.Op
		rows []audit.Event
		want string
	}{
		{"released by its holder", []history.Op{grant, release(history.Ok, "")}, row(audit.KindRelease), ""},
		{"a release whose answer was lost", []history.Op{grant, release(history.Unknown, "deadline exceeded")}, row(audit.KindRelease), ""},
		{"lockd answered not held: a retry of a release that committed", []history.Op{grant, release(history.Fail, "")}, row(audit.KindRelease), ""},
		{"an unhold of a re-entrant hold", []history.Op{grant, {Worker: 2, Kind: history.Unhold, Key: "gate/k2", Token: 300, Outcome: history.Ok, Err: "x", Call: 60e9}}, row(audit.KindRelease), ""},
		{"its deadline passed, the client did not send the release: an expiry", []history.Op{grant, release(history.Fail, "lock deadline passed")}, row(audit.KindExpiry), ""},
		{"the same recorded as a release", []history.Op{grant, release(history.Fail, "lock deadline passed")}, row(audit.KindRelease),
			"worker 2's hold of gate/k2 (token 300) is in the history as released"},
		{"never released, recorded as handed over", []history.Op{grant}, row(audit.KindHandoff), "the worker never released it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Run(tt.ops, tt.rows, nil, nil)
			wantProblem(t, res, tt.want)
		})
	}
}

// wantProblem fails t unless res has a problem containing want, or, with
// want empty, none.
func wantProblem(t *testing.T, res Result, want string) {
	t.Helper()
	if want == "" {
		if !res.Passed() {
			t.Fatalf("problems: %v", res.Problems)
		}
		return
	}
	if res.Passed() || !strings.Contains(strings.Join(res.Problems, "\n"), want) {
		t.Fatalf("problems %v; want one with %q", res.Problems, want)
	}
}
