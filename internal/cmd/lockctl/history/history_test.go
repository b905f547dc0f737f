package history

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

const (
	migrator   = "spiffe://lockd.local/payments/migrator"
	reconciler = "spiffe://lockd.local/payments/reconciler"
)

func at(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(golden.Now.Add(d)) }

func tok(epoch uint32, rev int64) *lockv1.Token {
	return &lockv1.Token{Value: uint64(epoch)<<48 | uint64(rev), Epoch: epoch, Revision: rev}
}

// sample is one key's night: a release, a handoff, an expiry, a force and
// an epoch advance, and a gap.
func sample(tokens bool) *lockv1.HistoryResponse {
	t := func(e uint32, r int64) *lockv1.Token {
		if !tokens {
			return nil
		}
		return tok(e, r)
	}
	k := "payments/ledger/42"
	return &lockv1.HistoryResponse{Events: []*lockv1.HistoryEvent{
		{Epoch: 1, Revision: 10, Key: k, Kind: "grant", Class: "payments/ledger", ObservedAt: at(-3 * time.Hour), Holder: migrator, SessionId: 7587889412345678901, Token: t(1, 10), AcquiredAt: at(-3 * time.Hour)},
		{Epoch: 1, Revision: 14, Key: k, Kind: "handoff", Class: "payments/ledger", ObservedAt: at(-2*time.Hour - 50*time.Minute),
			Holder: reconciler, SessionId: 7587889412345679002, Token: t(1, 14), AcquiredAt: at(-2*time.Hour - 50*time.Minute),
			EndedHolder: migrator, EndedSessionId: 7587889412345678901, EndedToken: t(1, 10), EndedAcquiredAt: at(-3 * time.Hour), Duration: durationpb.New(10 * time.Minute)},
		{Epoch: 1, Revision: 20, Key: k, Kind: "expiry", Class: "payments/ledger", ObservedAt: at(-2 * time.Hour),
			EndedHolder: reconciler, EndedSessionId: 7587889412345679002, EndedToken: t(1, 14), EndedAcquiredAt: at(-2*time.Hour - 50*time.Minute), Duration: durationpb.New(50 * time.Minute)},
		{Epoch: 1, Revision: 31, Key: k, Kind: "grant", Class: "payments/ledger", ObservedAt: at(-time.Hour), Holder: migrator, SessionId: 7587889412345679117, Token: t(1, 31), AcquiredAt: at(-time.Hour)},
		{Epoch: 1, Revision: 35, Key: k, Kind: "force-release", Class: "payments/ledger", ObservedAt: at(-40 * time.Minute),
			EndedHolder: migrator, EndedSessionId: 7587889412345679117, EndedToken: t(1, 31), EndedAcquiredAt: at(-time.Hour), Duration: durationpb.New(20 * time.Minute),
			Requester: "spiffe://lockd.local/ops/alice", Approver: "spiffe://lockd.local/ops/bob", Reason: "INC-4711: migrator wedged"},
		{Epoch: 1, Revision: 40, Kind: "gap", ObservedAt: at(-30 * time.Minute), GapFrom: 36, GapTo: 40, Reason: "etcd compacted up to revision 40 before the tailer read it"},
		{Epoch: 1, Revision: 44, Key: k, Kind: "grant", Class: "payments/ledger", ObservedAt: at(-20 * time.Minute), Holder: reconciler, SessionId: 7587889412345679200, Token: t(1, 44), AcquiredAt: at(-20 * time.Minute)},
		{Epoch: 2, Revision: 50, Key: k, Kind: "epoch-advance", Class: "payments/ledger", ObservedAt: at(-10 * time.Minute),
			EndedHolder: reconciler, EndedSessionId: 7587889412345679200, EndedToken: t(1, 44), EndedAcquiredAt: at(-20 * time.Minute), Duration: durationpb.New(10 * time.Minute)},
		{Epoch: 2, Revision: 50, Key: "/sys/epoch", Kind: "epoch-advance", ObservedAt: at(-10 * time.Minute), FromEpoch: 1, ToEpoch: 2},
		{Epoch: 2, Revision: 60, Key: k, Kind: "grant", Class: "payments/ledger", ObservedAt: at(-time.Minute), Holder: migrator, SessionId: 7587889412345679300, Token: t(2, 60), AcquiredAt: at(-time.Minute)},
	}}
}

func TestPrintHistory(t *testing.T) {
	golden.AssertPrinted(t, "key", NewView("payments/ledger/42", sample(false), false))
	golden.AssertPrinted(t, "key-operator", NewView("payments/ledger/42", sample(true), false))
	golden.AssertPrinted(t, "prefix-truncated", NewView("payments/", &lockv1.HistoryResponse{Truncated: true, Events: sample(false).Events[:3]}, true))
	golden.AssertPrinted(t, "empty", NewView("demo/x", &lockv1.HistoryResponse{}, false))
	golden.AssertPrinted(t, "unprotected", NewView("payments/ledger/", unprotectedSample(), true))
	golden.AssertPrinted(t, "moved", NewView("payments/ledger/42", movedSample(), false))
}

