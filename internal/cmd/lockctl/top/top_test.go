package top

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

var at = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Goldens are plain text whatever terminal the tests run under.
func init() { lipgloss.SetColorProfile(termenv.Ascii) }

func hold(key, class string, waiters int32, age time.Duration) *lockv1.Hold {
	return &lockv1.Hold{Key: key, Class: class, Holder: "spiffe://example.org/w", Waiters: waiters, Age: durationpb.New(age)}
}

var sample = Data{Holds: &lockv1.ListHoldsResponse{Holds: []*lockv1.Hold{
	hold("payments/ledger/1", "payments/ledger-writes", 3, 40*time.Second),
	hold("payments/ledger/2", "payments/ledger-writes", 0, 5*time.Second),
	hold("payments/export/1", "payments/report-export", 0, 90*time.Second),
	hold("platform/leader", "platform/leader-election", 1, 300*time.Second),
}}, Stats: &lockv1.ClassStatsResponse{Stats: []*lockv1.ClassStat{
	{Namespace: "payments", Class: "ledger-writes", Grants: 1200, GrantLatencyP99: durationpb.New(40 * time.Millisecond), ExpiriesWithoutRelease: 2},
	{Namespace: "search", Class: "reindex", Grants: 7, GrantLatencyP99: durationpb.New(2 * time.Millisecond)},
}}}

func TestBuild(t *testing.T) {
	s := Build(at, sample, "", SortContention, 2)
	require.Len(t, s.Classes, 4, "a class with grants but no holds now still shows")
	require.Equal(t, ClassRow{Namespace: "payments", Class: "ledger-writes", Contention: Contention{Holds: 2, Waiters: 3, Contended: 1, Ratio: 0.5, LongestHoldSeconds: 40},
		Grants: 1200, GrantP99Seconds: 0.04, ExpiriesWithoutRelease: 2}, s.Classes[0])
	require.Empty(t, s.Shards, "one cluster: no shard rows")
	require.Equal(t, "leader-election", s.Classes[1].Class)
	require.Equal(t, []string{"payments/ledger/1", "platform/leader"}, []string{s.Hot[0].Key, s.Hot[1].Key})

	require.Equal(t, "ledger-writes", Build(at, sample, "", SortHolds, 10).Classes[0].Class)
	require.Equal(t, "payments", Build(at, sample, "", SortName, 10).Classes[0].Namespace)
	f := Build(at, sample, "export", SortName, 10)
	require.Len(t, f.Classes, 1)
	require.Equal(t, "report-export", f.Classes[0].Class)
	for _, n := range s.Notes() {
		require.NotContains(t, n, "unprotected", "no unprotected grants, no note")
	}
}

// TestBuildSaysUnprotectedGrants: grants made without an etcd quorum are
// counted per class and named in a note, with the command that lists them.
func TestBuildSaysUnprotectedGrants(t *testing.T) {
	d := sample
	d.Stats = &lockv1.ClassStatsResponse{Stats: []*lockv1.ClassStat{
		{Namespace: "search", Class: "cache", Grants: 40, UnprotectedGrants: 12, GrantLatencyP99: durationpb.New(time.Millisecond)},
		{Namespace: "payments", Class: "ledger-writes", Grants: 1200},
	}}
	s := Build(at, d, "", SortName, 2)
	var row ClassRow
	for _, r := range s.Classes {
		if r.Class == "cache" {
			row = r
		}
	}
	require.Equal(t, uint64(12), row.UnprotectedGrants)
	require.Contains(t, s.Notes(), "unprotected grants (token 0, made without an etcd quorum) since this lockd started: "+
		"12 of search/cache; lockctl unprotected --since <outage start> lists them")
}

