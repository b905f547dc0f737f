package class

import (
	"encoding/json"
	"testing"
	"time"
)

func TestParseObjectReadsOnlyWhatTheAuthorWrote(t *testing.T) {
	obj := map[string]any{
		"apiVersion": APIVersion, "kind": KindLockClass,
		"metadata": map[string]any{"name": "ledger", "namespace": "payments", "generation": int64(3), "uid": "u",
			"managedFields": []any{map[string]any{"manager": "kubectl"}}},
		"spec": map[string]any{"keys": []any{"payments/ledger/"}, "purpose": "correctness", "enforcement": "fenced",
			"ttl": "10s", "tier": "entity", "resource": "ledger-db"},
		"status": map[string]any{"fenced": true},
	}
	o, ps := ParseObject(obj)
	if len(ps) != 0 || !o.Valid || o.Class == nil {
		t.Fatalf("got %+v, %v", o, ps)
	}
	if o.Class.Ref() != "payments/ledger" || o.Class.TTL != 10*time.Second || o.Class.Source != "kubernetes:lockclasses/payments/ledger" {
		t.Fatalf("class %+v", o.Class)
	}

	obj["spec"].(map[string]any)["ttl"] = "1s"
	o, ps = ParseObject(obj)
	if o.Valid || len(ps) != 1 || ps[0].Field != "spec.ttl" || ps[0].File != "kubernetes:lockclasses/payments/ledger" {
		t.Fatalf("a 1s ttl: %+v, %v", o, ps)
	}
}

func TestClassStatusSaysWhatTheControllerProved(t *testing.T) {
	until := time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC)
	proven := FenceProof{Proven: true, Until: until, Result: "payments/ledger-1", Reason: ReasonPauseTestCurrent, Message: "ok"}
	refused := FenceProof{Reason: ReasonSchemaVersionChanged, Message: "schema changed"}
	roundTrip := func(st ClassStatus) map[string]any {
		data, err := json.Marshal(map[string]any{"status": st})
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	tests := []struct {
		name string
		st   ClassStatus
		gen  int64
		want FenceProof
	}{
		{"proven", StatusFor(proven, 4), 4, proven},
		{"refused", StatusFor(refused, 4), 4, refused},
		{"written for an older spec", StatusFor(proven, 3), 4, FenceProof{Reason: ReasonStatusStale}},
		{"fenced without an end", func() ClassStatus { st := StatusFor(proven, 4); st.FencedUntil = ""; return st }(), 4,
			FenceProof{Reason: ReasonNoStatus, Result: "payments/ledger-1"}},
		{"fenced without a condition", func() ClassStatus { st := StatusFor(proven, 4); st.Conditions = nil; return st }(), 4,
			FenceProof{Reason: ReasonNoStatus}},
		{"condition false", func() ClassStatus { st := StatusFor(proven, 4); st.Conditions[0].Status = "False"; return st }(), 4,
			FenceProof{Reason: ReasonPauseTestCurrent, Result: "payments/ledger-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ok := ClassStatusOf(roundTrip(tt.st))
			if !ok {
				t.Fatal("no status")
			}
			got := st.Proof(tt.gen)
			if got.Proven != tt.want.Proven || got.Reason != tt.want.Reason || !got.Until.Equal(tt.want.Until) || got.Result != tt.want.Result {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if got.Message == "" {
				t.Fatal("no message")
			}
		})
	}
	if _, ok := ClassStatusOf(map[string]any{}); ok {
		t.Fatal("a status from an object without one")
	}
}
