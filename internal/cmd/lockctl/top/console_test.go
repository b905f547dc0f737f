package top

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// fakeSource serves fixed data; tests change it between refreshes.
type fakeSource struct {
	mu       sync.Mutex
	data     Data
	err      error
	inspect  map[string]*lockv1.InspectResponse
	frErr    error
	requests []string // "key: reason" of each force-release request
}

func (f *fakeSource) Fetch(context.Context) (Data, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.data, f.err
}

func (f *fakeSource) Inspect(_ context.Context, key string) (*lockv1.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in, ok := f.inspect[key]; ok {
		return in, nil
	}
	return &lockv1.InspectResponse{}, nil
}

func (f *fakeSource) RequestForceRelease(_ context.Context, key, reason string) (*lockv1.ForceRelease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, key+": "+reason)
	if f.frErr != nil {
		return nil, f.frErr
	}
	return &lockv1.ForceRelease{Id: "fr-7", Key: key, Reason: reason}, nil
}

func (f *fakeSource) set(d Data, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data, f.err = d, err
}

// ledger1 is payments/ledger/1 inspected: 12s of session left, three
// waiters in line.
var ledger1 = &lockv1.InspectResponse{Held: true, Waiters: 3,
	Hold: &lockv1.Hold{Key: "payments/ledger/1", Class: "payments/ledger-writes", Holder: "spiffe://example.org/w", SessionId: 42,
		Age: durationpb.New(40 * time.Second), SessionTtlLeft: durationpb.New(12 * time.Second),
		Token: &lockv1.Token{Value: 281474976710777}},
	Queue: []*lockv1.Waiter{
		{Identity: "spiffe://example.org/a", SessionId: 43, Waited: durationpb.New(9 * time.Second), Position: 1},
		{Identity: "spiffe://example.org/b", SessionId: 44, Waited: durationpb.New(4 * time.Second), Position: 2},
		{Identity: "spiffe://example.org/c", SessionId: 45, Waited: durationpb.New(time.Second), Position: 3},
	}}

// sampleWithClasses is sample with the class TTLs ListClasses reports.
func sampleWithClasses() Data {
	d := sample
	d.Classes = &lockv1.ListClassesResponse{Classes: []*lockv1.LockClass{
		{Namespace: "payments", Name: "ledger-writes", Ttl: durationpb.New(30 * time.Second)},
		{Namespace: "platform", Name: "leader-election", Ttl: durationpb.New(15 * time.Second)},
	}}
	return d
}

func newFake() *fakeSource {
	return &fakeSource{data: sampleWithClasses(), inspect: map[string]*lockv1.InspectResponse{"payments/ledger/1": ledger1}}
}

// console starts the console over src at the fixed clock, on a 120x35
// terminal, and waits for the first refresh.
func console(t *testing.T, src Source, color bool) *teatest.TestModel {
	t.Helper()
	m := newModel(src, func() time.Time { return at }, time.Hour, "", SortContention, newStyles(color))
	m.secrets = []string{"s3cr3t-operator-token"}
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(120, 35))
	waitOut(t, tm, "ledger-writes")
	return tm
}

func waitOut(t *testing.T, tm *teatest.TestModel, what string) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(what)) },
		teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
}

// keys sends each rune as a key press; words in <> are named keys.
func keys(tm *teatest.TestModel, s string) {
	named := map[string]tea.KeyType{"<enter>": tea.KeyEnter, "<esc>": tea.KeyEsc, "<down>": tea.KeyDown, "<up>": tea.KeyUp,
		"<backspace>": tea.KeyBackspace, "<space>": tea.KeySpace}
	for s != "" {
		if strings.HasPrefix(s, "<") {
			end := strings.Index(s, ">") + 1
			tm.Send(tea.KeyMsg{Type: named[s[:end]]})
			s = s[end:]
			continue
		}
		r := []rune(s)[0]
		tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
		s = s[len(string(r)):]
	}
}

