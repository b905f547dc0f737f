package fencetest_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/fencetest"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	"github.com/lockd-dev/lockd/internal/pausetest"
)

func sampleReport(pass bool) pausetest.Report {
	rep := pausetest.Report{
		Outcome: pausetest.OutcomePass,
		Message: "the resource rejected the paused holder's write with its old token 281474976710712 after holder B wrote with 281474976710720, " +
			"rejected holder B's token presented twice, and accepted an older token on another record",
		Class:    pausetest.ClassInfo{Namespace: "payments", Name: "ledger-writes", Enforcement: "advisory", TTLSeconds: 15, Resource: "ledger-db"},
		Resource: "ledger-db", ResourceSchemaVersion: "3", Target: "postgres table ledger_fence on 10.0.0.5:5432/ledger",
		Key: "payments/ledger/fence-test", OtherKey: "payments/ledger/fence-test-2",
		Tokens: pausetest.Tokens{C: 281474976710700, AFirst: 281474976710705, A: 281474976710712, B: 281474976710720},
		RanAt:  time.Date(2026, 3, 1, 11, 59, 0, 0, time.UTC),
		Steps: []pausetest.Step{
			{Name: pausetest.StepOtherKey, Status: pausetest.StatusOK, Detail: "holder C acquired payments/ledger/fence-test-2 with token 281474976710700 and keeps it: the oldest token of the test"},
			{Name: pausetest.StepFirstWrite, Status: pausetest.StatusOK, Detail: `holder A (pid 4242, its own client and session) acquired payments/ledger/fence-test with token 281474976710705, wrote "ft-0a1b2c3d-a1": accepted; released`},
			{Name: pausetest.StepPrepare, Status: pausetest.StatusOK, Detail: "holder A acquired payments/ledger/fence-test again with token 281474976710712, CanStart was true, and it prepared its write"},
			{Name: pausetest.StepPause, Status: pausetest.StatusOK, Detail: "holder A was stopped (SIGSTOP); lockd showed its hold ended after 14.6s (class TTL 15s)"},
			{Name: pausetest.StepNextHolder, Status: pausetest.StatusOK, Detail: `holder B acquired payments/ledger/fence-test with token 281474976710720, greater than A's 281474976710712, and wrote "ft-0a1b2c3d-b": accepted`},
			{Name: pausetest.StepReplay, Status: pausetest.StatusOK, Detail: `holder B's token 281474976710720 presented again with "ft-0a1b2c3d-b-replay": rejected`},
			{Name: pausetest.StepStaleWrite, Status: pausetest.StatusOK, Detail: `holder A resumed and wrote "ft-0a1b2c3d-a2" with its old token 281474976710712: rejected (fence: postgres: ledger_fence record "payments/ledger/fence-test": fence: rejected: stale token)`},
			{Name: pausetest.StepReadBack, Status: pausetest.StatusOK, Detail: `payments/ledger/fence-test holds holder B's value "ft-0a1b2c3d-b"`},
			{Name: pausetest.StepOtherRecord, Status: pausetest.StatusOK, Detail: "holder C wrote its own record payments/ledger/fence-test-2 with token 281474976710700, older than B's 281474976710720: accepted"},
		},
	}
	if pass {
		return rep
	}
	rep.Outcome = pausetest.OutcomeFail
	rep.Class.Enforcement = "fenced"
	rep.Target = "the owner's commands (--check, --write, --read)"
	rep.Message = "the resource accepted the paused holder's write with its old token 281474976710712 after holder B wrote with 281474976710720: " +
		"the fence does not compare tokens in the same statement as the write (--check passed before the pause; the write itself must compare the token)"
	rep.Steps[6] = pausetest.Step{Name: pausetest.StepStaleWrite, Status: pausetest.StatusFailed, Detail: rep.Message}
	rep.Steps[7] = pausetest.Step{Name: pausetest.StepReadBack, Status: pausetest.StatusFailed,
		Detail: `payments/ledger/fence-test holds the paused holder's value "ft-0a1b2c3d-a2", not holder B's "ft-0a1b2c3d-b": the stale write overwrote the newer holder's`}
	return rep
}

func TestReportViewPass(t *testing.T) {
	golden.AssertPrinted(t, "pass", &fencetest.ReportView{Report: sampleReport(true), ResultFile: "/repo/classes/payments/pausetest-ledger-writes.yaml"})
}

