package class

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCodeownersFields(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"", nil},
		{"# comment", nil},
		{`payments/.* @payments-team # owners`, []string{"payments/.*", "@payments-team"}},
		{`dir/with\#hashtag @u1`, []string{"dir/with#hashtag", "@u1"}},
		{`path\ with\ space @u2 @org/t`, []string{"path with space", "@u2", "@org/t"}},
		{`path/\\.with\\.dots @u3`, []string{`path/\.with\.dots`, "@u3"}},
		{"\tdemo/.*\t@a", []string{"demo/.*", "@a"}},
	}
	for _, tt := range tests {
		if got := codeownersFields(tt.line); !slices.Equal(got, tt.want) {
			t.Errorf("codeownersFields(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

func TestCodeownersCoverage(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string // substrings of the problems, in order
	}{
		{"own rule", ".* @all\npayments/.* @pay\n", nil},
		{"anchored by Gitea", "payments/classes\\.yaml @pay\n", []string{"payments/ has no CODEOWNERS entry"}},
		{"catch-all only", ".* @all\n", []string{"payments/ has no CODEOWNERS entry"}},
		{"negated rule does not count", "!payments/.* @pay\n", []string{"payments/ has no CODEOWNERS entry"}},
		{"rule without owner", "payments/.*\n", []string{"names no owner", "payments/ has no CODEOWNERS entry"}},
		{"bad regexp", "payments/(.* @pay\n", []string{"not a Go regular expression", "payments/ has no CODEOWNERS entry"}},
		{"alternation", "(payments|billing)/.* @money\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "payments"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "CODEOWNERS"), []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			ps := reviewCodeowners(&Tree{Dir: dir, Namespaces: []string{"payments"}})
			if len(ps) != len(tt.want) {
				t.Fatalf("got %d problems %v, want %d", len(ps), ps, len(tt.want))
			}
			for i, p := range ps {
				if !strings.Contains(p.Rule, tt.want[i]) || p.ID != RuleCodeowners {
					t.Errorf("problem %d = %v, want %q", i, p, tt.want[i])
				}
			}
		})
	}
	t.Run("no file", func(t *testing.T) {
		ps := reviewCodeowners(&Tree{Dir: t.TempDir()})
		if len(ps) != 1 || !strings.Contains(ps[0].Rule, "no CODEOWNERS file") {
			t.Fatalf("got %v", ps)
		}
	})
}

func TestCurrentPauseTest(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := &Class{Namespace: "payments", Name: "ledger", Enforcement: EnforcementFenced, Resource: "db", ResourceSchemaVersion: "3"}
	good := PauseTest{Namespace: "payments", Name: "ledger", Class: "ledger", Resource: "db", ResourceSchemaVersion: "3",
		Outcome: PauseTestOutcomePass, RanAt: now.AddDate(0, -1, 0), Expires: now.AddDate(0, 11, 0), Source: "f.yaml", Line: 1}
	with := func(f func(*PauseTest)) []PauseTest { pt := good; f(&pt); return []PauseTest{pt} }
	tests := []struct {
		name  string
		class *Class
		tests []PauseTest
		want  string // "" means accepted
	}{
		{"current", c, []PauseTest{good}, ""},
		{"none", c, nil, "no PauseTestResult for class ledger and resource db"},
		{"other namespace", c, with(func(p *PauseTest) { p.Namespace = "billing" }), "no PauseTestResult"},
		{"other resource", c, with(func(p *PauseTest) { p.Resource = "cache" }), `tested resource "cache"`},
		{"schema changed", c, with(func(p *PauseTest) { p.ResourceSchemaVersion = "2" }), `tested schema version "2"`},
		{"expired", c, with(func(p *PauseTest) { p.Expires = now.Add(-time.Hour) }), "expired on 2026-11-30"},
		{"expires set beyond a year", c, with(func(p *PauseTest) {
			p.RanAt = now.AddDate(-1, 0, -1)
			p.Expires = now.AddDate(5, 0, 0)
		}), "expired on 2026-11-29"},
		{"ran in the future", c, with(func(p *PauseTest) { p.RanAt = now.Add(time.Hour) }), "in the future"},
		{"no resource", &Class{Namespace: "payments", Name: "ledger", Enforcement: EnforcementFenced}, []PauseTest{good}, "must name its spec.resource"},
		{"one stale, one current", c, append(with(func(p *PauseTest) { p.Expires = now.Add(-time.Hour) }), good), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pt, why := CurrentPauseTest(tt.class, tt.tests, now)
			switch {
			case tt.want == "" && (pt == nil || why != ""):
				t.Fatalf("refused: %s", why)
			case tt.want != "" && (pt != nil || !strings.Contains(why, tt.want)):
				t.Fatalf("got %v %q, want refusal saying %q", pt, why, tt.want)
			}
		})
	}
}

func TestPauseTestResultForm(t *testing.T) {
	doc := `apiVersion: locks.lockd.dev/v1alpha1
kind: PauseTestResult
metadata: {name: ledger, namespace: payments}
spec:
  class: ledger
  resource: db
  outcome: fail
  ranAt: "2026-11-30T10:00:00Z"
  expires: "2026-11-29T10:00:00Z"
  tokens: {first: "20", second: "10"}
`
	f := Parse("p.yaml", []byte(doc), "payments", time.Time{})
	var fields []string
	for _, p := range f.Problems {
		fields = append(fields, p.Field)
	}
	want := []string{"spec.outcome", "spec.expires", "spec.tokens.second"}
	if !slices.Equal(fields, want) {
		t.Fatalf("problems on %v, want %v: %v", fields, want, f.Problems)
	}
	if len(f.Objects) != 1 || f.Objects[0].PauseTest == nil || f.Objects[0].Valid {
		t.Fatalf("objects %+v", f.Objects)
	}
}
