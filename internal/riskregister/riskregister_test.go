package riskregister

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/golden"
)

// now is the clock the golden files are rendered against.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestDaysLeftAndStatus(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name    string
		expires time.Time
		days    int
		status  Status
	}{
		{"lapsed three and a half days ago", now.Add(-3*day - 12*time.Hour), -4, StatusExpired},
		{"lapsed a moment ago", now.Add(-time.Nanosecond), -1, StatusExpired},
		{"lapses now: expired, as lockd sees it", now, 0, StatusExpired},
		{"lapses in a moment", now.Add(time.Nanosecond), 0, StatusExpiring},
		{"lapses in ten days", now.Add(10 * day), 10, StatusExpiring},
		{"lapses in exactly 30 days: still warned about", now.Add(30 * day), 30, StatusExpiring},
		{"lapses just after 30 days", now.Add(30*day + time.Nanosecond), 30, StatusOK},
		{"lapses in 31 days", now.Add(31 * day), 31, StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.days, DaysLeft(tt.expires, now))
			require.Equal(t, tt.status, WaiverStatus(tt.expires, now))
		})
	}
}

func adv(ns, name, expires string) *class.Class {
	c := &class.Class{Namespace: ns, Name: name, Enforcement: class.EnforcementAdvisory, RiskOwner: "team-" + ns}
	if expires != "" {
		c.WaiverExpires, _ = time.Parse(time.DateOnly, expires)
	}
	return c
}

func TestBuildSortsMostUrgentFirst(t *testing.T) {
	fenced := &class.Class{Namespace: "a", Name: "fenced", Enforcement: class.EnforcementFenced}
	r := Build([]*class.Class{
		adv("b", "later", "2026-06-01"),
		fenced,
		adv("b", "soon", "2026-03-05"),
		adv("a", "soon", "2026-03-05"),
		adv("z", "lapsed", "2026-01-01"),
		adv("m", "none", ""),
	}, now)
	var got []string
	for _, row := range r.Rows {
		got = append(got, row.Namespace+"/"+row.Class+" "+string(row.Status))
	}
	require.Equal(t, []string{
		"m/none missing",
		"z/lapsed expired",
		"a/soon expiring",
		"b/soon expiring",
		"b/later ok",
	}, got)
	require.Nil(t, r.Rows[0].DaysLeft)
	require.Equal(t, -60, *r.Rows[1].DaysLeft)
}

func TestSetGrants(t *testing.T) {
	tests := []struct {
		name   string
		counts map[Key]float64
		want   []int64
		note   string
	}{
		{"rounded", map[Key]float64{{"a", "x"}: 3.6, {"a", "y"}: 0.4}, []int64{4, 0}, ""},
		{"a class without data", map[Key]float64{{"a", "x"}: 7}, []int64{7, 0},
			"no lockd_grants_total data in Prometheus for a/y: shown as 0 (no grants since lockd started)"},
		{"no data at all", map[Key]float64{}, []int64{0, 0},
			"no lockd_grants_total data in Prometheus at all: grants shown as 0 (does it scrape lockd?)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Build([]*class.Class{adv("a", "x", "2026-06-01"), adv("a", "y", "2026-06-01")}, now)
			r.SetGrants(tt.counts)
			for i, want := range tt.want {
				require.Equal(t, want, *r.Rows[i].Grants24h)
			}
			if tt.note == "" {
				require.Empty(t, r.Notes)
			} else {
				require.Equal(t, []string{tt.note}, r.Notes)
			}
		})
	}
}

func TestCSVQuoting(t *testing.T) {
	c := adv("payments", "export", "2026-09-17")
	c.RiskOwner = `payments-oncall, "reports" team`
	r := Build([]*class.Class{c, adv("legacy", "none", "")}, now)
	var b bytes.Buffer
	require.NoError(t, r.WriteCSV(&b))
	require.Equal(t, "namespace,class,risk_owner,waiver_expires,days_left,status\n"+
		"legacy,none,team-legacy,,,missing\n"+
		`payments,export,"payments-oncall, ""reports"" team",2026-09-17,199,ok`+"\n", b.String())
	records, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Equal(t, `payments-oncall, "reports" team`, records[2][2])
}

func TestLoadListsClassesLockdRefuses(t *testing.T) {
	r, err := Load("testdata/classes", now)
	require.NoError(t, err)
	var got []string
	for _, row := range r.Rows {
		got = append(got, row.Namespace+"/"+row.Class)
	}
	require.Equal(t, []string{"legacy/sweeper", "legacy/cron", "search/reindex", "platform/a-cache", "platform/cache-warm", "payments/report-export"}, got)
	require.Equal(t, []string{"testdata/classes has 1 problem(s) (run class-lint check testdata/classes); classes that could not be read are left out"}, r.Notes)

	_, err = Load("testdata/nope", now)
	require.ErrorContains(t, err, "testdata/nope")
}

func TestGolden(t *testing.T) {
	for _, withGrants := range []bool{false, true} {
		r, err := Load("testdata/classes", now)
		require.NoError(t, err)
		name := "register"
		if withGrants {
			name = "register-grants"
			r.SetGrants(map[Key]float64{
				{"legacy", "cron"}: 1440, {"search", "reindex"}: 12.4, {"payments", "report-export"}: 3.6,
				{"platform", "a-cache"}: 0, {"platform", "cache-warm"}: 90210,
			})
		}
		formats := map[string]func(*bytes.Buffer) error{
			"table":    func(b *bytes.Buffer) error { return r.WriteTable(b) },
			"markdown": func(b *bytes.Buffer) error { _, err := b.WriteString(r.Markdown()); return err },
			"csv":      func(b *bytes.Buffer) error { return r.WriteCSV(b) },
			"json":     func(b *bytes.Buffer) error { return r.WriteJSON(b) },
		}
		for format, write := range formats {
			t.Run(name+"/"+format, func(t *testing.T) {
				var b bytes.Buffer
				require.NoError(t, write(&b))
				assertGolden(t, name+"."+format, b.String())
			})
		}
	}
}

func TestEmpty(t *testing.T) {
	r := Build(nil, now)
	r.Dir = "classes"
	var b bytes.Buffer
	require.NoError(t, r.WriteTable(&b))
	require.Equal(t, "Advisory risk register of classes on 2026-03-01: 0 advisory classes\n\n", b.String())
	require.True(t, strings.HasPrefix(r.Markdown(), "### Advisory risk register\n\n`classes` on 2026-03-01: 0 advisory classes.\n"))
	b.Reset()
	require.NoError(t, r.WriteJSON(&b))
	require.Contains(t, b.String(), `"advisory": []`)
}

// assertGolden compares got with testdata/<name>.golden.
func assertGolden(t *testing.T, name, got string) {
	t.Helper()
	golden.Assert(t, name, []byte(got))
}