func TestReportViewFail(t *testing.T) {
	golden.AssertPrinted(t, "fail", &fencetest.ReportView{Report: sampleReport(false)})
}

func TestReportViewFailWithEarlierResult(t *testing.T) {
	v := &fencetest.ReportView{Report: sampleReport(false), EarlierResult: "/repo/pausetest-ledger-writes.yaml"}
	require.Equal(t, []string{
		"No result written: fix the fence (docs/fencing.md) and run the test again.",
		"/repo/pausetest-ledger-writes.yaml is from an earlier run: it does not describe this one.",
	}, v.Notes())
}

func TestReportViewSaysWhereTheResultWent(t *testing.T) {
	cluster := "https://k8s.example:6443"
	fileNote := "Wrote /r.yaml: commit it next to class payments/ledger-writes in the class repository. class-lint counts it for a year, " +
		`while the class says resource: ledger-db and resourceSchemaVersion: "3".`
	objectNote := func(verb string) string {
		return verb + " PauseTestResult payments/ledger-writes in the cluster at " + cluster + ": the class controller marks class payments/ledger-writes fenced for a year, " +
			`while the class says resource: ledger-db and resourceSchemaVersion: "3".`
	}
	advisory := "Class payments/ledger-writes is advisory today: with the result committed it may declare enforcement: fenced."
	caveat := "A PASS shows this resource rejected this stale write under this pause; it does not show that every write path to the resource is fenced."
	tests := []struct {
		name string
		view fencetest.ReportView
		want []string
	}{
		{"a file", fencetest.ReportView{ResultFile: "/r.yaml"}, []string{fileNote, advisory, caveat}},
		{"created in the cluster", fencetest.ReportView{ResultObject: "payments/ledger-writes", ResultCreated: true, ResultCluster: cluster},
			[]string{objectNote("Created"), advisory, caveat}},
		{"updated in the cluster, and a file", fencetest.ReportView{ResultFile: "/r.yaml", ResultObject: "payments/ledger-writes", ResultCluster: cluster},
			[]string{fileNote, objectNote("Updated"), advisory, caveat}},
		{"nowhere", fencetest.ReportView{}, []string{"No result written.", advisory, caveat}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.view
			v.Report = sampleReport(true)
			require.Equal(t, tt.want, v.Notes())
		})
	}
	b, err := json.Marshal(&fencetest.ReportView{Report: sampleReport(true), ResultObject: "payments/ledger-writes", ResultCluster: cluster})
	require.NoError(t, err)
	require.Contains(t, string(b), `"result_object":"payments/ledger-writes"`)
	require.NotContains(t, string(b), "result_file")
}

func TestReportViewSkippedSteps(t *testing.T) {
	rep := sampleReport(false)
	rep.Tokens = pausetest.Tokens{C: 281474976710700}
	rep.Message = "the resource rejected the first holder's write (token 281474976710705, the newest for payments/ledger/fence-test): " +
		"the write path does not work from the holder, so a rejection later would prove nothing (pausetest: write command exited 2 (stderr: psql: connection refused): fence: rejected: stale token)"
	rep.Steps = append(rep.Steps[:1], pausetest.Step{Name: pausetest.StepFirstWrite, Status: pausetest.StatusFailed, Detail: rep.Message})
	for _, n := range []string{pausetest.StepPrepare, pausetest.StepPause} {
		rep.Steps = append(rep.Steps, pausetest.Step{Name: n, Status: pausetest.StatusSkipped, Detail: "holder A's first write did not land"})
	}
	golden.AssertPrinted(t, "fail-first-write", &fencetest.ReportView{Report: rep})
}

// The JSON field names are the stable interface for scripts.
func TestReportViewJSONFields(t *testing.T) {
	b, err := json.Marshal(&fencetest.ReportView{Report: sampleReport(true), ResultFile: "/r.yaml"})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"outcome", "message", "class", "resource", "resource_schema_version", "target", "key", "other_key", "tokens", "steps", "ran_at", "result_file"} {
		require.Contains(t, m, k)
	}
	require.Equal(t, map[string]any{"c": "281474976710700", "a_first": "281474976710705", "a": "281474976710712", "b": "281474976710720"}, m["tokens"],
		"tokens are decimal strings")
	require.Equal(t, map[string]any{"name": "other-key", "status": "ok",
		"detail": "holder C acquired payments/ledger/fence-test-2 with token 281474976710700 and keeps it: the oldest token of the test"}, m["steps"].([]any)[0])
}
