package check

import (
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

func TestRevokeCheck(t *testing.T) {
	// Worker 0 holds gate/d/k1 (coord) and gate/k2 (entity); two operators
	// force-release gate/k2 with --revoke-session, answered at 20 s.
	force := history.Op{Worker: -1, Kind: history.Force, Key: "gate/k2", Token: tok(2, 11), Outcome: history.Ok, Call: 19e9, Return: 20e9,
		Session: 0x70, Revoke: true, Others: []history.Held{{Key: "gate/d/k1", Token: tok(1, 10)}}}
	release := func(out history.Outcome, call int64) history.Op {
		return history.Op{Worker: 0, Seq: 7, Kind: history.Release, Key: "gate/d/k1", Token: tok(1, 10), Outcome: out, Call: call, Return: call + 1e8}
	}
	notRevoking := force
	notRevoking.Revoke = false
	refused := force
	refused.Outcome = history.Fail
	tests := []struct {
		name string
		ops  []history.Op
		want string // a violation containing this; "" for none
	}{
		{"the other hold was gone when its holder released it", []history.Op{force, release(history.Fail, 21e9)}, ""},
		{"released before the approval answered: not the revoke's to end", []history.Op{force, release(history.Ok, 19.5e9)}, ""},
		{"released, and found, after the approval answered", []history.Op{force, release(history.Ok, 22e9)},
			`revoked session 112, which also held "gate/d/k1"`},
		{"a force-release that did not revoke ends only its hold", []history.Op{notRevoking, release(history.Ok, 22e9)}, ""},
		{"a refused force-release ends nothing", []history.Op{refused, release(history.Ok, 22e9)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := checkRevokes(tt.ops, splitClusterOf)
			switch {
			case tt.want == "" && len(res.Details) > 0:
				t.Fatalf("unexpected violations: %v", res.Details)
			case tt.want != "" && (len(res.Details) != 1 || !strings.Contains(res.Details[0], tt.want)):
				t.Fatalf("violations %v; want one containing %q", res.Details, tt.want)
			}
		})
	}
	if res := checkRevokes([]history.Op{force}, splitClusterOf); res.Revokes != 1 || res.Others != 1 || res.OtherCluster != 1 {
		t.Fatalf("counts = %+v; want 1 revoke, 1 other hold, on the other cluster", res)
	}
}