// final quits and returns the console as it was last drawn.
func final(t *testing.T, tm *teatest.TestModel) model {
	t.Helper()
	require.NoError(t, tm.Quit())
	return tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(model)
}

// TestConsoleKeys: the cursor, the filter as you type, the sort cycle and
// the help overlay, each ending in a golden of the screen.
func TestConsoleKeys(t *testing.T) {
	for _, tt := range []struct {
		name, keys string
		check      func(t *testing.T, m model)
	}{
		{"cursor-down", "jj", func(t *testing.T, m model) { require.Equal(t, 2, m.classCur) }},
		{"cursor-arrows-clamp", "<down><down><down><down><down><down><up>", func(t *testing.T, m model) { require.Equal(t, 2, m.classCur) }},
		{"cursor-up-stops-at-top", "jkkk", func(t *testing.T, m model) { require.Equal(t, 0, m.classCur) }},
		{"filter-typing", "/ledg", func(t *testing.T, m model) {
			require.True(t, m.typing)
			require.Len(t, m.snap.Classes, 1)
			require.Equal(t, "ledger-writes", m.snap.Classes[0].Class)
		}},
		{"filter-kept", "/plat<enter>", func(t *testing.T, m model) {
			require.False(t, m.typing)
			require.Equal(t, "plat", m.filter)
			require.Len(t, m.snap.Classes, 1)
		}},
		{"filter-backspace", "/plat<backspace><backspace><backspace>", func(t *testing.T, m model) {
			require.Equal(t, "p", m.filter)
			require.Len(t, m.snap.Classes, 3, "payments x2 and platform")
		}},
		{"filter-esc-clears", "/ledg<esc>", func(t *testing.T, m model) {
			require.Empty(t, m.filter)
			require.Len(t, m.snap.Classes, 4)
		}},
		{"filter-q-is-text", "/q", func(t *testing.T, m model) { require.Equal(t, "q", m.filter) }},
		{"sort-holds", "s", func(t *testing.T, m model) {
			require.Equal(t, SortHolds, m.sortBy)
			require.Equal(t, "ledger-writes", m.snap.Classes[0].Class)
		}},
		{"sort-name", "ss", func(t *testing.T, m model) {
			require.Equal(t, SortName, m.sortBy)
			require.Equal(t, []string{"payments", "payments", "platform", "search"},
				[]string{m.snap.Classes[0].Namespace, m.snap.Classes[1].Namespace, m.snap.Classes[2].Namespace, m.snap.Classes[3].Namespace})
		}},
		{"sort-cycles-back", "sss", func(t *testing.T, m model) { require.Equal(t, SortContention, m.sortBy) }},
		{"help", "?", func(t *testing.T, m model) {
			require.True(t, m.help)
			for _, k := range helpKeys {
				require.Contains(t, m.View(), k[0])
			}
		}},
		{"help-closes", "?<esc>", func(t *testing.T, m model) { require.False(t, m.help) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tm := console(t, newFake(), false)
			keys(tm, tt.keys)
			m := final(t, tm)
			tt.check(t, m)
			golden.RequireEqual(t, []byte(m.View()))
		})
	}
}

// TestConsoleQuits: q ends the program by itself.
func TestConsoleQuits(t *testing.T) {
	tm := console(t, newFake(), false)
	keys(tm, "q")
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
}

