package pausetest

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// These tests run the whole procedure against a real lockd (class t/fast,
// TTL 5s) and a fence kept in files by shell commands; the PostgreSQL and
// S3 runs are in internal/cmd/lockctl/fencetest.

func testConfig(env *lockdtest.Env, key string, spec Spec) Config {
	return Config{
		Context: &clientconfig.Context{Name: "test", Server: env.Addr, InsecureIdentity: lockdtest.Alice},
		Key:     key, Class: "fast", Resource: spec, SchemaVersion: "7",
		Now: func() time.Time { return time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC) },
	}
}

func stepStatuses(rep *Report) map[string]string {
	m := map[string]string{}
	for _, s := range rep.Steps {
		m[s.Name] = s.Status
	}
	return m
}

func TestRunPassesWithAFence(t *testing.T) {
	t.Parallel()
	env := lockdtest.Start(t, lockdtest.Options{})
	var progress bytes.Buffer
	cfg := testConfig(env, "t/fast/pt-pass", fileFence(t, true))
	cfg.Progress = &progress
	start := time.Now()
	rep, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	t.Logf("run took %s", time.Since(start))
	require.Equal(t, OutcomePass, rep.Outcome, "%s\n%+v", rep.Message, rep.Steps)
	require.Len(t, rep.Steps, 9)
	for _, s := range rep.Steps {
		require.Equal(t, StatusOK, s.Status, "%s: %s", s.Name, s.Detail)
	}
	tk := rep.Tokens
	require.True(t, tk.C < tk.AFirst && tk.AFirst < tk.A && tk.A < tk.B, "%+v", tk)
	require.Equal(t, ClassInfo{Namespace: "t", Name: "fast", Enforcement: "fenced", Served: "fenced", TTLSeconds: 5, Resource: "test-db"}, rep.Class)
	require.Equal(t, "test-db", rep.Resource)
	require.Equal(t, "t/fast/pt-pass-2", rep.OtherKey)
	require.Contains(t, rep.Message, "rejected the paused holder's write")

	res, ok := rep.Result()
	require.True(t, ok)
	require.Equal(t, tk.A, res.FirstToken)
	require.Equal(t, tk.B, res.SecondToken)
	require.Equal(t, cfg.Now(), res.RanAt)

	require.Contains(t, progress.String(), "fence-test: holder A is ready: stopping it (SIGSTOP)")
	for _, tok := range []uint64{tk.C, tk.AFirst, tk.A, tk.B} {
		require.NotContains(t, progress.String(), strings.TrimSpace(string(mustJSON(t, tok))), "progress lines never show a token")
	}

	// Every hold of the test is gone.
	lock, _ := env.Raw(t, lockdtest.Bob)
	for _, k := range []string{"t/fast/pt-pass", "t/fast/pt-pass-2"} {
		got, err := lock.Inspect(t.Context(), inspectReq(k))
		require.NoError(t, err)
		require.False(t, got.GetHeld(), "%s still held", k)
	}
}

func TestRunFailsCheckThenWrite(t *testing.T) {
	t.Parallel()
	env := lockdtest.Start(t, lockdtest.Options{})
	rep, err := Run(t.Context(), testConfig(env, "t/fast/pt-ctw", fileFence(t, false)))
	require.NoError(t, err)
	require.Equal(t, OutcomeFail, rep.Outcome)
	require.Contains(t, rep.Message, "the resource accepted the paused holder's write with its old token")
	require.Contains(t, rep.Message, "the fence does not compare tokens in the same statement as the write (--check passed before the pause")
	st := stepStatuses(rep)
	require.Equal(t, StatusFailed, st[StepStaleWrite])
	require.Equal(t, StatusFailed, st[StepReadBack])
	require.Equal(t, StatusOK, st[StepReplay], "the check refuses B's token twice")
	require.Equal(t, StatusOK, st[StepOtherRecord])
	_, ok := rep.Result()
	require.False(t, ok)
}

