package classlint

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/gittest"
	"github.com/lockd-dev/lockd/internal/golden"
)

// fixtureNow is the date the rule fixtures are checked at.
const fixtureNow = "2026-11-30T12:00:00Z"

// TestRuleFixtures checks every rule against its fixtures: testdata/rules/
// <rule>/fail breaks the rule (and only it), testdata/rules/<rule>/pass is
// the same repository with the problem fixed.
func TestRuleFixtures(t *testing.T) {
	for _, rule := range class.Rules {
		t.Run(rule, func(t *testing.T) {
			dir := filepath.Join("testdata", "rules", rule)
			var out, errOut bytes.Buffer
			code := Main([]string{"check", "--now", fixtureNow, filepath.Join(dir, "fail")}, &out, &errOut)
			want := ExitViolations
			if rule == class.RuleWaiverExpiring {
				want = ExitOK // a warning does not fail the check
			}
			if code != want {
				t.Fatalf("fail fixture: exit %d, want %d\n%s%s", code, want, out.String(), errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			problems := lines[:len(lines)-1]
			if len(problems) == 0 {
				t.Fatalf("fail fixture: no problem reported:\n%s", out.String())
			}
			for _, l := range problems {
				// file:line: rule-id: Kind ns/name: field: message
				if !strings.HasPrefix(l, filepath.Join(dir, "fail")+"/") || !strings.Contains(l, ": "+rule+": ") {
					t.Errorf("problem line does not name the file and rule %s: %q", rule, l)
				}
				if rule != class.RuleLayout && rule != class.RuleCodeowners && !strings.Contains(l, ": spec.") && !strings.Contains(l, ": metadata.") {
					t.Errorf("problem line does not name the field: %q", l)
				}
			}
			golden.AssertFile(t, filepath.Join(dir, "want.txt"), out.Bytes())

			out.Reset()
			if code := Main([]string{"check", "--now", fixtureNow, filepath.Join(dir, "pass")}, &out, &errOut); code != ExitOK {
				t.Fatalf("pass fixture: exit %d\n%s", code, out.String())
			}
			if got := out.String(); got != filepath.Join(dir, "pass")+": ok\n" {
				t.Fatalf("pass fixture is not clean:\n%s", got)
			}
		})
	}
}

func TestEveryRuleHasFixtures(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "rules"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(class.Rules, e.Name()) {
			t.Errorf("testdata/rules/%s is not a rule of class.Rules", e.Name())
		}
	}
	if len(entries) != len(class.Rules) {
		t.Errorf("%d fixture folders for %d rules", len(entries), len(class.Rules))
	}
}

func TestCheckOutputs(t *testing.T) {
	dir := filepath.Join("testdata", "rules", class.RuleFencedPauseTest, "fail")
	var out, errOut bytes.Buffer
	if code := Main([]string{"check", "--now", fixtureNow, "-o", "json", dir}, &out, &errOut); code != ExitViolations {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	var rep checkReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out.String())
	}
	if rep.Violations != 4 || len(rep.Problems) != 4 {
		t.Fatalf("violations %d, problems %d, want 4", rep.Violations, len(rep.Problems))
	}
	for _, p := range rep.Problems {
		if p.Rule != class.RuleFencedPauseTest || p.Severity != "error" || p.Field != "spec.enforcement" || p.Line == 0 {
			t.Errorf("unexpected problem %+v", p)
		}
	}

	out.Reset()
	if code := Main([]string{"check", "--now", fixtureNow, "-o", "markdown", dir}, &out, &errOut); code != ExitViolations {
		t.Fatalf("exit %d", code)
	}
	golden.AssertFile(t, filepath.Join("testdata", "check.golden.md"), out.Bytes())
}

func TestCheckUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown output", []string{"check", "-o", "yaml", "testdata"}, "-o must be text, json or markdown"},
		{"missing directory", []string{"check", "does-not-exist"}, "does-not-exist"},
		{"bad now", []string{"check", "--now", "yesterday"}, `"--now" flag: must be an RFC 3339 time`},
		{"unknown flag", []string{"check", "--frobnicate"}, "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(tt.args, &out, &errOut); code != ExitUsage {
				t.Fatalf("exit %d, want %d", code, ExitUsage)
			}
			if got := out.String() + errOut.String(); !strings.Contains(got, tt.want) {
				t.Fatalf("output %q does not say %q", got, tt.want)
			}
		})
	}
}

// TestRepositoryClasses checks the example classes. Their only violations
// are the fenced classes that have no pause-test result yet: those are
// produced by running the fencing kit against the real resources.
func TestRepositoryClasses(t *testing.T) {
	var out, errOut bytes.Buffer
	Main([]string{"check", "--now", fixtureNow, "-o", "json", "../../../classes"}, &out, &errOut)
	var rep checkReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s%s", err, out.String(), errOut.String())
	}
	for _, p := range rep.Problems {
		if p.Rule != class.RuleFencedPauseTest {
			t.Errorf("example classes break %s: %s: %s", p.Rule, p.File, p.Message)
		}
	}
}

// TestReviewMarkdown renders the review a pull request gets without
// Prometheus: the class rules, and the rehomes against the base (they need
// no Prometheus): the work tree carves the ledger's hot keys out to a class
// of tier coord, and adds an advisory class whose waiver lapses soon.
func TestReviewMarkdown(t *testing.T) {
	r := gittest.New(t) // fixed commit dates: the review shows the base commit's hash
	if err := os.CopyFS(filepath.Join(r.Dir, "classes"), os.DirFS(filepath.Join("testdata", "rules", class.RuleWaiverExpiring, "pass"))); err != nil {
		t.Fatal(err)
	}
	r.Commit("classes")
	classes := filepath.Join(r.Dir, "classes", "payments", "classes.yaml")
	data, err := os.ReadFile(classes)
	if err != nil {
		t.Fatal(err)
	}
	data = append(bytes.Replace(data, []byte(`waiverExpires: "2027-01-15"`), []byte(`waiverExpires: "2026-12-20"`), 1), `---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-hot, namespace: payments}
spec:
  keys: ["payments/ledger/hot/"]
  nestedIn: [ledger-writes]
  purpose: efficiency
  enforcement: advisory
  ttl: 60s
  tier: coord
  riskOwner: payments-oncall
  waiverExpires: "2027-06-30"
`...)
	if err := os.WriteFile(classes, data, 0o644); err != nil {
		t.Fatal(err)
	}
	goldenFile, err := filepath.Abs(filepath.Join("testdata", "review.golden.md")) // before the test leaves the package directory
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(r.Dir)
	now, _ := time.Parse(time.RFC3339, fixtureNow)
	md, failed, err := review(context.Background(), reviewOptions{Dir: "classes", Base: "main", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if failed {
		t.Fatal("a warning failed the review")
	}
	for _, want := range []string{"waiver-expiring", "keys under payments/ledger/hot/ move from tier entity (class payments/ledger-writes) to tier coord (class payments/ledger-hot)",
		"Not computed: no Prometheus URL"} {
		if !strings.Contains(md, want) {
			t.Errorf("the review does not say %q:\n%s", want, md)
		}
	}
	golden.AssertFile(t, goldenFile, []byte(md))
}