// TestConsoleDrillDown: enter opens a class's hottest keys, then a key's
// holder, session and waiters; esc and backspace go back.
func TestConsoleDrillDown(t *testing.T) {
	t.Run("class-keys", func(t *testing.T) {
		tm := console(t, newFake(), false)
		keys(tm, "<enter>")
		m := final(t, tm)
		require.Equal(t, screenKeys, m.screen)
		require.Equal(t, "payments/ledger-writes", m.class)
		require.Len(t, m.keys(), 2)
		require.Equal(t, "payments/ledger/1", m.keys()[0].Key, "most waiters first")
		golden.RequireEqual(t, []byte(m.View()))
	})
	t.Run("key", func(t *testing.T) {
		tm := console(t, newFake(), false)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history: lockctl history ")
		m := final(t, tm)
		v := m.View()
		require.Equal(t, screenKey, m.screen)
		require.Contains(t, v, "spiffe://example.org/w (session 42)")
		require.Contains(t, v, "12s (counting down")
		require.Less(t, strings.Index(v, "example.org/a"), strings.Index(v, "example.org/b"), "waiters in queue order")
		require.Less(t, strings.Index(v, "example.org/b"), strings.Index(v, "example.org/c"))
		require.NotContains(t, v, "281474976710777", "never a token on screen")
		golden.RequireEqual(t, []byte(v))
	})
	t.Run("key-from-a-lockd-without-queue-or-ttl", func(t *testing.T) {
		src := newFake()
		src.inspect["payments/ledger/1"] = &lockv1.InspectResponse{Held: true, Waiters: 3, Hold: &lockv1.Hold{
			Key: "payments/ledger/1", Class: "payments/ledger-writes", Holder: "spiffe://example.org/w", Age: durationpb.New(time.Second)}}
		tm := console(t, src, false)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history: lockctl history ")
		v := final(t, tm).View()
		require.Contains(t, v, "3 waiting (this lockd does not list the queue)")
		require.Contains(t, v, "session left   not reported by this lockd")
		golden.RequireEqual(t, []byte(v))
	})
	t.Run("esc-back-to-keys", func(t *testing.T) {
		tm := console(t, newFake(), false)
		keys(tm, "j<enter><enter>")
		waitOut(t, tm, "history: lockctl history ")
		keys(tm, "<esc>")
		m := final(t, tm)
		require.Equal(t, screenKeys, m.screen)
		require.Equal(t, "platform/leader-election", m.class, "the cursor's class was opened")
		golden.RequireEqual(t, []byte(m.View()))
	})
	t.Run("backspace-back-to-classes", func(t *testing.T) {
		tm := console(t, newFake(), false)
		keys(tm, "j<enter><backspace>")
		m := final(t, tm)
		require.Equal(t, screenClasses, m.screen)
		require.Equal(t, 1, m.classCur, "the cursor stays where it was")
		golden.RequireEqual(t, []byte(m.View()))
	})
}

// TestConsoleTTLCountsDown: the session's time left counts down on the
// local clock between lockd's readings, and turns "expiring soon" under a
// third of the class TTL.
func TestConsoleTTLCountsDown(t *testing.T) {
	tm := console(t, newFake(), false)
	keys(tm, "<enter><enter>")
	waitOut(t, tm, "history: lockctl history ")
	tm.Send(clockMsg(at.Add(3 * time.Second)))
	waitOut(t, tm, "9s (counting down")
	tm.Send(clockMsg(at.Add(4 * time.Second)))
	m := final(t, tm)
	v := m.View()
	require.Contains(t, v, "8s (counting down here from lockd's reading 4s ago")
	require.Contains(t, v, "expiring soon", "8s is under a third of the 30s TTL")
	require.Contains(t, v, "held for       44s")
	golden.RequireEqual(t, []byte(v))
}

// TestConsoleSparklines: successive ClassStats polls become grants/s, p99
// and waiter sparklines for the class under the cursor.
func TestConsoleSparklines(t *testing.T) {
	tm := console(t, newFake(), false)
	for i, grants := range []uint64{1210, 1230, 1230, 1290} {
		d := sampleWithClasses()
		d.Stats = &lockv1.ClassStatsResponse{Stats: []*lockv1.ClassStat{{Namespace: "payments", Class: "ledger-writes",
			Grants: grants, GrantLatencyP99: durationpb.New(time.Duration(10*(i+1)) * time.Millisecond)}}}
		tm.Send(fetchedMsg{at: at.Add(time.Duration(2*(i+1)) * time.Second), data: d})
	}
	m := final(t, tm)
	require.Len(t, m.hist["payments/ledger-writes"], 5)
	require.Equal(t, []float64{5, 10, 0, 30}, m.hist.grantRate("payments/ledger-writes"))
	v := m.View()
	require.Contains(t, v, "▂▃▁█ ")
	require.Contains(t, v, "30.0/s")
	golden.RequireEqual(t, []byte(v))
}

