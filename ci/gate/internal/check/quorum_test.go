package check

import (
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

func TestQuorumLossCheck(t *testing.T) {
	outage := history.Fault{Kind: KindQuorumLoss, Start: 100e9, End: 110e9}
	grant := func(kind history.Kind, key string, tok uint64, call, ret int64) history.Op {
		return history.Op{Kind: kind, Key: key, Token: tok, Outcome: history.Ok, Call: call, Return: ret}
	}
	open := []string{"gate/o0"}
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
		{"open key unprotected inside the outage", grant(history.Unprotected, "gate/o0", 0, 104e9, 104e9+1), ""},
		{"open key unprotected just after the outage", grant(history.Unprotected, "gate/o0", 0, 112e9, 112e9+1), ""},
		{"open key protected inside the outage", grant(history.Acquire, "gate/o0", 7, 104e9, 105e9), "an open class granted protected"},
		{"unprotected grant with a token", grant(history.Unprotected, "gate/o0", 7, 104e9, 105e9), "unprotected grant with token"},
		{"unprotected grant of a closed key", grant(history.Unprotected, "gate/k0", 0, 104e9, 105e9), "key of a closed class"},
		{"unprotected grant long before any outage", grant(history.Unprotected, "gate/o0", 0, 50e9, 51e9), "outside any outage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := checkQuorumLoss([]history.Op{tt.op}, []history.Fault{outage}, open)
			switch {
			case tt.want == "" && len(res.Details) > 0:
				t.Fatalf("violations %v, want none", res.Details)
			case tt.want != "" && (len(res.Details) == 0 || !strings.Contains(res.Details[0], tt.want)):
				t.Fatalf("violations %v, want the first to say %q", res.Details, tt.want)
			}
		})
	}
	if res := checkQuorumLoss([]history.Op{grant(history.Acquire, "gate/k0", 5, 101e9, 102e9)}, []history.Fault{{Kind: KindQuorumLoss, Start: 100e9, End: 110e9, Err: "kill failed"}}, open); len(res.Details) != 0 || res.Outages != 0 {
		t.Fatalf("a failed injection counted as an outage: %+v", res)
	}
}
