package view

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

var at = golden.Now.Add(-50 * time.Minute)

func sample(enforcement string) *lockv1.ForceRelease {
	return &lockv1.ForceRelease{Id: "3f9c2a1b7d4e5f60", Key: "payments/ledger/42", Holder: "spiffe://example.org/ledger-writer",
		SessionId: 7587, HoldRevision: 912, Class: "payments/ledger-writes", Enforcement: enforcement,
		Requester: "spiffe://example.org/ops/alice", Reason: "INC-1234: holder wedged",
		HoldAcquiredAt: timestamppb.New(at), RequestedAt: timestamppb.New(at.Add(20 * time.Minute)),
		ExpiresAt: timestamppb.New(at.Add(80 * time.Minute))}
}

func TestPrintRequest(t *testing.T) {
	golden.AssertPrinted(t, "request-fenced", New(sample("fenced")))
	golden.AssertPrinted(t, "request-advisory", New(sample("advisory")))
	golden.AssertPrinted(t, "list", &List{Requests: []*Request{New(sample("fenced")), New(sample("advisory"))}})
	golden.AssertPrinted(t, "list-empty", &List{Requests: []*Request{}})
}

func TestWarningOnlyForUnfencedClasses(t *testing.T) {
	if Warning("fenced") != "" {
		t.Fatal("a fenced class got the two-writers warning")
	}
	for _, e := range []string{"advisory", "unknown"} {
		if w := Warning(e); w == "" {
			t.Fatalf("no warning for %s", e)
		}
	}
}