// movedSample is a hold drained from its range's old shard, the range
// moved to shard-2, and a grant there under shard-2's higher epoch.
func movedSample() *lockv1.HistoryResponse {
	k := "payments/ledger/42"
	ops := [2]string{"spiffe://lockd.local/ops/alice", "spiffe://lockd.local/ops/bob"}
	return &lockv1.HistoryResponse{Events: []*lockv1.HistoryEvent{
		{Epoch: 2, Revision: 10, Key: k, Kind: "grant", Class: "payments/ledger", ObservedAt: at(-time.Hour), Holder: migrator, SessionId: 7587889412345678901, AcquiredAt: at(-time.Hour)},
		{Epoch: 1, Revision: 30, Key: "payments/ledger/", Kind: KindMove, ObservedAt: at(-40 * time.Minute), Requester: ops[0], Approver: ops[1],
			Reason: "shard plan 20261206-010203-abcdef (map version 3 to 4): payments/ledger/ closed on entity to drain before it moves to shard-2; requested: INC-9 hot tenant"},
		{Epoch: 2, Revision: 12, Key: k, Kind: "release", Class: "payments/ledger", ObservedAt: at(-39 * time.Minute),
			EndedHolder: migrator, EndedSessionId: 7587889412345678901, EndedAcquiredAt: at(-time.Hour), Duration: durationpb.New(21 * time.Minute)},
		{Epoch: 1, Revision: 33, Key: "payments/ledger/", Kind: KindMove, ObservedAt: at(-38 * time.Minute), Requester: ops[0], Approver: ops[1],
			Reason: "shard plan 20261206-010203-abcdef (map version 3 to 4): payments/ledger/ moved from entity to shard-2, served there from now; requested: INC-9 hot tenant"},
		{Epoch: 5, Revision: 7, Key: k, Kind: "grant", Class: "payments/ledger", ObservedAt: at(-30 * time.Minute), Holder: reconciler, SessionId: 7587889412345679002, AcquiredAt: at(-30 * time.Minute)},
	}}
}

// unprotectedSample is a quorum loss: lockd-1 granted payments/ledger/42
// without a quorum while the migrator's hold was live, and shipped the
// grant when quorum returned; the migrator's hold then ended.
func unprotectedSample() *lockv1.HistoryResponse {
	k := "payments/ledger/42"
	return &lockv1.HistoryResponse{Events: []*lockv1.HistoryEvent{
		{Epoch: 1, Revision: 10, Key: k, Kind: "grant", Class: "payments/ledger", ObservedAt: at(-time.Hour), Holder: migrator, SessionId: 7587889412345678901, AcquiredAt: at(-time.Hour)},
		{Epoch: 1, Revision: 12, Key: k, Kind: KindUnprotected, Class: "payments/ledger", ObservedAt: at(-10 * time.Minute),
			Holder: reconciler, SessionId: 7587889412345679555, AcquiredAt: at(-40 * time.Minute), Unprotected: true, ArbiterId: "lockd-1", SpoolSeq: 3},
		{Epoch: 1, Revision: 13, Key: k, Kind: "release", Class: "payments/ledger", ObservedAt: at(-5 * time.Minute),
			EndedHolder: migrator, EndedSessionId: 7587889412345678901, EndedAcquiredAt: at(-time.Hour), Duration: durationpb.New(55 * time.Minute)},
	}}
}

func TestNewViewPairsEachStartWithItsEnd(t *testing.T) {
	v := NewView("payments/ledger/42", sample(true), false)
	require.Len(t, v.Holds, 5)
	want := []string{EndHandedOff, EndExpired, EndForced, EndEpochAdvance, ""}
	for i, h := range v.Holds {
		require.Equal(t, want[i], h.Ended, "hold %d", i)
	}
	require.Equal(t, []string{"spiffe://lockd.local/ops/alice", "spiffe://lockd.local/ops/bob"}, v.Holds[2].ForcedBy)
	require.Len(t, v.Gaps, 1)
	require.Len(t, v.Advances, 1)
	// A hold whose grant is before the window is built from its end.
	v = NewView("k", &lockv1.HistoryResponse{Events: sample(true).Events[2:3]}, false)
	require.Len(t, v.Holds, 1)
	require.Equal(t, reconciler, v.Holds[0].Holder)
	require.Equal(t, EndExpired, v.Holds[0].Ended)

	// An unprotected grant is a hold of its own, never closed by an end
	// row of its key.
	v = NewView("payments/ledger/", unprotectedSample(), true)
	require.Len(t, v.Holds, 2)
	require.Equal(t, migrator, v.Holds[0].Holder)
	require.Equal(t, EndReleased, v.Holds[0].Ended, "the release ends the migrator's hold, not the unprotected grant")
	u := v.Holds[1]
	require.True(t, u.Unprotected)
	require.Equal(t, "", u.Ended)
	require.Equal(t, "lockd-1", u.Arbiter)
	require.Equal(t, uint64(3), u.SpoolSeq)
	require.Equal(t, int64(12), u.StartRevision)
	require.Nil(t, u.Token)

	// A move of the key's range is a move, not a hold, and ends none.
	v = NewView("payments/ledger/42", movedSample(), false)
	require.Len(t, v.Holds, 2)
	require.Equal(t, EndReleased, v.Holds[0].Ended)
	require.Equal(t, "", v.Holds[1].Ended)
	require.Len(t, v.Moves, 2)
	require.Equal(t, "payments/ledger/", v.Moves[0].Range)
	require.Equal(t, [2]string{"spiffe://lockd.local/ops/alice", "spiffe://lockd.local/ops/bob"}, [2]string{v.Moves[1].Requester, v.Moves[1].Approver})
}

func TestNewCmdHistoryFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"key", []string{"payments/ledger/42"}, ""},
		{"since a duration, until a time", []string{"payments/", "--since", "2h", "--until", "2026-03-01T11:59:00Z"}, ""},
		{"no key", nil, "<key | prefix/>"},
		{"bad since", []string{"k", "--since", "yesterday"}, "--since: want a duration"},
		{"negative since", []string{"k", "--since", "-5m"}, "--since: a duration before now must not be negative"},
		{"negative limit", []string{"k", "--limit", "-1"}, "--limit must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			var got *Options
			cmd := NewCmdHistory(&cmdutil.Factory{IOStreams: ios, Now: func() time.Time { return golden.Now }}, func(o *Options) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				var ue *cli.UsageError
				require.ErrorAs(t, err, &ue, "bad input is a usage error (exit 2)")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.args[0], got.Target)
		})
	}
}

// TestHistoryAgainstLockd runs `lockctl history -o json` against a real
// lockd with the audit history on: a release, a force-release with its
// operators and reason, and tokens only for operators.
func TestHistoryAgainstLockd(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	alice := env.Client(t, lockdtest.Alice)
	ctx := t.Context()
	l, err := alice.Acquire(ctx, "t/hist", "std", func(*client.Lock) {})
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	forced, err := alice.Acquire(ctx, "t/hist", "std", func(*client.Lock) {})
	require.NoError(t, err)
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	fr, err := op1.RequestForceRelease(ctx, &lockv1.RequestForceReleaseRequest{Key: "t/hist", Reason: "INC-9: wedged"})
	require.NoError(t, err)
	_, err = op2.ApproveForceRelease(ctx, &lockv1.ApproveForceReleaseRequest{Id: fr.GetForceRelease().GetId()})
	require.NoError(t, err)

	run := func(identity string, args ...string) (*View, error) {
		ios, _, out, _ := iostreams.Test()
		f := &cmdutil.Factory{IOStreams: ios, Now: time.Now, Output: printer.FormatJSON}
		f.Client = func() (*client.Client, error) {
			return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(identity))
		}
		cmd := NewCmdHistory(f, nil)
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			return nil, err
		}
		var v View
		require.NoError(t, json.Unmarshal(out.Bytes(), &v))
		return &v, nil
	}
	var v *View
	lockdtest.WaitFor(t, 10*time.Second, "both holds in the history", func() bool {
		var err error
		v, err = run(lockdtest.Operator, "t/hist", "--since", "1h")
		return err == nil && len(v.Holds) == 2 && v.Holds[1].Ended != ""
	})
	require.Equal(t, EndReleased, v.Holds[0].Ended)
	require.Equal(t, l.Token(), v.Holds[0].Token.Value)
	require.Equal(t, EndForced, v.Holds[1].Ended)
	require.Equal(t, forced.Token(), v.Holds[1].Token.Value)
	require.Equal(t, []string{lockdtest.Operator, lockdtest.Operator2}, v.Holds[1].ForcedBy)
	require.Equal(t, "INC-9: wedged", v.Holds[1].Reason)
	require.Equal(t, lockdtest.Alice, v.Holds[1].Holder)

	// The holder's own identity sees the history, without tokens.
	v, err = run(lockdtest.Alice, "t/hist")
	require.NoError(t, err)
	require.Len(t, v.Holds, 2)
	require.Nil(t, v.Holds[0].Token, "tokens are for operators")
	// A key the caller may not lock is refused.
	_, err = run(lockdtest.Carol, "t/hist")
	require.ErrorIs(t, client.Decode(err), client.ErrDenied)
}

func TestHistoryOffSaysSo(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	raw, _ := env.Raw(t, lockdtest.Operator)
	_, err := raw.History(t.Context(), &lockv1.HistoryRequest{Key: "t/x"})
	require.ErrorIs(t, client.Decode(err), client.ErrHistoryOff)
}
