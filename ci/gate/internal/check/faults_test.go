package check

import (
	"testing"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// The model and check rules for the fault kinds added with the safety
// review: force-release, re-entrant acquires, lost locks and supervised
// children. Every rule has a history that must pass and one that must not.

func tokOp(w int, kind history.Kind, key string, tok uint64, call, ret int64) history.Op {
	op := mk(w, kind, key, history.Ok, call, ret)
	op.Token = tok
	return op
}

func TestForcedHolderMayCheckOnlyUntilTold(t *testing.T) {
	base := []history.Op{
		acq(1, "k", t1(10), history.Ok, 0, 10),
		tokOp(9, history.Force, "k", t1(10), 20, 30), // the gate forces w1's hold
		acq(2, "k", t1(40), history.Ok, 35, 45),      // another worker gets the key
		chk(1, "k", t1(10), history.Ok, 50, 55),      // w1 not told yet: legal
		tokOp(1, history.Lost, "k", t1(10), 60, 60),  // w1 told
		chk(2, "k", t1(40), history.Ok, 70, 75),
	}
	if res, err := Run(base, Options{}); err != nil || !res.Passed() || res.Forces != 1 || res.Losts != 1 {
		t.Fatalf("forced holder checking before it is told: %+v %v; want it to pass", res, err)
	}
	late := append(append([]history.Op(nil), base...), chk(1, "k", t1(10), history.Ok, 80, 85)) // after being told
	if res, _ := Run(late, Options{}); res.Passed() {
		t.Fatal("a forced holder's check after it was told passed; want a violation")
	}
	wrongForce := []history.Op{
		acq(1, "k", t1(10), history.Ok, 0, 10),
		rel(1, "k", t1(10), history.Ok, 12, 15),
		tokOp(9, history.Force, "k", t1(10), 20, 30), // nobody holds it: the force cannot have committed
	}
	if res, _ := Run(wrongForce, Options{}); res.Passed() {
		t.Fatal("a force of a released hold passed; want a violation")
	}
}

func TestReenterIsLegalOnlyForTheHolder(t *testing.T) {
	ok := []history.Op{
		acq(1, "k", t1(10), history.Ok, 0, 10),
		tokOp(1, history.Reenter, "k", t1(10), 12, 14),
		tokOp(1, history.Unhold, "k", t1(10), 15, 16),
	}
	if res, err := Run(ok, Options{}); err != nil || !res.Passed() || res.Reenters != 1 {
		t.Fatalf("re-entry of a held key: %+v %v", res, err)
	}
	revived := []history.Op{
		acq(1, "k", t1(10), history.Ok, 0, 10),
		rel(1, "k", t1(10), history.Ok, 12, 15),
		acq(2, "k", t1(20), history.Ok, 16, 18),
		tokOp(1, history.Reenter, "k", t1(10), 19, 20), // re-entered a released hold
	}
	if res, _ := Run(revived, Options{}); res.Passed() {
		t.Fatal("re-entry of a released hold after a newer grant passed; want a violation")
	}
}

func TestSupervisedChildGoneBeforeTheNextHolderWrites(t *testing.T) {
	hold := func(goneAt int64) []history.Op {
		return []history.Op{
			acq(1, "k", t1(10), history.Ok, 0, 10),
			tokOp(1001, history.Gone, "k", t1(10), goneAt, goneAt),
			acq(2, "k", t1(40), history.Ok, 35, 45),
			wr(2, "k", t1(40), 7, history.Ok, 50, 55),
		}
	}
	if res, err := Run(hold(30), Options{}); err != nil || !res.Passed() || res.GoneChecked != 1 {
		t.Fatalf("child gone before the next write: %+v %v", res, err)
	}
	res, err := Run(hold(60), Options{})
	if err != nil || res.Passed() || len(res.LateUnits) != 1 {
		t.Fatalf("child still running at the next holder's write: %+v %v; want a late unit", res, err)
	}
	// A paused worker's hold is left out: no client can stop it.
	paused := Options{Faults: []history.Fault{{Kind: "worker-pause", Target: "worker-1", Start: 20, End: 70}}}
	if res, err := Run(hold(60), paused); err != nil || !res.Passed() || res.GoneChecked != 0 {
		t.Fatalf("a paused worker's late child: %+v %v; want it left out", res, err)
	}
	// So is a hold released by force.
	forced := append(hold(60), tokOp(9, history.Force, "k", t1(10), 20, 30))
	if res, err := Run(forced, Options{}); err != nil || len(res.LateUnits) != 0 {
		t.Fatalf("a forced hold's late child: %+v %v; want it left out of the gone check", res, err)
	}
}

// TestARetriedReleaseThatFreedANewerGrantIsAViolation: a release of an
// earlier grant sent again while the same session holds the key anew is
// counted; refused, it passes; answered released, it is a violation.
func TestARetriedReleaseThatFreedANewerGrantIsAViolation(t *testing.T) {
	base := []history.Op{
		acq(1, "k", t1(10), history.Ok, 0, 10),
		rel(1, "k", t1(10), history.Ok, 12, 15),
		acq(1, "k", t1(20), history.Ok, 16, 18),
		tokOp(1, history.RetryRelease, "k", t1(10), 19, 21), // refused: a stale token
		rel(1, "k", t1(20), history.Ok, 22, 24),
	}
	if res, err := Run(base, Options{}); err != nil || !res.Passed() || res.RetriedReleases != 1 || res.RetriesRefused != 1 {
		t.Fatalf("a refused retried release: %+v %v; want it to pass, counted", res, err)
	}
	freed := append([]history.Op(nil), base...)
	freed[3].Outcome = history.Fail
	freed[3].Err = "the retried release of token 10 freed the session's newer grant (token 20)"
	if res, _ := Run(freed, Options{}); res.Passed() || res.RetriesRefused != 0 {
		t.Fatalf("a retried release that freed the newer grant: %+v; want a violation", res)
	}
}
