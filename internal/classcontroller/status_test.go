package classcontroller

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/lockd-dev/lockd/internal/class"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// lockClass is the content of a LockClass as the API server serves it.
func lockClass(mutate func(spec map[string]any)) map[string]any {
	spec := map[string]any{"keys": []any{"payments/ledger/"}, "purpose": "correctness", "enforcement": "fenced",
		"ttl": "10s", "tier": "entity", "resource": "ledger-db", "resourceSchemaVersion": "3"}
	if mutate != nil {
		mutate(spec)
	}
	return map[string]any{"apiVersion": class.APIVersion, "kind": class.KindLockClass,
		"metadata": map[string]any{"name": "ledger", "namespace": "payments", "generation": int64(4), "resourceVersion": "17"},
		"spec":     spec}
}

// result is the content of a PauseTestResult of class ledger that ran at
// ranAt and expires at expires.
func result(name string, ranAt, expires time.Time, mutate func(spec map[string]any)) map[string]any {
	spec := map[string]any{"class": "ledger", "resource": "ledger-db", "resourceSchemaVersion": "3", "outcome": "pass",
		"ranAt": rfc(ranAt), "expires": rfc(expires), "tokens": map[string]any{"first": "5", "second": "6"}}
	if mutate != nil {
		mutate(spec)
	}
	return map[string]any{"apiVersion": class.APIVersion, "kind": class.KindPauseTestResult,
		"metadata": map[string]any{"name": name, "namespace": "payments"}, "spec": spec}
}

func withStatus(obj map[string]any, st class.ClassStatus) map[string]any {
	cond := st.Conditions[0]
	obj["status"] = map[string]any{"observedGeneration": st.ObservedGeneration, "fenced": st.Fenced, "fencedUntil": st.FencedUntil,
		"pauseTestResult": st.PauseTestResult, "conditions": []any{map[string]any{"type": cond.Type, "status": cond.Status,
			"observedGeneration": cond.ObservedGeneration, "lastTransitionTime": cond.LastTransitionTime, "reason": cond.Reason, "message": cond.Message}}}
	return obj
}

func TestTheStatusSaysWhetherACurrentPauseTestResultProvesTheClassFenced(t *testing.T) {
	day := 24 * time.Hour
	current := result("ledger-2026", now.Add(-day), now.Add(300*day), nil)
	tests := []struct {
		name      string
		class     map[string]any
		results   []map[string]any
		fenced    bool
		reason    string
		until     time.Time
		result    string
		inMessage string
	}{
		{name: "a current result", class: lockClass(nil), results: []map[string]any{current},
			fenced: true, reason: class.ReasonPauseTestCurrent, until: now.Add(300 * day), result: "payments/ledger-2026", inMessage: "proves ledger-db rejects"},
		{name: "no result", class: lockClass(nil),
			reason: class.ReasonNoPauseTest, inMessage: "lockctl fence-test --class ledger"},
		{name: "only another class's result", class: lockClass(nil),
			results: []map[string]any{result("other", now.Add(-day), now.Add(day), func(s map[string]any) { s["class"] = "other" })},
			reason:  class.ReasonNoPauseTest},
		{name: "an expired result", class: lockClass(nil),
			results: []map[string]any{result("old", now.Add(-400*day), now.Add(-35*day), nil)},
			reason:  class.ReasonPauseTestExpired, inMessage: "expired on"},
		{name: "a result at its expiry", class: lockClass(nil),
			results: []map[string]any{result("due", now.Add(-day), now, nil)},
			reason:  class.ReasonPauseTestExpired},
		{name: "a result for another schema version", class: lockClass(nil),
			results: []map[string]any{result("v2", now.Add(-day), now.Add(day), func(s map[string]any) { s["resourceSchemaVersion"] = "2" })},
			reason:  class.ReasonSchemaVersionChanged, inMessage: `tested schema version "2"`},
		{name: "a result for another resource", class: lockClass(nil),
			results: []map[string]any{result("elsewhere", now.Add(-day), now.Add(day), func(s map[string]any) { s["resource"] = "other-db" })},
			reason:  class.ReasonResourceMismatch},
		{name: "an invalid result is ignored", class: lockClass(nil),
			results: []map[string]any{result("bad", now.Add(-day), now.Add(day), func(s map[string]any) { s["outcome"] = "fail" })},
			reason:  class.ReasonNoPauseTest},
		{name: "the newest of two current results", class: lockClass(nil),
			results: []map[string]any{current, result("ledger-2026b", now.Add(-day/2), now.Add(364*day), nil)},
			fenced:  true, reason: class.ReasonPauseTestCurrent, until: now.Add(364 * day), result: "payments/ledger-2026b"},
		{name: "a current and an expired result", class: lockClass(nil),
			results: []map[string]any{result("old", now.Add(-400*day), now.Add(-35*day), nil), current},
			fenced:  true, reason: class.ReasonPauseTestCurrent, until: now.Add(300 * day), result: "payments/ledger-2026"},
		{name: "an advisory class", class: lockClass(func(s map[string]any) {
			s["enforcement"], s["riskOwner"], s["waiverExpires"], s["ttl"] = "advisory", "alice", "2027-06-01", "30s"
		}), results: []map[string]any{current}, reason: class.ReasonNotDeclaredFenced},
		{name: "a fenced class naming no resource", class: lockClass(func(s map[string]any) { delete(s, "resource") }),
			results: []map[string]any{current}, reason: class.ReasonNoResource},
		{name: "an invalid class", class: lockClass(func(s map[string]any) { s["ttl"] = "1s" }),
			results: []map[string]any{current}, reason: class.ReasonInvalid, inMessage: "spec.ttl: "},
		{name: "a class that does not decode", class: lockClass(func(s map[string]any) { s["keys"] = "payments/ledger/" }),
			results: []map[string]any{current}, reason: class.ReasonInvalid, inMessage: "spec.keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := statusFor(tt.class, tt.results, now)
			st := got.status
			require.Equal(t, int64(4), st.ObservedGeneration)
			require.Equal(t, tt.fenced, st.Fenced)
			require.Equal(t, tt.result, st.PauseTestResult)
			if tt.fenced {
				require.Equal(t, rfc(tt.until), st.FencedUntil)
				require.True(t, got.proof.Until.Equal(tt.until))
			} else {
				require.Empty(t, st.FencedUntil)
			}
			require.Len(t, st.Conditions, 1)
			c := st.Conditions[0]
			want := "False"
			if tt.fenced {
				want = "True"
			}
			require.Equal(t, class.ConditionFenced, c.Type)
			require.Equal(t, want, c.Status)
			require.Equal(t, tt.reason, c.Reason)
			require.Equal(t, int64(4), c.ObservedGeneration)
			require.Equal(t, rfc(now), c.LastTransitionTime, "no earlier status: the transition is now")
			require.NotEmpty(t, c.Message)
			require.Contains(t, c.Message, tt.inMessage)

			// What lockd reads back from it says the same.
			p := st.Proof(4)
			require.Equal(t, tt.fenced, p.HoldsAt(now))
			require.Equal(t, tt.reason, p.Reason)
		})
	}
}

