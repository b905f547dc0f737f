package unprotected

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/history"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

const (
	migrator   = "spiffe://lockd.local/payments/migrator"
	reconciler = "spiffe://lockd.local/payments/reconciler"
	indexer    = "spiffe://lockd.local/search/indexer"
)

func at(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(golden.Now.Add(d)) }

// grant is an unprotected grant row as lockd returns it.
func grant(key, class, holder string, session int64, acquired *timestamppb.Timestamp, arbiter string, seq uint64, rev int64, shipped time.Duration) *lockv1.HistoryEvent {
	return &lockv1.HistoryEvent{ClusterId: 0xabc123, Epoch: 2, Revision: rev, Key: key, Kind: Kind, Class: class, ObservedAt: at(shipped),
		Holder: holder, SessionId: session, AcquiredAt: acquired, Unprotected: true, ArbiterId: arbiter, SpoolSeq: seq}
}

// outage is a 09:00-11:00 quorum loss (golden.Now is 12:00): two lockds
// granted from memory and shipped when quorum returned at 11:05. Around
// them: a grant made before the window and one after it, a protected
// grant, a grant whose record had no time, and one gap (each namespace's
// answer repeats it).
func outage() []*lockv1.HistoryEvent {
	gap := &lockv1.HistoryEvent{Epoch: 2, Revision: 130, Kind: "gap", ObservedAt: at(-20 * time.Minute), GapFrom: 125, GapTo: 130,
		Reason: "etcd compacted up to revision 130 before the tailer read it"}
	return []*lockv1.HistoryEvent{
		{Epoch: 2, Revision: 100, Key: "payments/ledger/42", Kind: "grant", Class: "payments/ledger", ObservedAt: at(-3 * time.Hour), Holder: migrator, SessionId: 1, AcquiredAt: at(-3 * time.Hour)},
		grant("payments/ledger/old", "payments/ledger", reconciler, 7587889412345670001, at(-3*time.Hour-time.Minute), "lockd-0", 1, 120, -55*time.Minute),
		grant("payments/ledger/42", "payments/ledger", reconciler, 7587889412345679555, at(-150*time.Minute), "lockd-1", 3, 120, -55*time.Minute),
		grant("payments/ledger/7", "payments/ledger", migrator, 7587889412345679001, at(-170*time.Minute), "lockd-0", 2, 120, -55*time.Minute),
		grant("payments/ledger/43", "payments/ledger", migrator, 7587889412345679002, nil, "lockd-0", 9, 121, -55*time.Minute),
		grant("payments/ledger/late", "payments/ledger", migrator, 7587889412345679003, at(-time.Hour), "lockd-0", 10, 122, -55*time.Minute),
		gap,
		grant("search/reindex/all", "search/reindex", indexer, 7587889412345679600, at(-105*time.Minute), "lockd-1", 4, 121, -55*time.Minute),
		gap,
	}
}

func TestPrintUnprotected(t *testing.T) {
	since, until := golden.Now.Add(-3*time.Hour), golden.Now.Add(-time.Hour)
	golden.AssertPrinted(t, "grants", NewView(since, until, []string{"payments", "search"}, []string{"secret"}, outage()))
	golden.AssertPrinted(t, "empty", NewView(since, until, []string{"payments"}, nil, outage()[:1]))
}

func TestNewViewKeepsTheGrantsMadeInTheWindow(t *testing.T) {
	since, until := golden.Now.Add(-3*time.Hour), golden.Now.Add(-time.Hour)
	v := NewView(since, until, []string{"payments", "search"}, nil, outage())
	var keys []string
	for _, g := range v.Grants {
		keys = append(keys, g.Key)
	}
	// Oldest grant first; the one made before --since (shipped in the
	// window) and the one made at --until are out; no time: last.
	require.Equal(t, []string{"payments/ledger/7", "payments/ledger/42", "search/reindex/all", "payments/ledger/43"}, keys)
	g := v.Grants[1]
	require.Equal(t, "lockd-1", g.Arbiter)
	require.Equal(t, uint64(3), g.SpoolSeq)
	require.Equal(t, int64(120), g.ShippedRevision)
	require.Equal(t, "abc123", g.ClusterID)
	require.Equal(t, golden.Now.Add(-150*time.Minute), *g.AcquiredAt)
	require.Equal(t, golden.Now.Add(-55*time.Minute), g.ShippedAt)
	require.Len(t, v.Gaps, 1, "a gap repeated by each namespace's answer is one gap")
}

func TestKindIsTheHistorys(t *testing.T) {
	require.Equal(t, string(audit.KindUnprotected), Kind)
	require.Equal(t, history.KindUnprotected, Kind)
}

