package check

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

func TestQuorumLossCheck(t *testing.T) {
	outage := history.Fault{Kind: KindQuorumLoss, Start: 100e9, End: 110e9}
	grant := func(kind history.Kind, key string, tok uint64, call, ret int64) history.Op {
		return history.Op{Kind: kind, Key: key, Token: tok, Outcome: history.Ok, Call: call, Return: ret}
	}
	open := []string{"gate/o/0"}
	tests := []struct {
		name string
		op   history.Op
		want string // a violation containing this; "" for none
	}{
		{"closed key granted before the outage", grant(history.Acquire, "gate/k0", 5, 99e9, 101e9), ""},
		{"closed key granted after the outage", grant(history.Acquire, "gate/k0", 5, 105e9, 111e9), ""},
		{"closed key granted inside the outage", grant(history.Acquire, "gate/k0", 5, 101e9, 102e9), "a closed class granted"},
		{"closed key refused inside the outage", history.Op{Kind: history.Acquire, Key: "gate/k0", Outcome: history.Fail, Call: 101e9, Return: 102e9}, ""},
		{"re-entry inside the outage", grant(history.Reenter, "gate/k0", 5, 101e9, 101e9), ""},
		{"open key unprotected inside the outage", grant(history.Unprotected, "gate/o/0", 0, 104e9, 104e9+1), ""},
		{"open key unprotected just after the outage", grant(history.Unprotected, "gate/o/0", 0, 112e9, 112e9+1), ""},
		{"open key protected inside the outage", grant(history.Acquire, "gate/o/0", 7, 104e9, 105e9), "an open class granted protected"},
		{"unprotected grant with a token", grant(history.Unprotected, "gate/o/0", 7, 104e9, 105e9), "unprotected grant with token"},
		{"unprotected grant of a closed key", grant(history.Unprotected, "gate/k0", 0, 104e9, 105e9), "key of a closed class"},
		{"unprotected grant long before any outage", grant(history.Unprotected, "gate/o/0", 0, 50e9, 51e9), "outside any outage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := checkQuorumLoss([]history.Op{tt.op}, Options{Faults: []history.Fault{outage}, OpenKeys: open})
			switch {
			case tt.want == "" && len(res.Details) > 0:
				t.Fatalf("violations %v, want none", res.Details)
			case tt.want != "" && (len(res.Details) == 0 || !strings.Contains(res.Details[0], tt.want)):
				t.Fatalf("violations %v, want the first to say %q", res.Details, tt.want)
			}
		})
	}
	failed := Options{Faults: []history.Fault{{Kind: KindQuorumLoss, Start: 100e9, End: 110e9, Err: "kill failed"}}, OpenKeys: open}
	if res := checkQuorumLoss([]history.Op{grant(history.Acquire, "gate/k0", 5, 101e9, 102e9)}, failed); len(res.Details) != 0 || res.Outages != 0 {
		t.Fatalf("a failed injection counted as an outage: %+v", res)
	}
}

// qop builds an op of worker w; its Seq is its call time.
func qop(w int, kind history.Kind, key string, tok uint64, out history.Outcome, call, ret int64) history.Op {
	if out == history.Unknown {
		ret = 0
	}
	return history.Op{Worker: w, Seq: call, Kind: kind, Key: key, Token: tok, Outcome: out, Call: call, Return: ret}
}

func byCall(ops ...history.Op) []history.Op {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// matches reports a test failure unless details has a line with want, or
// none at all when want is "".
func matches(t *testing.T, details []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(details) > 0:
		t.Fatalf("violations %v, want none", details)
	case want != "" && !strings.Contains(strings.Join(details, "\n"), want):
		t.Fatalf("violations %v, want one saying %q", details, want)
	}
}