func TestHistoryIsBounded(t *testing.T) {
	h := history{}
	for i := range 3 * historyLen {
		h.add(at.Add(time.Duration(i)*time.Second), []ClassRow{{Namespace: "n", Class: "c", Grants: uint64(i)}})
	}
	require.Len(t, h["n/c"], historyLen)
	require.Equal(t, at.Add(time.Duration(3*historyLen-1)*time.Second), h["n/c"][historyLen-1].at)
	require.Equal(t, time.Duration(historyLen-1)*time.Second, h.span("n/c"))
	h.add(at.Add(time.Hour), []ClassRow{{Namespace: "n", Class: "c", Grants: 0}})
	rate := h.grantRate("n/c")
	require.Zero(t, rate[len(rate)-1], "a restarted lockd's counter going down is no grants, not a negative rate")
	require.Equal(t, "▁▄█", sparkline([]float64{0, 1, 2}))
	require.Equal(t, "▁▁", sparkline([]float64{0, 0}))
}

// TestConsoleColour: colour marks contention and sessions expiring soon,
// only when colour is enabled; NO_COLOR and a non-terminal give none.
func TestConsoleColour(t *testing.T) {
	red := "\x1b[91m"
	t.Run("colour", func(t *testing.T) {
		tm := console(t, newFake(), true)
		m := final(t, tm)
		v := m.View()
		require.Contains(t, v, red+"platform", "a class with waiters is red")
		require.Contains(t, v, "> \x1b[7;91mpayments", "the cursor row is reversed, and red too")
		require.Contains(t, v, "  search         reindex", "a class without waiters is plain")
		golden.RequireEqual(t, []byte(v))
	})
	t.Run("soon-yellow", func(t *testing.T) {
		tm := console(t, newFake(), true)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history")
		tm.Send(clockMsg(at.Add(4 * time.Second)))
		m := final(t, tm)
		require.Contains(t, m.View(), "\x1b[93m8s (counting down")
	})
	for _, tt := range []struct {
		name          string
		tty, noColour bool
	}{{"no-color", true, true}, {"not-a-tty", false, false}} {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			ios.SetStdoutTTY(tt.tty)
			ios.SetNoColor(tt.noColour)
			tm := console(t, newFake(), ios.ColorEnabled())
			m := final(t, tm)
			require.NotContains(t, m.View(), "\x1b[")
		})
	}
}

// TestConsoleBanners: sealed, epoch grace and unreachable each get a
// banner, and the last good data stays on screen.
func TestConsoleBanners(t *testing.T) {
	sealed := sampleWithClasses()
	sealed.Epoch = &lockv1.EpochStatusResponse{Epoch: 3, Sealed: true, SealedReason: "the store's cluster ID changed (a restore)"}
	sealedEntity := sampleWithClasses()
	sealedEntity.Epoch = &lockv1.EpochStatusResponse{Cluster: "eu-west-coord", Epoch: 3, Clusters: []*lockv1.EpochStatusResponse{
		{Cluster: "eu-west-coord", Epoch: 3},
		{Cluster: "eu-west-entity", Epoch: 4, Sealed: true, SealedReason: "the store's cluster ID changed (a restore)"},
	}}
	open := sampleWithClasses()
	open.Stats = &lockv1.ClassStatsResponse{Stats: append([]*lockv1.ClassStat{
		{Namespace: "payments", Class: "cache", Grants: 9, UnprotectedGrants: 4}}, open.Stats.GetStats()...)}
	for _, tt := range []struct {
		name string
		data Data
		err  error
		want string
	}{
		{"sealed", sealed, nil, " SEALED  lockd refuses every grant until operators advance the epoch: the store's cluster ID changed"},
		{"sealed-cluster", sealedEntity, nil, " SEALED  cluster eu-west-entity: lockd refuses every grant of its keys until operators"},
		{"unprotected", open, nil, " UNPROTECTED  unprotected grants (token 0, made without an etcd quorum) since this lockd started: 4 of payments/cache"},
		{"unreachable", Data{}, status.Error(codes.Unavailable, "connection refused"), " LOCKD UNREACHABLE  showing the last good data, from 12:00:00"},
		{"refresh-failed", Data{}, status.Error(codes.PermissionDenied, "denied"), " REFRESH FAILED  showing the last good data"},
		{"epoch-grace", Data{}, reasoned(t, codes.FailedPrecondition, "EPOCH_GRACE", "arbiter: epoch grace"), " EPOCH GRACE  the epoch just advanced"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := newFake()
			tm := console(t, src, false)
			if tt.err == nil {
				src.set(tt.data, nil)
			} else {
				src.set(Data{}, tt.err)
			}
			keys(tm, "r")
			waitOut(t, tm, strings.Fields(tt.want)[0])
			m := final(t, tm)
			v := m.View()
			require.Contains(t, v, tt.want)
			require.Contains(t, v, "ledger-writes", "the last good data stays")
			golden.RequireEqual(t, []byte(v))
		})
	}
}