func TestTheConditionKeepsItsTransitionTimeWhileItsStatusHolds(t *testing.T) {
	day := 24 * time.Hour
	earlier := now.Add(-7 * day)
	current := result("ledger-2026", now.Add(-day), now.Add(300*day), nil)
	v2 := result("v2", now.Add(-day), now.Add(day), func(s map[string]any) { s["resourceSchemaVersion"] = "2" })
	notFenced := class.StatusFor(class.FenceProof{Reason: class.ReasonNoPauseTest, Message: "none"}, 3)
	notFenced.Conditions[0].LastTransitionTime = rfc(earlier)
	fenced := class.StatusFor(class.FenceProof{Proven: true, Until: now.Add(day), Result: "payments/x", Reason: class.ReasonPauseTestCurrent, Message: "ok"}, 3)
	fenced.Conditions[0].LastTransitionTime = rfc(earlier)
	tests := []struct {
		name    string
		old     class.ClassStatus
		results []map[string]any
		want    string
	}{
		{"false, false for another reason", notFenced, []map[string]any{v2}, rfc(earlier)},
		{"false, then true", notFenced, []map[string]any{current}, rfc(now)},
		{"true, then true with another result", fenced, []map[string]any{current}, rfc(earlier)},
		{"true, then false", fenced, nil, rfc(now)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := statusFor(withStatus(lockClass(nil), tt.old), tt.results, now)
			require.Equal(t, tt.want, got.status.Conditions[0].LastTransitionTime)
		})
	}
}

func TestAStatusIsTheSameAtEveryReconcile(t *testing.T) {
	day := 24 * time.Hour
	results := []map[string]any{
		result("a", now.Add(-day), now.Add(300*day), nil),
		result("b", now.Add(-day), now.Add(300*day), nil),
		result("c", now.Add(-2*day), now.Add(299*day), nil),
	}
	first := statusFor(lockClass(nil), results, now)
	require.Equal(t, "payments/a", first.status.PauseTestResult, "equal runs: by name")
	// The same world, listed in another order, an hour later, with the
	// status written: nothing changes.
	again := statusFor(withStatus(lockClass(nil), first.status), []map[string]any{results[2], results[1], results[0]}, now.Add(time.Hour))
	require.Equal(t, first.status, again.status)
}

func TestALongMessageIsCutOnARuneBoundary(t *testing.T) {
	s := strings.Repeat("é", maxMessage) // two bytes each
	got := truncate(s, maxMessage)
	require.LessOrEqual(t, len(got), maxMessage)
	require.True(t, strings.HasSuffix(got, " …"))
	require.True(t, strings.HasPrefix(s, strings.TrimSuffix(got, " …")))
	require.Equal(t, "short", truncate("short", maxMessage))
}

func TestNewRefusesAConfigItCannotRun(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no client", Config{}},
		{"negative resync", Config{Client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Resync: -time.Second}},
		{"negative workers", Config{Client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Workers: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			require.ErrorIs(t, err, ErrConfig)
		})
	}
}
