// Package prometheus_test checks lockd's Prometheus alert rules
// (lockd-alerts.yaml), their promtool unit tests, their runbooks
// (docs/runbooks.md) and the example Alertmanager routing
// (alertmanager.yaml): promtool accepts and passes them, every alert has a
// firing and a not-firing test, a severity and a runbook section, and every
// series the rules and tests name is one lockd really exports, with the
// labels it really has.
package prometheus_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"sigs.k8s.io/yaml"
)

// Paths are relative to this package's directory, where go test runs.
const (
	rulesFile    = "lockd-alerts.yaml"
	amFile       = "alertmanager.yaml"
	runbooksFile = "../../docs/runbooks.md"
	runbookBase  = "https://github.com/lockd-dev/lockd/blob/main/docs/runbooks.md#"
)

// testFiles are promtool's unit tests of rulesFile.
var testFiles = []string{"lockd-alerts_test.yaml", "lockd-alerts_long_test.yaml"}

// promLabels are the labels Prometheus adds to every scraped series.
var promLabels = []string{"instance", "job"}

type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type testFile struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Interval    string `json:"interval"`
		InputSeries []struct {
			Series string `json:"series"`
			Values string `json:"values"`
		} `json:"input_series"`
		AlertRuleTests []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var rf ruleFile
	readYAML(t, rulesFile, &rf)
	var rules []rule
	for _, g := range rf.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return rules
}

func loadTests(t *testing.T) map[string]testFile {
	t.Helper()
	out := map[string]testFile{}
	for _, f := range testFiles {
		var tf testFile
		readYAML(t, f, &tf)
		out[f] = tf
	}
	return out
}

func alerts(t *testing.T, rules []rule) map[string]rule {
	t.Helper()
	out := map[string]rule{}
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		if _, dup := out[r.Alert]; dup {
			t.Errorf("alert %s is defined twice: give each rule its own name, so each has its own tests and runbook", r.Alert)
		}
		out[r.Alert] = r
	}
	return out
}

func TestPromtoolChecksAndTestsTheRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (%v): `bash ci/tools.sh apt` installs it (Debian's prometheus package)", err)
	}
	run := func(args ...string) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", rulesFile)
	run(append([]string{"test", "rules"}, testFiles...)...)
}

// TestEveryAlertIsTestedAndDocumented: a firing and a not-firing case per
// alert, a severity, a summary, a description and a runbook section.
func TestEveryAlertIsTestedAndDocumented(t *testing.T) {
	byName := alerts(t, loadRules(t))
	firing, silent := map[string]int{}, map[string]int{}
	for file, tf := range loadTests(t) {
		if !slices.Contains(tf.RuleFiles, rulesFile) {
			t.Errorf("%s: rule_files %v does not load %s", file, tf.RuleFiles, rulesFile)
		}
		for _, ut := range tf.Tests {
			for _, at := range ut.AlertRuleTests {
				if _, ok := byName[at.Alertname]; !ok {
					// promtool passes an empty exp_alerts for an alert that does not exist.
					t.Errorf("%s: eval_time %s tests alert %q, which %s does not define", file, at.EvalTime, at.Alertname, rulesFile)
					continue
				}
				if len(at.ExpAlerts) > 0 {
					firing[at.Alertname]++
				} else {
					silent[at.Alertname]++
				}
			}
		}
	}
	anchors := runbookAnchors(t)
	boundedLabels := map[string]bool{"job": true, "instance": true, "namespace": true, "class": true, "cluster": true, "code": true, "kind": true}
	labelRef := regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	for name, r := range byName {
		if firing[name] == 0 {
			t.Errorf("alert %s: no test where it fires (an alert_rule_test with exp_alerts)", name)
		}
		if silent[name] == 0 {
			t.Errorf("alert %s: no test where it stays silent (exp_alerts: [] where a careless rule would fire)", name)
		}
		if s := r.Labels["severity"]; s != "page" && s != "ticket" {
			t.Errorf("alert %s: labels.severity is %q, want page or ticket", name, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s: no annotation %s", name, a)
			}
		}
		for a, text := range r.Annotations {
			for _, m := range labelRef.FindAllStringSubmatch(text, -1) {
				if !boundedLabels[m[1]] {
					t.Errorf("alert %s: annotation %s uses $labels.%s, not a label lockd's alerts carry", name, a, m[1])
				}
			}
		}
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, runbookBase)
		switch {
		case !ok:
			t.Errorf("alert %s: runbook_url %q is not under %s", name, url, runbookBase)
		case !anchors[anchor]:
			t.Errorf("alert %s: runbook_url anchor #%s is no heading of %s", name, anchor, runbooksFile)
		}
	}
	// Every alert's section in the runbooks is for an alert that exists.
	lower := map[string]bool{}
	for n := range byName {
		lower[strings.ToLower(n)] = true
	}
	for a := range anchors {
		if alertAnchor.MatchString(a) && !lower[a] {
			t.Errorf("%s has a section #%s for no alert of %s", runbooksFile, a, rulesFile)
		}
	}
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// alertAnchor is the anchor of a heading that names an alert.
var alertAnchor = regexp.MustCompile(`^lockd[a-z0-9]+$`)

// runbookAnchors are GitHub's anchors of the ## and ### headings of the
// runbooks, outside code blocks.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	out, seen, fence := map[string]bool{}, map[string]int{}, false
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		h, ok := strings.CutPrefix(line, "## ")
		if !ok {
			h, ok = strings.CutPrefix(line, "### ")
		}
		if !ok {
			continue
		}
		a := githubAnchor(h)
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces to
// hyphens, every other character but letters, digits, '-' and '_' dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"LockdSealed":                   "lockdsealed",
		"What `lockctl top` shows":      "what-lockctl-top-shows",
		"Audit lag vs. the window (1h)": "audit-lag-vs-the-window-1h",
		"snake_case and-hyphens":        "snake_case-and-hyphens",
	} {
		if got := githubAnchor(h); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", h, got, want)
		}
	}
}
