package cost

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/golden"
)

// fakeSource serves fixed figures and fails the test on any call it was
// not set up for (a nil map).
type fakeSource struct {
	t        *testing.T
	sessions map[string]float64
	waits    map[Key]float64
	err      error
}

func (f *fakeSource) Sessions(context.Context) (map[string]float64, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.sessions == nil {
		f.t.Errorf("unexpected Sessions call")
	}
	return f.sessions, nil
}

func (f *fakeSource) WaitRates(context.Context) (map[Key]float64, error) {
	if f.waits == nil {
		f.t.Errorf("unexpected WaitRates call")
	}
	return f.waits, nil
}

func TestKeepalivesPerSecond(t *testing.T) {
	tests := []struct {
		name     string
		sessions float64
		ttl      time.Duration
		want     float64
	}{
		{"one session at 15s renews every 5s", 1, 15 * time.Second, 0.2},
		{"three sessions at 15s", 3, 15 * time.Second, 0.6},
		{"three sessions at 30s", 3, 30 * time.Second, 0.3},
		{"the seed's scale", 40000, 15 * time.Second, 8000},
		{"no sessions", 0, 5 * time.Second, 0},
		{"no ttl", 10, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, KeepalivesPerSecond(tt.sessions, tt.ttl), 1e-9)
		})
	}
}

func TestLivenessBound(t *testing.T) {
	require.Equal(t, 17*time.Second, LivenessBound(15*time.Second))
	require.Equal(t, 302*time.Second, LivenessBound(300*time.Second))
}

func TestDurableWritesPerSecond(t *testing.T) {
	tests := []struct {
		name     string
		fairness class.Fairness
		waiters  float64
		want     float64
	}{
		{"best-effort costs nothing", class.FairnessBestEffort, 10, 0},
		{"durable, two per waiter", class.FairnessDurable, 0.5, 1},
		{"durable, no waiters", class.FairnessDurable, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, DurableWritesPerSecond(tt.fairness, tt.waiters), 1e-9)
		})
	}
}

func TestFalseExpiryRisk(t *testing.T) {
	tests := []struct {
		name string
		enf  class.Enforcement
		ttl  time.Duration
		want bool
	}{
		{"advisory 30s", class.EnforcementAdvisory, 30 * time.Second, true},
		{"advisory 59s", class.EnforcementAdvisory, 59 * time.Second, true},
		{"advisory 60s", class.EnforcementAdvisory, 60 * time.Second, false},
		{"fenced 5s: the token fences", class.EnforcementFenced, 5 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FalseExpiryRisk(tt.enf, tt.ttl)
			require.Equal(t, tt.want, got != "", "risk %q", got)
			if tt.want {
				require.Contains(t, got, "duplicate writer")
			}
		})
	}
}

func TestNumber(t *testing.T) {
	for in, want := range map[float64]string{0.6: "0.6", 0.2: "0.2", 8000: "8000", 1200000: "1200000", 1.0 / 3: "0.33", -0.001: "0", 0: "0"} {
		require.Equal(t, want, Number(in), "Number(%v)", in)
	}
}

func cls(ns, name string, ttl time.Duration, mod ...func(*class.Class)) *class.Class {
	c := &class.Class{Namespace: ns, Name: name, Purpose: class.PurposeCorrectness, Enforcement: class.EnforcementFenced,
		TTL: ttl, Tier: class.TierEntity, OnQuorumLoss: class.QuorumLossClosed, Fairness: class.FairnessBestEffort, Resource: "db"}
	for _, m := range mod {
		m(c)
	}
	return c
}

func advisory(c *class.Class) {
	c.Enforcement, c.Purpose, c.Resource = class.EnforcementAdvisory, class.PurposeEfficiency, ""
	c.RiskOwner, c.WaiverExpires = "team-a", time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)
}

func durableFairness(c *class.Class) { c.Fairness = class.FairnessDurable }

func TestDiff(t *testing.T) {
	base := []*class.Class{
		cls("t", "same", 15*time.Second),
		cls("t", "std", 15*time.Second),
		cls("t", "gone", 15*time.Second),
		cls("t", "owner", 60*time.Second, advisory),
	}
	head := []*class.Class{
		cls("t", "owner", 60*time.Second, advisory, func(c *class.Class) {
			c.RiskOwner = "team-b"
			c.WaiverExpires = time.Time{}
		}),
		cls("t", "std", 30*time.Second),
		cls("t", "same", 15*time.Second, func(c *class.Class) { c.Source, c.Line = "elsewhere.yaml", 40 }),
		cls("a", "new", 15*time.Second),
	}
	got := Diff(base, head)
	var summary []string
	for _, c := range got {
		summary = append(summary, c.Kind.Mark()+" "+c.Name()+" "+c.describe())
	}
	require.Equal(t, []string{
		"+ a/new added (ttl 15s)",
		"− t/gone removed",
		"~ t/owner riskOwner team-a → team-b, waiverExpires 2027-01-31 → (none)",
		"~ t/std ttl 15s → 30s",
	}, summary)
}