func TestRunFailsWhenTheWritePathIsBroken(t *testing.T) {
	t.Parallel()
	env := lockdtest.Start(t, lockdtest.Options{})
	rep, err := Run(t.Context(), testConfig(env, "t/fast/pt-broken", Spec{Write: "echo 'psql: connection refused' >&2; exit 2", Read: "true"}))
	require.NoError(t, err)
	require.Equal(t, OutcomeFail, rep.Outcome)
	require.Contains(t, rep.Message, "the resource rejected the first holder's write")
	require.Contains(t, rep.Message, "psql: connection refused")
	st := stepStatuses(rep)
	require.Equal(t, StatusFailed, st[StepFirstWrite])
	require.Equal(t, StatusSkipped, st[StepStaleWrite])
}

func TestRunSetupErrors(t *testing.T) {
	t.Parallel()
	env := lockdtest.Start(t, lockdtest.Options{})
	spec := Spec{Write: "true", Read: "true"}

	cfg := testConfig(env, "t/fast/x", spec)
	cfg.Class = "nope"
	_, err := Run(t.Context(), cfg)
	require.ErrorContains(t, err, "pausetest: class t/nope")

	cfg = testConfig(env, "t/fast/x", spec)
	cfg.ResourceName = "other-db"
	_, err = Run(t.Context(), cfg)
	require.ErrorContains(t, err, `guards resource "test-db", not "other-db"`)

	cfg = testConfig(env, "other/cache/x", spec)
	cfg.Class = "cache" // advisory, names no resource
	cfg.Context.InsecureIdentity = "spiffe://test.local/other"
	_, err = Run(t.Context(), cfg)
	require.ErrorContains(t, err, "names no spec.resource")

	cfg = testConfig(env, "t/fast/x", spec)
	cfg.Context.InsecureIdentity = lockdtest.Carol // granted t/carol/ only
	_, err = Run(t.Context(), cfg)
	require.ErrorContains(t, err, "pausetest: holder C cannot lock t/fast/x-2")
	require.Equal(t, codes.PermissionDenied, status.Code(err), "the gRPC status survives for lockctl's exit code")

	cfg = testConfig(env, "t/fast/x", Spec{Write: "true"})
	_, err = Run(t.Context(), cfg)
	require.ErrorContains(t, err, "needs a read command")
}

func TestHolderNotHooked(t *testing.T) {
	t.Parallel()
	env := lockdtest.Start(t, lockdtest.Options{})
	cfg := testConfig(env, "t/fast/pt-nohook", Spec{Write: "true", Read: "true"})
	cfg.Executable = "/bin/echo" // prints its (empty) arguments, not events
	rep, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, OutcomeFail, rep.Outcome)
	require.Contains(t, rep.Message, "holder A failed before its first write")
}

// A child that exits before it is sent its task (here: before the write, for
// certain) is a holder that failed, reported as such; it is not a setup error.
func TestHolderExitingBeforeItsTaskFailsTheHolderStep(t *testing.T) {
	t.Parallel()
	env := lockdtest.Start(t, lockdtest.Options{})
	cfg := testConfig(env, "t/fast/pt-gone", Spec{Write: "true", Read: "true"})
	cfg.Executable = "/bin/true"
	cfg.holderStarted = func(h *holderProc) { <-h.exitCh }
	rep, err := Run(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, OutcomeFail, rep.Outcome)
	require.Contains(t, rep.Message, "holder A failed before its first write")
	require.Contains(t, rep.Message, "send holder A its task")
}

func TestRunRefusesAClassOpenOnQuorumLoss(t *testing.T) {
	t.Parallel()
	classes := maps.Clone(lockdtest.Classes)
	classes["t/open.yaml"] = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: cache, namespace: t}
spec: {keys: ["t/open/"], nestedIn: [std], purpose: efficiency, enforcement: advisory, ttl: 30s, tier: entity, onQuorumLoss: open, resource: test-db,
  riskOwner: cache-team, waiverExpires: "2099-01-01"}
`
	env := lockdtest.Start(t, lockdtest.Options{Classes: classes})
	cfg := testConfig(env, "t/open/pt-open", fileFence(t, true))
	cfg.Class = "cache"
	_, err := Run(t.Context(), cfg)
	require.ErrorIs(t, err, ErrOpenClass)
	require.ErrorContains(t, err, "declare onQuorumLoss: closed")
}