// TestBuildSaysWhichFencedClassesAreNotProven: a class that declares
// fenced and is served as advisory (no current pause test) is named, with
// lockd's reason, in a note (the console shows it as a banner).
func TestBuildSaysWhichFencedClassesAreNotProven(t *testing.T) {
	d := sample
	d.Classes = &lockv1.ListClassesResponse{Classes: []*lockv1.LockClass{
		{Namespace: "payments", Name: "ledger-writes", Enforcement: "advisory", DeclaredEnforcement: "fenced",
			FenceProof: &lockv1.FenceProof{Reason: "PauseTestExpired", Message: "expired on 2026-11-01: run the test again"}},
		{Namespace: "search", Name: "cache", Enforcement: "fenced", DeclaredEnforcement: "fenced", FenceProof: &lockv1.FenceProof{Proven: true}},
	}}
	s := Build(at, d, "", SortName, 2)
	for _, r := range s.Classes {
		switch r.Class {
		case "ledger-writes":
			require.Equal(t, "advisory", r.Enforcement)
			require.Equal(t, "expired on 2026-11-01: run the test again", r.Unproven)
		case "cache":
			require.Equal(t, "fenced", r.Enforcement)
			require.Empty(t, r.Unproven)
		}
	}
	require.Contains(t, s.Notes(), "payments/ledger-writes declares fenced and is served as advisory: expired on 2026-11-01: run the test again")
}

// TestOnceAgainstLockd: --once prints one snapshot of a real lockd, with a
// contended key showing its waiter.
func TestOnceAgainstLockd(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice := env.Client(t, lockdtest.Alice)
	_, err := alice.Acquire(t.Context(), "t/hot", "std", func(*client.Lock) {})
	require.NoError(t, err)
	bob := env.Client(t, lockdtest.Bob)
	go func() {
		_, _ = bob.Acquire(context.Background(), "t/hot", "std", func(*client.Lock) {}, client.Wait(time.Minute))
	}()
	_, err = alice.Acquire(t.Context(), "t/fast/cold", "fast", func(*client.Lock) {})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return env.Arbiter.QueueLen("t/hot") == 1 }, 5*time.Second, 20*time.Millisecond)

	ios, _, out, _ := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Now: time.Now, Output: printer.FormatJSON}
	f.Client = func() (*client.Client, error) {
		return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(lockdtest.Operator))
	}
	cmd := NewCmdTop(f, nil)
	cmd.SetArgs([]string{"--once", "--prefix", "t/"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	require.NoError(t, cmd.ExecuteContext(t.Context()))
	var s Snapshot
	require.NoError(t, json.Unmarshal(out.Bytes(), &s))
	require.Len(t, s.Classes, 3) // std, fast and fifo, every class of namespace t
	require.Equal(t, "std", s.Classes[0].Class, "the contended class sorts first")
	require.Equal(t, 1, s.Classes[0].Waiters)
	require.Equal(t, uint64(1), s.Classes[0].Grants, "lockd's own statistics are merged in")
	require.Positive(t, s.Classes[0].GrantP99Seconds)
	require.Equal(t, "t/hot", s.Hot[0].Key)
}

func TestBuildWithHistory(t *testing.T) {
	d := sample
	d.History = &lockv1.HistoryStatsResponse{Classes: []*lockv1.ClassHistory{
		{Namespace: "payments", Class: "ledger-writes", Grants: 900, Expiries: 4, LongestHold: durationpb.New(7 * time.Minute)},
		{Namespace: "batch", Class: "nightly", Grants: 1, LongestHold: durationpb.New(50 * time.Minute)},
	}}
	s := Build(at, d, "", SortName, 2)
	require.False(t, s.NoHistory)
	require.Len(t, s.Classes, 5, "a class with history but nothing now still shows")
	byRef := map[string]ClassRow{}
	for _, r := range s.Classes {
		byRef[r.Ref()] = r
	}
	led := byRef["payments/ledger-writes"]
	require.Equal(t, int64(4), *led.ExpiriesLastHour)
	require.Equal(t, 420.0, *led.LongestEndedLastHourSeconds)
	require.Nil(t, byRef["search/reindex"].ExpiriesLastHour, "no history for the class: shown as -, not 0")
	require.Equal(t, 3000.0, *byRef["batch/nightly"].LongestEndedLastHourSeconds)
	require.True(t, Build(at, sample, "", SortName, 2).NoHistory)
}

// TestOnceShowsTheHistorysLastHour: with the audit history on, --once fills
// the last-hour columns from it.
func TestOnceShowsTheHistorysLastHour(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	alice := env.Client(t, lockdtest.Alice)
	l, err := alice.Acquire(t.Context(), "t/once", "std", func(*client.Lock) {})
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, l.Release(t.Context()))
	raw, _ := env.Raw(t, lockdtest.Operator)
	require.Eventually(t, func() bool {
		h, err := raw.HistoryStats(t.Context(), &lockv1.HistoryStatsRequest{})
		return err == nil && len(h.GetClasses()) == 1 && h.GetClasses()[0].GetLongestHold().AsDuration() > 0
	}, 10*time.Second, 50*time.Millisecond)

	ios, _, out, _ := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Now: time.Now, Output: printer.FormatJSON}
	f.Client = func() (*client.Client, error) {
		return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(lockdtest.Alice))
	}
	cmd := NewCmdTop(f, nil)
	cmd.SetArgs([]string{"--once", "--prefix", "t/"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	require.NoError(t, cmd.ExecuteContext(t.Context()))
	var s Snapshot
	require.NoError(t, json.Unmarshal(out.Bytes(), &s))
	require.False(t, s.NoHistory)
	var std *ClassRow
	for i := range s.Classes {
		if s.Classes[i].Class == "std" {
			std = &s.Classes[i]
		}
	}
	require.NotNil(t, std)
	require.NotNil(t, std.ExpiriesLastHour)
	require.Zero(t, *std.ExpiriesLastHour)
	require.GreaterOrEqual(t, *std.LongestEndedLastHourSeconds, 0.3, "the hold alice kept for 300ms")
}

func TestFlags(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{"--sort fastest", "--sort must be contention, holds or name"},
		{"--interval 10ms", "--interval must be at least 500ms"},
	} {
		ios, _, _, _ := iostreams.Test()
		cmd := NewCmdTop(&cmdutil.Factory{IOStreams: ios}, func(*Options) error { return nil })
		cmd.SetArgs(strings.Fields(tt.args))
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		require.ErrorContains(t, cmd.Execute(), tt.want)
	}
}