// TestDiffSeesEverySpecField fails when class.Class gains a spec field that
// Diff does not compare.
func TestDiffSeesEverySpecField(t *testing.T) {
	notSpec := map[string]bool{"Namespace": true, "Name": true, "Source": true, "Line": true}
	base := cls("t", "x", 15*time.Second, advisory)
	typ := reflect.TypeFor[class.Class]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if notSpec[f.Name] {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			head := *base
			v := reflect.ValueOf(&head).Elem().Field(i)
			switch x := v.Addr().Interface().(type) {
			case *time.Duration:
				*x += time.Second
			case *time.Time:
				*x = x.Add(24 * time.Hour)
			case *[]string:
				*x = append(slices.Clone(*x), "t/changed/")
			default:
				require.Equal(t, reflect.String, v.Kind(), "teach this test to change a %s", v.Type())
				v.SetString(v.String() + "-changed")
			}
			require.Len(t, diffFields(base, &head), 1, "a change of %s is not reported", f.Name)
		})
	}
}

func TestPrice(t *testing.T) {
	tests := []struct {
		name       string
		base, head []*class.Class
		src        *fakeSource
		check      func(t *testing.T, cs []Change, notes []string)
	}{
		{
			name: "ttl doubles: keepalives halve, liveness grows",
			base: []*class.Class{cls("t", "std", 15*time.Second)},
			head: []*class.Class{cls("t", "std", 30*time.Second)},
			src:  &fakeSource{sessions: map[string]float64{"t": 3}},
			check: func(t *testing.T, cs []Change, notes []string) {
				require.Len(t, cs, 1)
				c := cs[0]
				require.True(t, c.SessionsKnown)
				require.Equal(t, 3.0, c.Sessions)
				require.InDelta(t, 0.6, c.Before.KeepalivesPerSecond, 1e-9)
				require.InDelta(t, 0.3, c.After.KeepalivesPerSecond, 1e-9)
				require.Equal(t, 17.0, c.Before.LivenessBoundSeconds)
				require.Equal(t, 32.0, c.After.LivenessBoundSeconds)
				require.Empty(t, c.Risks)
				require.Empty(t, notes)
			},
		},
		{
			name: "no data for a namespace is said and priced at zero",
			head: []*class.Class{cls("ghost", "x", 15*time.Second), cls("ghost", "y", 15*time.Second)},
			src:  &fakeSource{sessions: map[string]float64{"t": 3}},
			check: func(t *testing.T, cs []Change, notes []string) {
				require.Len(t, cs, 2)
				require.False(t, cs[0].SessionsKnown)
				require.Zero(t, cs[0].After.KeepalivesPerSecond)
				require.Nil(t, cs[0].Before)
				require.Equal(t, []string{"no data for namespace ghost in Prometheus: assumed 0 sessions"}, notes)
			},
		},
		{
			name: "short advisory ttl is a false-expiry risk",
			base: []*class.Class{cls("t", "cache", 60*time.Second, advisory)},
			head: []*class.Class{cls("t", "cache", 30*time.Second, advisory)},
			src:  &fakeSource{sessions: map[string]float64{"t": 10}},
			check: func(t *testing.T, cs []Change, _ []string) {
				require.Len(t, cs[0].Risks, 1)
				require.Contains(t, cs[0].Risks[0], "longer than 30s means a duplicate writer")
			},
		},
		{
			name: "durable costs two writes per waiter",
			base: []*class.Class{cls("t", "q", 15*time.Second)},
			head: []*class.Class{cls("t", "q", 15*time.Second, durableFairness)},
			src:  &fakeSource{sessions: map[string]float64{"t": 1}, waits: map[Key]float64{{"t", "q"}: 4}},
			check: func(t *testing.T, cs []Change, _ []string) {
				c := cs[0]
				require.Equal(t, 4.0, c.WaitersPerSecond)
				require.Zero(t, c.Before.DurableWritesPerSecond)
				require.Equal(t, 8.0, c.After.DurableWritesPerSecond)
				require.Len(t, c.Risks, 1)
				require.Contains(t, c.Risks[0], "= up to 8 writes/s")
			},
		},
		{
			name: "durable without waiter data is said",
			head: []*class.Class{cls("t", "q", 15*time.Second, durableFairness)},
			src:  &fakeSource{sessions: map[string]float64{"t": 1}, waits: map[Key]float64{}},
			check: func(t *testing.T, cs []Change, notes []string) {
				require.Zero(t, cs[0].After.DurableWritesPerSecond)
				require.Equal(t, []string{"no data for lockd_waits_total of class t/q in Prometheus: assumed 0 waiters/s"}, notes)
			},
		},
		{
			name: "no changes: Prometheus is still asked for sessions, so a bad URL shows",
			base: []*class.Class{cls("t", "std", 15*time.Second)},
			head: []*class.Class{cls("t", "std", 15*time.Second)},
			src:  &fakeSource{sessions: map[string]float64{}},
			check: func(t *testing.T, cs []Change, notes []string) {
				require.Empty(t, cs)
				require.Empty(t, notes)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.src.t = t
			cs := Diff(tt.base, tt.head)
			notes, err := Price(t.Context(), cs, tt.src)
			require.NoError(t, err)
			tt.check(t, cs, notes)
		})
	}
}

