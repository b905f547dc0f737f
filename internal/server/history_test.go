package server

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/audit"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestHistoryProtoCarriesUnprotectedGrants: an unprotected grant's row goes
// on the wire with its flag, arbiter and spool sequence, and no token (its
// token is 0) even for an operator.
func TestHistoryProtoCarriesUnprotectedGrants(t *testing.T) {
	at := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	r := audit.Event{ClusterID: 0xabc, Epoch: 2, Revision: 90, Key: "jobs/a", Kind: audit.KindUnprotected, Class: "jobs/open",
		ObservedAt: at.Add(time.Hour), Holder: "spiffe://t/batch", Session: 42, AcquiredAt: at,
		Unprotected: true, Arbiter: "lockd-1", SpoolSeq: 1<<63 + 1}
	want := &lockv1.HistoryEvent{ClusterId: 0xabc, Epoch: 2, Revision: 90, Key: "jobs/a", Kind: "unprotected-grant", Class: "jobs/open",
		ObservedAt: timestamppb.New(at.Add(time.Hour)), Holder: "spiffe://t/batch", SessionId: 42, AcquiredAt: timestamppb.New(at),
		Unprotected: true, ArbiterId: "lockd-1", SpoolSeq: 1<<63 + 1}
	for _, operator := range []bool{true, false} {
		if diff := cmp.Diff(want, historyProto(r, operator), protocmp.Transform()); diff != "" {
			t.Errorf("operator %v (-want +got):\n%s", operator, diff)
		}
	}
	if e := historyProto(audit.Event{Kind: audit.KindGrant, Token: 5}, true); e.GetUnprotected() || e.GetArbiterId() != "" || e.GetSpoolSeq() != 0 {
		t.Errorf("a protected grant: %v", e)
	}
}

func TestValidateHistoryKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"payments/ledger/42", true},
		{"payments/ledger/", true},
		{"payments/", true}, // a namespace, as Inspect lists it
		{"", false},
		{"payments", false},
		{"/", false},
		{"Payments/", false},
		{"payments//", false},
	} {
		err := validateHistoryKey(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("validateHistoryKey(%q) = %v, want ok %v", tc.key, err, tc.ok)
		}
		if err != nil && !errors.Is(err, arbiter.ErrInvalid) {
			t.Errorf("validateHistoryKey(%q) = %v, want arbiter.ErrInvalid", tc.key, err)
		}
	}
}

// TestAKeysHistoryHasTheMovesOfItsRange: the moves of a range a key (or
// the prefix asked) is in join its history; moves of other ranges, and of
// the prefix itself (its own query finds those), do not.
func TestAKeysHistoryHasTheMovesOfItsRange(t *testing.T) {
	move := func(rev int64, rng string) audit.Event {
		return audit.Event{ClusterID: 1, Epoch: 1, Revision: rev, Key: rng, Kind: audit.KindMove}
	}
	moves := []audit.Event{move(10, "pay/"), move(10, "pay/x/"), move(11, "ship/"), move(12, "pay/xy/")}
	keys := func(rows []audit.Event) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.Key)
		}
		return out
	}
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{"pay/x/1", []string{"pay/", "pay/x/"}},
		{"pay/xy/1", []string{"pay/", "pay/xy/"}},
		{"pay/x/", []string{"pay/"}}, // the prefix's own query finds pay/x/ and pay/xy/... under it
		{"ship/1", []string{"ship/"}},
		{"other/1", nil},
	} {
		if got := keys(covering(moves, tc.key)); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: moves %v, want %v", tc.key, got, tc.want)
		}
	}
}