func TestNewCmdUnprotectedFlags(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantErr   string
		wantSince time.Time
	}{
		{"a duration", []string{"--since", "2h"}, "", golden.Now.Add(-2 * time.Hour)},
		{"times and a class", []string{"--since", "2026-03-01T02:00:00Z", "--until", "2026-03-01T03:00:00Z", "--class", "payments/ledger"}, "",
			time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)},
		{"a namespace", []string{"--since", "2h", "--namespace", "payments"}, "", golden.Now.Add(-2 * time.Hour)},
		{"no since", []string{}, "--since is required", time.Time{}},
		{"bad since", []string{"--since", "yesterday"}, "--since: want a duration", time.Time{}},
		{"negative until", []string{"--since", "2h", "--until", "-5m"}, "--until: a duration before now must not be negative", time.Time{}},
		{"until before since", []string{"--since", "1h", "--until", "2h"}, "must be after --since", time.Time{}},
		{"bad namespace", []string{"--since", "2h", "--namespace", "Pay/ments"}, "--namespace", time.Time{}},
		{"class without a name", []string{"--since", "2h", "--class", "payments"}, "want namespace/name", time.Time{}},
		{"class outside the namespace", []string{"--since", "2h", "--namespace", "search", "--class", "payments/ledger"}, "is not in --namespace search", time.Time{}},
		{"an argument", []string{"payments/", "--since", "2h"}, "unexpected argument", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			var got *Options
			cmd := NewCmdUnprotected(&cmdutil.Factory{IOStreams: ios, Now: func() time.Time { return golden.Now }}, func(o *Options) error { got = o; return nil })
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
			since, until, err := got.window()
			require.NoError(t, err)
			require.Equal(t, tt.wantSince, since)
			require.True(t, until.After(since))
		})
	}
}