func reasoned(t *testing.T, code codes.Code, reason, msg string) error {
	t.Helper()
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "lockd.dev"})
	require.NoError(t, err)
	return st.Err()
}

// TestConsoleForceRelease: f on a key asks for a reason inline, requests
// the force-release and says who must approve it; a failure is shown in
// the banner with any token blanked.
func TestConsoleForceRelease(t *testing.T) {
	t.Run("requested", func(t *testing.T) {
		src := newFake()
		tm := console(t, src, false)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history")
		keys(tm, "fINC-1<space>holder<space>wedgedq")
		waitOut(t, tm, "wedgedq")
		keys(tm, "<backspace><enter>")
		waitOut(t, tm, "approve fr-7")
		m := final(t, tm)
		require.Equal(t, []string{"payments/ledger/1: INC-1 holder wedged"}, src.requests)
		v := m.View()
		require.Contains(t, v, "force-release of payments/ledger/1 requested: id fr-7.\nA second operator must approve it: lockctl force-release approve fr-7")
		golden.RequireEqual(t, []byte(v))
	})
	t.Run("prompt", func(t *testing.T) {
		tm := console(t, newFake(), false)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history")
		keys(tm, "fINC-2")
		m := final(t, tm)
		require.True(t, m.asking)
		golden.RequireEqual(t, []byte(m.View()))
	})
	t.Run("reason-required", func(t *testing.T) {
		src := newFake()
		tm := console(t, src, false)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history")
		keys(tm, "f<space><enter>")
		m := final(t, tm)
		require.Empty(t, src.requests)
		require.Contains(t, m.View(), "a reason is required")
	})
	t.Run("esc-cancels", func(t *testing.T) {
		src := newFake()
		tm := console(t, src, false)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history")
		keys(tm, "fabc<esc>")
		m := final(t, tm)
		require.Empty(t, src.requests)
		require.False(t, m.asking)
		require.Equal(t, screenKey, m.screen, "esc cancels the prompt, it does not leave the key")
	})
	t.Run("error-never-shows-a-token", func(t *testing.T) {
		src := newFake()
		src.frErr = errors.New("rpc error: code = Unauthenticated desc = bad token s3cr3t-operator-token (authorization: Bearer eyJhbGciOi.x.y)")
		tm := console(t, src, false)
		keys(tm, "<enter><enter>")
		waitOut(t, tm, "history")
		keys(tm, "fwhy<enter>")
		waitOut(t, tm, "FAILED")
		m := final(t, tm)
		v := m.View()
		require.NotContains(t, v, "s3cr3t")
		require.NotContains(t, v, "eyJhbGciOi")
		require.Contains(t, v, " FAILED  rpc error: code = Unauthenticated desc = bad token [redacted] (authorization: Bearer [redacted]")
		golden.RequireEqual(t, []byte(v))
	})
	t.Run("only-on-a-key", func(t *testing.T) {
		tm := console(t, newFake(), false)
		keys(tm, "f")
		m := final(t, tm)
		require.False(t, m.asking)
	})
}