func TestNoConsensusGrantOverAnUntoldUnprotectedHolder(t *testing.T) {
	// Quorum is lost from 100 s to 130 s. w1 is granted gate/o/0
	// unprotected at 106 s; it is told its lock ended at 140 s.
	outage := history.Fault{Kind: KindQuorumLoss, Start: 100e9, End: 130e9}
	const key = "gate/o/0"
	u := qop(1, history.Unprotected, key, 0, history.Ok, 105e9, 106e9)
	told := qop(1, history.Lost, key, 0, history.Ok, 140e9, 140e9)
	told.Err = "client: lock lost: an unprotected grant (made without quorum) ended"
	ownRelease := qop(1, history.UnprotectedRelease, key, 0, history.Ok, 135e9, 135e9+1e6)
	tests := []struct {
		name string
		ops  []history.Op
		want string
	}{
		{"a grant after the holder was told", []history.Op{u, told, qop(2, history.Acquire, key, t1(50), history.Ok, 141e9, 142e9)}, ""},
		{"a grant answered before the holder was told", []history.Op{u, told, qop(2, history.Acquire, key, t1(50), history.Ok, 132e9, 133e9)},
			`a consensus grant overlapped an unprotected holder that had not been told: w2 acquire "gate/o/0"`},
		{"a grant called in the outage commits no earlier than its end", []history.Op{u, told, qop(2, history.Acquire, key, t1(50), history.Ok, 104e9, 131e9)},
			"committed no earlier than 130.000s"},
		{"a grant that may have committed before the unprotected grant", []history.Op{u, told, qop(2, history.Acquire, key, t1(50), history.Ok, 99e9, 131e9)}, ""},
		{"a grant answered after the holder was told", []history.Op{u, told, qop(2, history.Acquire, key, t1(50), history.Ok, 132e9, 141e9)}, ""},
		{"the holder released it itself first", []history.Op{u, ownRelease, told, qop(2, history.Acquire, key, t1(50), history.Ok, 136e9, 137e9)}, ""},
		{"a grant before the holder released it", []history.Op{u, ownRelease, qop(2, history.Acquire, key, t1(50), history.Ok, 132e9, 134e9)}, "released by the worker at 135.000s"},
		{"no end recorded lasts to the end of the history", []history.Op{u, qop(2, history.Acquire, key, t1(50), history.Ok, 200e9, 201e9)}, "no end recorded"},
		{"a grant of another key", []history.Op{u, told, qop(2, history.Acquire, "gate/o/1", t1(50), history.Ok, 132e9, 133e9)}, ""},
		{"a refused or unknown acquire", []history.Op{u, told, qop(2, history.Acquire, key, 0, history.Fail, 132e9, 133e9), qop(3, history.Acquire, key, 0, history.Unknown, 132e9, 0)}, ""},
		{"the holder's own next grant after its lost", []history.Op{u, told, qop(1, history.Acquire, key, t1(50), history.Ok, 150e9, 151e9)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No OpenTTL: whether the lock stayed usable is another test's.
			res := checkQuorumLoss(byCall(tt.ops...), Options{Faults: []history.Fault{outage}, OpenKeys: []string{key, "gate/o/1"}})
			matches(t, res.Details, tt.want)
			if tt.want != "" && len(res.Overlaps) == 0 {
				t.Fatalf("a violation but no overlap recorded: %+v", res)
			}
		})
	}
}

func TestUnprotectedLocksStayUsableWhileTheOutageLasts(t *testing.T) {
	// Quorum is lost from 100 s to 135 s; the open TTL is 30 s, so a lock
	// granted at 106 s is due to be usable at 126 s, a check at 126.5 s
	// says so, and the outage lasts past 127 s.
	outage := history.Fault{Kind: KindQuorumLoss, Start: 100e9, End: 135e9}
	const key = "gate/o/0"
	u := qop(1, history.Unprotected, key, 0, history.Ok, 105e9, 106e9)
	check := func(at int64, out history.Outcome) history.Op {
		return qop(1, history.UnprotectedCheck, key, 0, out, at, at+1e6)
	}
	lost := func(at int64) history.Op {
		op := qop(1, history.Lost, key, 0, history.Ok, at, at)
		op.Err = "client: lock lost: local deadline passed without a successful keepalive"
		return op
	}
	release := func(at int64) history.Op { return qop(1, history.UnprotectedRelease, key, 0, history.Ok, at, at+1e6) }
	tests := []struct {
		name    string
		ops     []history.Op
		checked int
		want    string
	}{
		{"usable throughout", []history.Op{u, check(110e9, history.Ok), check(126.5e9, history.Ok), check(134e9, history.Ok), lost(140e9)}, 1, ""},
		{"no check after the due time", []history.Op{u, check(110e9, history.Ok), check(125e9, history.Ok), lost(140e9)}, 1, "no check at or after 126.000s"},
		{"a check after the outage does not count", []history.Op{u, check(110e9, history.Ok), check(136e9, history.Ok)}, 1, "no check at or after"},
		{"a failed check before the outage ended", []history.Op{u, check(120e9, history.Fail), check(126.5e9, history.Ok)}, 1, "said it was not usable"},
		{"lost before the outage ended", []history.Op{u, check(126.5e9, history.Ok), lost(130e9)}, 1, "it was lost at 130.000s, before quorum returned"},
		{"lost before the outage ended, recorded just after the worker's failed release", []history.Op{u, check(126.5e9, history.Ok),
			qop(1, history.UnprotectedRelease, key, 0, history.Fail, 130e9, 130e9+1e3), lost(130e9 + 2e3)}, 1, "before quorum returned"},
		{"a failed check after the outage is not this check's business", []history.Op{u, check(126.5e9, history.Ok), check(137e9, history.Fail), lost(138e9)}, 1, ""},
		{"released by the worker before it was due", []history.Op{u, check(110e9, history.Ok), release(120e9)}, 0, ""},
		{"released by the worker after it was due, with a check", []history.Op{u, check(126.5e9, history.Ok), release(128e9)}, 1, ""},
		{"granted too late in the outage to be due before its end", []history.Op{qop(1, history.Unprotected, key, 0, history.Ok, 113e9, 114.5e9)}, 0, ""},
		{"granted after the outage", []history.Op{qop(1, history.Unprotected, key, 0, history.Ok, 136e9, 137e9)}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := checkQuorumLoss(byCall(tt.ops...), Options{Faults: []history.Fault{outage}, OpenKeys: []string{key}, OpenTTL: 30 * time.Second})
			matches(t, res.Details, tt.want)
			if res.CheckedUsable != tt.checked || len(res.CheckedUsablePerOutage) != 1 || res.CheckedUsablePerOutage[0] != tt.checked {
				t.Fatalf("checked %d (per outage %v), want %d", res.CheckedUsable, res.CheckedUsablePerOutage, tt.checked)
			}
		})
	}
}

