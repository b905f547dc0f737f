package pausetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
)

func TestResultYAMLRoundTrip(t *testing.T) {
	ranAt := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	res := Result{
		Namespace: "payments", Class: "ledger-writes", Resource: "ledger-db", ResourceSchemaVersion: "3",
		RanAt: ranAt, FirstToken: 281474976710700, SecondToken: 1<<63 + 5,
	}
	require.Equal(t, "pausetest-ledger-writes.yaml", res.FileName())
	require.Equal(t, ranAt.Add(class.PauseTestValidity), res.Expires())

	f := class.Parse("payments/"+res.FileName(), res.YAML(), "payments", time.Time{})
	require.Empty(t, f.Problems, "%s", res.YAML())
	require.Len(t, f.Objects, 1)
	require.True(t, f.Objects[0].Valid)
	pt := f.Objects[0].PauseTest
	require.NotNil(t, pt)
	require.Equal(t, class.PauseTest{
		Namespace: "payments", Name: "ledger-writes", Class: "ledger-writes", Resource: "ledger-db",
		ResourceSchemaVersion: "3", Outcome: class.PauseTestOutcomePass,
		RanAt: ranAt, Expires: ranAt.Add(class.PauseTestValidity),
		FirstToken: "281474976710700", SecondToken: "9223372036854775813",
		Source: "payments/pausetest-ledger-writes.yaml", Line: pt.Line,
	}, *pt)

	c := &class.Class{Namespace: "payments", Name: "ledger-writes", Enforcement: class.EnforcementFenced, Resource: "ledger-db", ResourceSchemaVersion: "3"}
	got, why := class.CurrentPauseTest(c, []class.PauseTest{*pt}, ranAt.Add(24*time.Hour))
	require.Empty(t, why)
	require.Equal(t, pt, got)
	_, why = class.CurrentPauseTest(c, []class.PauseTest{*pt}, ranAt.Add(class.PauseTestValidity))
	require.Contains(t, why, "expired")
}

func TestResultYAMLQuotesStrings(t *testing.T) {
	// An empty schema version and a version that YAML would read as a
	// number both stay strings.
	for _, v := range []string{"", "3", "1.10", "true"} {
		res := Result{Namespace: "t", Class: "fast", Resource: "test-db", ResourceSchemaVersion: v,
			RanAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), FirstToken: 1, SecondToken: 2}
		f := class.Parse("t/x.yaml", res.YAML(), "t", time.Time{})
		require.Empty(t, f.Problems, "%q", v)
		require.Equal(t, v, f.Objects[0].PauseTest.ResourceSchemaVersion)
	}
}

func TestReportResult(t *testing.T) {
	rep := &Report{
		Outcome: OutcomePass, Class: ClassInfo{Namespace: "t", Name: "fast"}, Resource: "test-db", ResourceSchemaVersion: "7",
		RanAt: time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600)), Tokens: Tokens{C: 1, AFirst: 2, A: 3, B: 4},
	}
	res, ok := rep.Result()
	require.True(t, ok)
	require.Equal(t, Result{Namespace: "t", Class: "fast", Resource: "test-db", ResourceSchemaVersion: "7",
		RanAt: time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC), FirstToken: 3, SecondToken: 4}, res)

	rep.Outcome = OutcomeFail
	_, ok = rep.Result()
	require.False(t, ok, "a failed run has no result")
}