func TestWrap(t *testing.T) {
	require.Equal(t, []string{"aaa bbb ccc"}, wrap("aaa bbb ccc", 20), "fits")
	require.Equal(t, []string{strings.Repeat("a", 20), "aaaaa b"}, wrap(strings.Repeat("a", 25)+" b", 20))
	require.Equal(t, []string{"one two three four", "five"}, wrap("one two three four five", 20))
	require.Equal(t, []string{""}, wrap("", 20))
}

// TestRefreshKeepsOneTickChain: r refreshes at once without starting a
// second refresh loop (each r used to add one).
func TestRefreshKeepsOneTickChain(t *testing.T) {
	m := newModel(newFake(), func() time.Time { return at }, time.Hour, "", SortContention, newStyles(false))
	_, cmd := m.Update(fetchedMsg{at: at, data: sample, next: false})
	require.Nil(t, cmd, "a refresh asked for with r schedules no tick")
	_, cmd = m.Update(fetchedMsg{at: at, data: sample, next: true})
	require.NotNil(t, cmd, "the tick chain's refresh schedules the next tick")
	_, cmd = m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	require.False(t, cmd().(fetchedMsg).next)
}

// sharded is sampleWithClasses on a lockd fronting a coord cluster and two
// entity shards: the ledger keys on shard-2, the rest on the first shard,
// shard-3 holding nothing and sealed.
func sharded() Data {
	d := sampleWithClasses()
	on := map[string]string{"payments/ledger/1": "shard-2", "payments/ledger/2": "shard-2", "payments/export/1": "entity", "platform/leader": "entity"}
	var holds []*lockv1.Hold
	for _, h := range d.Holds.GetHolds() {
		c := proto.Clone(h).(*lockv1.Hold)
		c.Cluster = on[h.GetKey()]
		holds = append(holds, c)
	}
	d.Holds = &lockv1.ListHoldsResponse{Holds: holds}
	d.Epoch = &lockv1.EpochStatusResponse{Cluster: "coord", Epoch: 1, Clusters: []*lockv1.EpochStatusResponse{
		{Cluster: "coord", Epoch: 1}, {Cluster: "entity", Epoch: 2}, {Cluster: "shard-2", Epoch: 3},
		{Cluster: "shard-3", Epoch: 4, Sealed: true, SealedReason: "no epoch record (a new or rebuilt cluster)"},
	}}
	return d
}

// TestBuildGroupsByShard: the same holds grouped by the etcd cluster they
// are on; every cluster lockd fronts is a row, held or not, sealed ones
// marked; the sort applies; hot keys say their shard.
func TestBuildGroupsByShard(t *testing.T) {
	s := Build(at, sharded(), "", SortContention, 10)
	require.Equal(t, []ShardRow{
		{Cluster: "shard-2", Contention: Contention{Holds: 2, Waiters: 3, Contended: 1, Ratio: 0.5, LongestHoldSeconds: 40}},
		{Cluster: "entity", Contention: Contention{Holds: 2, Waiters: 1, Contended: 1, Ratio: 0.5, LongestHoldSeconds: 300}},
		{Cluster: "coord"},
		{Cluster: "shard-3", Sealed: true},
	}, s.Shards)
	require.Equal(t, "shard-2", s.Hot[0].Cluster)
	require.Equal(t, []string{"coord", "entity", "shard-2", "shard-3"}, clustersOf(Build(at, sharded(), "", SortName, 10).Shards))
	require.Equal(t, []string{"entity", "shard-2", "coord", "shard-3"}, clustersOf(Build(at, sharded(), "", SortHolds, 10).Shards))
	f := Build(at, sharded(), "export", SortHolds, 10)
	require.Equal(t, "entity", f.Shards[0].Cluster)
	require.Equal(t, 1, f.Shards[0].Holds, "the filter applies to the shard rows too")
	require.Zero(t, f.Shards[1].Holds)
	require.Equal(t, []string{"payments/ledger/1", "payments/ledger/2"}, keysOf(ShardKeys(sharded(), "shard-2", "", 10)))
}