func TestAcquireNamingAnotherClassIsRefused(t *testing.T) {
	outage := history.Fault{Kind: KindQuorumLoss, Start: 100e9, End: 130e9}
	reload := history.Fault{Kind: "class-reload", Target: "worker-2", Start: 50e9, End: 55e9}
	mismatch := func(out history.Outcome, reason string, tok uint64, call, ret int64) history.Op {
		op := qop(2, history.Mismatch, "gate/k0", tok, out, call, ret)
		op.Class, op.Reason = "gate/cache", reason
		return op
	}
	tests := []struct {
		name            string
		op              history.Op
		inside, outside int
		want            string
	}{
		{"refused without quorum", mismatch(history.Ok, "CLASS_MISMATCH", 0, 110e9, 110.1e9), 1, 0, ""},
		{"refused with quorum", mismatch(history.Ok, "CLASS_MISMATCH", 0, 20e9, 20.1e9), 0, 1, ""},
		{"refused across the outage's start counts as neither", mismatch(history.Ok, "CLASS_MISMATCH", 0, 99.9e9, 100.1e9), 0, 0, ""},
		{"unknown", mismatch(history.Unknown, "", 0, 110e9, 0), 0, 0, ""},
		{"granted unprotected without quorum", mismatch(history.Fail, "", 0, 110e9, 110.1e9), 0, 0, `w2 asked for "gate/k0" naming class gate/cache (op 110000000000, while two members were stopped) and was granted token 0:0`},
		{"granted with quorum", mismatch(history.Fail, "", t1(9), 20e9, 20.1e9), 0, 0, "with quorum) and was granted token 1:9"},
		{"refused for another reason", mismatch(history.Fail, "HELD", 0, 20e9, 23e9), 0, 0, "was refused with HELD"},
		{"denied while a class-reload removed the worker's grant", mismatch(history.Fail, "DENIED", 0, 52e9, 52.1e9), 0, 0, ""},
		{"denied otherwise", mismatch(history.Fail, "DENIED", 0, 70e9, 70.1e9), 0, 0, "was refused with DENIED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := checkQuorumLoss([]history.Op{tt.op}, Options{Faults: []history.Fault{outage, reload}, OpenKeys: []string{"gate/o/0"}, OpenTTL: 30 * time.Second})
			matches(t, res.Details, tt.want)
			if res.MismatchesInside != tt.inside || res.MismatchesOutside != tt.outside {
				t.Fatalf("inside %d outside %d, want %d and %d", res.MismatchesInside, res.MismatchesOutside, tt.inside, tt.outside)
			}
		})
	}
}

// TestQuorumLossOfOneClusterHoldsOnlyItsKeys: with the tiers split, a
// closed key of the cluster that kept quorum may be granted in the other
// one's outage; a closed key of the failed cluster may not.
func TestQuorumLossOfOneClusterHoldsOnlyItsKeys(t *testing.T) {
	outage := history.Fault{Kind: KindQuorumLoss, Cluster: "entity", Start: 100e9, End: 110e9}
	clusterOf := func(key string, _ uint64) string {
		if strings.HasPrefix(key, "gate/d/") {
			return "coord"
		}
		return "entity"
	}
	ops := []history.Op{
		{Kind: history.Acquire, Key: "gate/d/k2", Token: 5, Outcome: history.Ok, Call: 101e9, Return: 102e9},
		{Kind: history.Acquire, Key: "gate/k0", Token: 6, Outcome: history.Ok, Call: 103e9, Return: 104e9},
	}
	res := checkQuorumLoss(ops, Options{Faults: []history.Fault{outage}, ClusterOf: clusterOf})
	if res.Inside != 1 || len(res.Details) != 1 || !strings.Contains(res.Details[0], `"gate/k0"`) {
		t.Fatalf("inside %d, violations %v; want only gate/k0's grant, inside the entity cluster's outage", res.Inside, res.Details)
	}
	// And the other way round: a session that exists may be granted an
	// entity key while the coord cluster has no quorum.
	outage.Cluster = "coord"
	res = checkQuorumLoss(ops, Options{Faults: []history.Fault{outage}, ClusterOf: clusterOf})
	if res.Inside != 1 || len(res.Details) != 1 || !strings.Contains(res.Details[0], `"gate/d/k2"`) {
		t.Fatalf("inside %d, violations %v; want only gate/d/k2's grant, inside the coord cluster's outage", res.Inside, res.Details)
	}
}