// TestViewGolden renders the console over a fixed snapshot, drilled down
// to the hottest class's keys.
func TestViewGolden(t *testing.T) {
	m := newModel(&fakeSource{data: sample}, func() time.Time { return at }, time.Hour, "", SortContention, newStyles(false))
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(110, 30))
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("ledger-writes")) },
		teatest.WithDuration(5*time.Second))
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	final := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(model)
	teatest.RequireEqualOutput(t, []byte(final.View()))
}

// TestKeepsWorkingWhenLockdRestarts: with a real lockd, the view shows the
// error while lockd is down and recovers when it is back on its address.
func TestKeepsWorkingWhenLockdRestarts(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	addr := env.Addr
	alice := env.Client(t, lockdtest.Alice)
	_, err := alice.Acquire(t.Context(), "t/before", "std", func(*client.Lock) {})
	require.NoError(t, err)
	c, err := client.New(client.WithTarget(addr), client.WithInsecureIdentity(lockdtest.Operator))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	m := newModel(NewSource(c, "t/", 1000), time.Now, 500*time.Millisecond, "", SortContention, newStyles(false))
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(110, 30))
	out := tm.Output()
	waitFor := func(what string) {
		t.Helper()
		teatest.WaitFor(t, out, func(b []byte) bool { return bytes.Contains(b, []byte(what)) }, teatest.WithDuration(15*time.Second))
	}
	waitFor("std")
	env.Stop()
	waitFor("LOCKD UNREACHABLE")
	env2 := lockdtest.Start(t, lockdtest.Options{Addr: addr})
	bob := env2.Client(t, lockdtest.Bob)
	_, err = bob.Acquire(t.Context(), "t/fast/after", "fast", func(*client.Lock) {})
	require.NoError(t, err)
	waitFor("fast")
	require.NoError(t, tm.Quit())
	final := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(model)
	require.NoError(t, final.err, "the view still shows an error after lockd came back")
	_, _ = io.Copy(io.Discard, out)
}

// TestOnceGolden prints the --once snapshot of the same data as
// TestViewGolden in each table mode, so the two renderings stay one.
func TestOnceGolden(t *testing.T) {
	for _, m := range []struct {
		name       string
		tty, color bool
	}{{"table-tty", true, false}, {"table-color", true, true}, {"table-piped", false, false}} {
		t.Run(m.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			p := &printer.Printer{Format: printer.FormatTable, Out: &out, ErrOut: &errOut, TTY: m.tty, Color: m.color,
				Now: func() time.Time { return at }}
			require.NoError(t, p.Print(Build(at, sample, "", SortContention, 10)))
			got := out.String()
			if errOut.Len() > 0 {
				got += "--- stderr ---\n" + errOut.String()
			}
			golden.RequireEqual(t, []byte(got))
		})
	}
}
