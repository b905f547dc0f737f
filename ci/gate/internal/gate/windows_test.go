package gate

import (
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// TestALongFaultWindowWithoutAGrantFailsTheFloor: grants are counted in
// the window of the fault they returned in; a window open WindowFloor or
// more with none is idle, a shorter one is not, and the time a restore
// closed to grants by design does not count as open.
func TestALongFaultWindowWithoutAGrantFailsTheFloor(t *testing.T) {
	s := int64(time.Second)
	grant := func(at int64) history.Op {
		return history.Op{Kind: history.Acquire, Outcome: history.Ok, Token: 1, Return: at * s}
	}
	ops := []history.Op{grant(1), grant(2), grant(25), grant(26),
		{Kind: history.Acquire, Outcome: history.Fail, Return: 12 * s}, // refused: not work
	}
	faults := []history.Fault{
		{Kind: "member-kill-leader", Target: "a", Start: 0, End: 3 * s},       // 2 grants
		{Kind: "arbiter-stop", Target: "lockd-0", Start: 10 * s, End: 19 * s}, // 9 s, none: idle
		{Kind: "leader-pause", Target: "b", Start: 19 * s, End: 24 * s},       // 5 s, none: short
		{Kind: "restore", Target: "c", Start: 30 * s, End: 31 * s, GrantsClosedUntil: 45 * s},
		{Kind: "worker-pause", Target: "w1", Start: 32 * s, End: 41 * s}, // closed by the restore
		{Kind: "arbiter-kill", Target: "lockd-1", Start: 50 * s, End: 60 * s, Err: "no such process"},
	}
	w := windowWork(ops, faults)
	if len(w.Idle) != 1 || !strings.HasPrefix(w.Idle[0], "arbiter-stop on lockd-0: no grant in 9s") {
		t.Fatalf("idle windows %q, want the arbiter-stop's alone", w.Idle)
	}
	got := w.String()
	for _, want := range []string{"member-kill-leader 0.67/s (2 in 3s)", "arbiter-stop 0.00/s (0 in 9s)", "leader-pause 0.00/s (0 in 5s)", "worker-pause 0.00/s (0 in 0s)"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "arbiter-kill") {
		t.Errorf("summary %q counts a fault that was not injected", got)
	}
}