func clustersOf(rows []ShardRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Cluster)
	}
	return out
}

func keysOf(keys []HotKey) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Key)
	}
	return out
}

// TestConsoleGroupsByShard: tab turns the table into one row per shard,
// enter opens a shard's hottest keys (each with its class), esc goes back
// to the shards and tab to the classes, whose keys then say their shard.
func TestConsoleGroupsByShard(t *testing.T) {
	src := newFake()
	src.set(sharded(), nil)
	t.Run("shards", func(t *testing.T) {
		tm := console(t, src, false) // the first refresh has the shards
		tm.Send(tea.KeyMsg{Type: tea.KeyTab})
		waitOut(t, tm, "CLUSTER")
		m := final(t, tm)
		require.True(t, m.byShard)
		v := m.View()
		require.Contains(t, v, "lockctl top › shards")
		require.Regexp(t, `> shard-2 +2 +3 +50%`, v, "the most contended shard first, under the cursor")
		require.Regexp(t, `shard-3 +0 +0 +0% +0s SEALED`, v)
		golden.RequireEqual(t, []byte(v))
	})
	t.Run("shard-keys", func(t *testing.T) {
		tm := console(t, src, false) // the first refresh has the shards
		tm.Send(tea.KeyMsg{Type: tea.KeyTab})
		keys(tm, "j<enter>")
		waitOut(t, tm, "› shard entity")
		m := final(t, tm)
		require.Equal(t, screenKeys, m.screen)
		require.Equal(t, "entity", m.shard)
		require.Equal(t, []string{"platform/leader", "payments/export/1"}, keysOf(m.keys()))
		v := m.View()
		require.Regexp(t, `platform/leader +platform/leader-election +1`, v, "a shard's keys say their class")
		golden.RequireEqual(t, []byte(v))
	})
	t.Run("class-keys-say-their-shard", func(t *testing.T) {
		tm := console(t, src, false) // the first refresh has the shards
		tm.Send(tea.KeyMsg{Type: tea.KeyTab})
		keys(tm, "<enter><esc>")
		tm.Send(tea.KeyMsg{Type: tea.KeyTab})
		keys(tm, "<enter>")
		m := final(t, tm)
		require.False(t, m.byShard)
		require.Equal(t, "payments/ledger-writes", m.class)
		require.Regexp(t, `payments/ledger/1 +shard-2 +3`, m.View())
	})
}

// TestOnceGroupsByShard: --once --group shard prints the shard table; the
// JSON is the whole snapshot, shards included.
func TestOnceGroupsByShard(t *testing.T) {
	var out, errOut bytes.Buffer
	p := &printer.Printer{Format: printer.FormatTable, Out: &out, ErrOut: &errOut, TTY: true, Now: func() time.Time { return at }}
	require.NoError(t, p.Print(ByShard{Build(at, sharded(), "", SortContention, 10)}))
	golden.RequireEqual(t, out.Bytes())
	p.TTY = false

	out.Reset()
	p.Format = printer.FormatJSON
	require.NoError(t, p.Print(ByShard{Build(at, sharded(), "", SortContention, 10)}))
	var s Snapshot
	require.NoError(t, json.Unmarshal(out.Bytes(), &s))
	require.Len(t, s.Shards, 4)
	require.Len(t, s.Classes, 4, "the JSON keeps the classes")

	out.Reset()
	p.Format = printer.FormatTable
	require.NoError(t, p.Print(ByShard{Build(at, sample, "", SortContention, 10)}))
	require.Contains(t, out.String()+errOut.String(), "lockd fronts one etcd cluster: there are no shards to group by")
}