func TestPriceSourceError(t *testing.T) {
	boom := errors.New("connection refused")
	_, err := Price(t.Context(), Diff(nil, []*class.Class{cls("t", "x", 15*time.Second)}), &fakeSource{t: t, err: boom})
	require.ErrorIs(t, err, boom)
}

// goldenReport has one change of every kind, a durable class, a risk, a
// namespace without data and a move of every kind: keys that change tier,
// keys whose class turns open on quorum loss, and keys left without a
// class.
func goldenReport(t *testing.T) *Report {
	keys := func(k ...string) func(*class.Class) { return func(c *class.Class) { c.Keys = k } }
	base := []*class.Class{
		cls("payments", "ledger-writes", 15*time.Second, keys("payments/ledger/")),
		cls("payments", "report-export", 60*time.Second, advisory, keys("payments/reports/")),
		cls("payments", "old-batch", 120*time.Second, keys("payments/batch/")),
		cls("platform", "jobs", 15*time.Second, keys("platform/jobs/")),
	}
	head := []*class.Class{
		cls("payments", "ledger-writes", 30*time.Second, keys("payments/ledger/"), func(c *class.Class) { c.Resource = "ledger|v2" }),
		cls("payments", "report-export", 30*time.Second, advisory, keys("payments/reports/"), func(c *class.Class) { c.OnQuorumLoss = class.QuorumLossOpen }),
		cls("platform", "jobs", 15*time.Second, durableFairness, keys("platform/jobs/"), func(c *class.Class) { c.Tier = class.TierCoord }),
		cls("search", "reindex", 45*time.Second, keys("search/")),
	}
	src := &fakeSource{t: t,
		sessions: map[string]float64{"payments": 1200, "platform": 40},
		waits:    map[Key]float64{{"platform", "jobs"}: 2.5},
	}
	r, err := Estimate(t.Context(), base, head, src)
	require.NoError(t, err)
	r.Dir = "classes"
	r.Base = Base{Ref: "origin/main", Commit: "0123456789abcdef0123456789abcdef01234567"}
	r.Prometheus = "http://prometheus:9090"
	return r
}

func TestGolden(t *testing.T) {
	r := goldenReport(t)
	var text, js bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	require.NoError(t, r.WriteJSON(&js))
	assertGolden(t, "report.txt", text.String())
	assertGolden(t, "report.md", r.Markdown())
	assertGolden(t, "report.json", js.String())

	empty, err := Estimate(t.Context(), nil, nil, &fakeSource{t: t, sessions: map[string]float64{}})
	require.NoError(t, err)
	empty.Dir, empty.Prometheus = "classes", "http://prometheus:9090"
	empty.Base = Base{Ref: "HEAD", Commit: "0123456789abcdef", Note: "origin/main not found: compared with HEAD instead (pass --base to choose)"}
	empty.Notes = []string{empty.Base.Note} // as Compare puts it
	text.Reset()
	require.NoError(t, empty.WriteText(&text))
	assertGolden(t, "empty.txt", text.String())
	assertGolden(t, "empty.md", empty.Markdown())
}

func TestMarkdownEscapesCells(t *testing.T) {
	md := goldenReport(t).Markdown()
	require.Contains(t, md, `ledger\|v2`)
	cells := func(line string) int { return strings.Count(line, "|") - strings.Count(line, `\|`) }
	var header string
	for _, line := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(line, "| | class"):
			header = line
		case strings.HasPrefix(line, "| "):
			require.Equal(t, cells(header), cells(line), "row %q has the wrong number of cells", line)
		}
	}
	require.NotEmpty(t, header)
}

func TestKindMark(t *testing.T) {
	require.Equal(t, "+", Added.Mark())
	require.Equal(t, "−", Removed.Mark())
	require.Equal(t, "~", Changed.Mark())
}

// assertGolden compares got with testdata/<name>.golden.
func assertGolden(t *testing.T, name, got string) {
	t.Helper()
	golden.Assert(t, name, []byte(got))
}