// TestUnprotectedAgainstLockd ships unprotected grants to a real lockd's
// etcd as an arbiter does, lets the real tailer record them, and runs
// `lockctl unprotected -o json`: the grants made in the window, with their
// fields; not the one made before it (shipped in the window all the same),
// nor the protected grants around them; the same with --namespace, with
// --class, and when lockd truncates every answer.
func TestUnprotectedAgainstLockd(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	ctx := t.Context()
	alice := env.Client(t, lockdtest.Alice)
	l, err := alice.Acquire(ctx, "t/protected", "std", func(*client.Lock) {})
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	now := time.Now().UTC()
	rec := func(arbiter string, seq uint64, key string, acquired time.Time) keyspace.Unprotected {
		ns, _, _ := strings.Cut(key, "/")
		return keyspace.Unprotected{Arbiter: arbiter, Seq: seq, Key: key, Class: ns + "/open", Identity: lockdtest.Bob,
			Session: 9000 + int64(seq), AcquiredAt: acquired.UnixNano(), TTL: 15}
	}
	a := rec("lockd-0", 1, "t/unprot/a", now.Add(-10*time.Minute).Truncate(time.Microsecond))
	b := rec("lockd-1", 1, "t/unprot/b", now.Add(-5*time.Minute).Truncate(time.Microsecond))
	o := rec("lockd-1", 2, "other/unprot/x", now.Add(-7*time.Minute).Truncate(time.Microsecond))
	old := rec("lockd-0", 2, "t/unprot/old", now.Add(-2*time.Hour))
	// ship is the arbiter's shipping write: one transaction, each record
	// put only if its key is absent.
	ship := func(recs ...keyspace.Unprotected) int64 {
		var ops []clientv3.Op
		for _, u := range recs {
			v, err := json.Marshal(u)
			require.NoError(t, err)
			k := keyspace.UnprotectedKey(u.Arbiter, u.Seq)
			ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(k, string(v))}, nil))
		}
		resp, err := env.Backend.Client.Txn(ctx).Then(ops...).Commit()
		require.NoError(t, err)
		for _, r := range resp.Responses {
			require.True(t, r.GetResponseTxn().GetSucceeded())
		}
		return resp.Header.Revision
	}
	shippedAB := ship(a, b)
	shippedO := ship(o)
	ship(old)
	l, err = alice.Acquire(ctx, "t/protected", "std", func(*client.Lock) {})
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	dialAs := func(id string) func() (*client.Client, error) {
		return func() (*client.Client, error) {
			return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(id))
		}
	}
	dial := dialAs(lockdtest.Operator)
	run := func(opts Options) *View {
		t.Helper()
		ios, _, out, _ := iostreams.Test()
		if opts.Client == nil {
			opts.Client = dial
		}
		opts.Now, opts.Timeout = time.Now, 30*time.Second
		opts.Printer = func() *printer.Printer {
			return &printer.Printer{Format: printer.FormatJSON, Out: ios.Out, ErrOut: ios.ErrOut}
		}
		require.NoError(t, unprotectedRun(context.Background(), &opts))
		var v View
		require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
		return &v
	}
	var v *View
	lockdtest.WaitFor(t, 15*time.Second, "the grants in the history", func() bool {
		v = run(Options{Since: "30m"})
		return len(v.Grants) == 3
	})
	require.Equal(t, []string{"other", "t"}, v.Namespaces)
	for i, u := range []keyspace.Unprotected{a, o, b} {
		g := v.Grants[i]
		require.Equal(t, u.Key, g.Key)
		require.Equal(t, u.Class, g.Class)
		require.Equal(t, u.Identity, g.Holder)
		require.Equal(t, u.Session, g.SessionID)
		require.Equal(t, u.Arbiter, g.Arbiter)
		require.Equal(t, u.Seq, g.SpoolSeq)
		require.Equal(t, map[string]int64{"other": shippedO, "t": shippedAB}[strings.Split(u.Key, "/")[0]], g.ShippedRevision)
		require.NotNil(t, g.AcquiredAt)
		require.Equal(t, time.Unix(0, u.AcquiredAt).UTC(), *g.AcquiredAt)
		require.False(t, g.ShippedAt.IsZero())
	}
	inT := []GrantView{v.Grants[0], v.Grants[2]}
	for name, tc := range map[string]struct {
		opts Options
		want []GrantView
	}{
		"namespace":         {Options{Since: "30m", Namespace: "t"}, inT},
		"class":             {Options{Since: "30m", Class: "t/open"}, inT},
		"answers truncated": {Options{Since: "30m", PageLimit: 2}, v.Grants},
	} {
		require.Equal(t, tc.want, run(tc.opts).Grants, name)
	}
	require.Empty(t, run(Options{Since: "30m", Class: "t/std"}).Grants, "another class")
	require.Len(t, run(Options{Since: "3h"}).Grants, 4, "a window that holds the old grant too")

	// A namespace the caller has no grant in is not even named (the
	// history's statistics show a caller its own namespaces only); asked
	// for, it is refused. Under a prefix the caller may list, it sees the
	// keys it may lock (carol: t/carol/ only).
	va := run(Options{Since: "30m", Client: dialAs(lockdtest.Alice)})
	require.Equal(t, inT, va.Grants)
	require.Equal(t, []string{"t"}, va.Namespaces)
	require.Empty(t, va.Denied)
	err = unprotectedRun(ctx, &Options{Since: "30m", Namespace: "other", Client: dialAs(lockdtest.Alice), Now: time.Now, Timeout: 30 * time.Second,
		Printer: func() *printer.Printer { return &printer.Printer{Format: printer.FormatJSON} }})
	require.ErrorIs(t, client.Decode(err), client.ErrDenied)
	require.Empty(t, run(Options{Since: "30m", Namespace: "t", Client: dialAs(lockdtest.Carol)}).Grants)

	// The reader splits a truncated answer's window until none is.
	c, err := dial()
	require.NoError(t, err)
	defer c.Close()
	all := &reader{svc: c.LockService(), page: MaxPage, now: time.Now()}
	require.NoError(t, all.read(ctx, "t/", now.Add(-time.Hour), time.Time{}))
	require.Equal(t, 1, all.calls)
	small := &reader{svc: c.LockService(), page: 2, now: time.Now()}
	require.NoError(t, small.read(ctx, "t/", now.Add(-time.Hour), time.Time{}))
	// Only the unprotected grants come (lockd filters by kind): not Alice's
	// grants and releases of t/protected.
	require.Len(t, all.rows, 3)
	for _, e := range all.rows {
		require.Equal(t, Kind, e.GetKind())
	}
	require.Greater(t, small.calls, 1, "an answer of two rows was truncated and split")
	require.Len(t, small.rows, len(all.rows), "the split answers hold every row once")
	// Two grants shipped in one revision were read at one instant: one row
	// a call cannot hold them, and the reader says so rather than drop one.
	tiny := &reader{svc: c.LockService(), page: 1, now: time.Now()}
	require.ErrorIs(t, tiny.read(ctx, "t/", now.Add(-time.Hour), time.Time{}), ErrTooDense)
}

// TestUnprotectedHistoryOffSaysSo: without the history, the command fails
// with lockd's HISTORY_OFF, said as `lockctl history` says it.
func TestUnprotectedHistoryOffSaysSo(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	run := func(args ...string) error {
		ios, _, _, _ := iostreams.Test()
		f := &cmdutil.Factory{IOStreams: ios, Now: time.Now, Output: printer.FormatJSON}
		f.Client = func() (*client.Client, error) {
			return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(lockdtest.Operator))
		}
		cmd := NewCmdUnprotected(f, nil)
		if args[0] == "history" {
			cmd, args = history.NewCmdHistory(f, nil), args[1:]
		}
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		return cmd.ExecuteContext(context.Background())
	}
	for _, args := range [][]string{{"--since", "2h"}, {"--since", "2h", "--namespace", "t"}} {
		err := run(args...)
		require.ErrorIs(t, client.Decode(err), client.ErrHistoryOff, strings.Join(args, " "))
		require.Equal(t, cmdutil.Describe(run("history", "t/x"), env.Addr), cmdutil.Describe(err, env.Addr))
	}
}
