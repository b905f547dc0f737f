package prometheus_test

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// alertmanagerConfig is what this test reads of alertmanager.yaml.
type alertmanagerConfig struct {
	Route        amRoute `json:"route"`
	InhibitRules []struct {
		SourceMatchers []string `json:"source_matchers"`
		TargetMatchers []string `json:"target_matchers"`
		Equal          []string `json:"equal"`
	} `json:"inhibit_rules"`
	Receivers []struct {
		Name string `json:"name"`
	} `json:"receivers"`
}

type amRoute struct {
	Receiver string    `json:"receiver"`
	GroupBy  []string  `json:"group_by"`
	Matchers []string  `json:"matchers"`
	Continue bool      `json:"continue"`
	Routes   []amRoute `json:"routes"`
}

// amMatcher is one Alertmanager matcher: label, operator, value.
type amMatcher struct {
	label, op string
	re        *regexp.Regexp
	value     string
}

var amMatcherRe = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"(.*)"\s*$`)

func parseAMMatcher(s string) (amMatcher, error) {
	m := amMatcherRe.FindStringSubmatch(s)
	if m == nil {
		return amMatcher{}, fmt.Errorf("matcher %q is not label op \"value\"", s)
	}
	am := amMatcher{label: m[1], op: m[2], value: m[3]}
	if am.op == "=~" || am.op == "!~" {
		re, err := regexp.Compile("^(?:" + m[3] + ")$") // Alertmanager anchors its regexes
		if err != nil {
			return amMatcher{}, err
		}
		am.re = re
	}
	return am, nil
}

func (m amMatcher) matches(labels map[string]string) bool {
	v := labels[m.label]
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default:
		return !m.re.MatchString(v)
	}
}

// receivers routes labels through r as Alertmanager does: the first
// matching child (and the next ones while a match says continue), depth
// first; a route no child takes sends to its own receiver.
func (r amRoute) receivers(t *testing.T, labels map[string]string) []string {
	t.Helper()
	var out []string
	for _, c := range r.Routes {
		ok := true
		for _, s := range c.Matchers {
			m, err := parseAMMatcher(s)
			if err != nil {
				t.Fatal(err)
			}
			ok = ok && m.matches(labels)
		}
		if !ok {
			continue
		}
		if c.Receiver == "" {
			c.Receiver = r.Receiver
		}
		out = append(out, c.receivers(t, labels)...)
		if !c.Continue {
			break
		}
	}
	if len(out) == 0 {
		out = []string{r.Receiver}
	}
	return out
}

// TestAlertmanagerRoutes: the example routing parses, names only receivers
// it defines, groups by alert and namespace, and sends each of lockd's
// alerts where the file says: pages to the pager, a namespace's alerts to
// its team, the rest to the platform team, and amtool (Debian's
// prometheus-alertmanager, installed by ci/tools.sh) agrees.
func TestAlertmanagerRoutes(t *testing.T) {
	var cfg alertmanagerConfig
	b, err := os.ReadFile(amFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", amFile, err)
	}
	for _, l := range []string{"alertname", "namespace"} {
		if !slices.Contains(cfg.Route.GroupBy, l) {
			t.Errorf("route.group_by %v lacks %s", cfg.Route.GroupBy, l)
		}
	}
	defined := map[string]bool{}
	for _, r := range cfg.Receivers {
		defined[r.Name] = true
	}
	usedRecv := map[string]bool{}
	var walk func(r amRoute)
	walk = func(r amRoute) {
		if r.Receiver != "" {
			usedRecv[r.Receiver] = true
			if !defined[r.Receiver] {
				t.Errorf("a route sends to receiver %q, which is not defined", r.Receiver)
			}
		}
		for _, s := range r.Matchers {
			if _, err := parseAMMatcher(s); err != nil {
				t.Error(err)
			}
		}
		for _, c := range r.Routes {
			walk(c)
		}
	}
	walk(cfg.Route)
	for name := range defined {
		if !usedRecv[name] {
			t.Errorf("receiver %q is defined but no route sends to it", name)
		}
	}
	byName := alerts(t, loadRules(t))
	namespaced := map[string]bool{} // alerts whose firing tests carry a namespace
	for _, tf := range loadTests(t) {
		for _, ut := range tf.Tests {
			for _, at := range ut.AlertRuleTests {
				for _, ea := range at.ExpAlerts {
					if _, ok := ea.ExpLabels["namespace"]; ok {
						namespaced[at.Alertname] = true
					}
				}
			}
		}
	}
	if len(namespaced) == 0 {
		t.Fatal("no alert fires with a namespace label in the tests: nothing to route to a team")
	}
	for _, ir := range cfg.InhibitRules {
		for _, s := range append(slices.Clone(ir.SourceMatchers), ir.TargetMatchers...) {
			m, err := parseAMMatcher(s)
			if err != nil {
				t.Error(err)
				continue
			}
			if m.label == "alertname" && m.re != nil {
				for n := range strings.SplitSeq(m.value, "|") {
					if _, ok := byName[n]; !ok {
						t.Errorf("inhibit rule names %s, which is no alert", n)
					}
				}
			}
		}
	}

	type routeCase struct {
		labels map[string]string
		want   []string
	}
	var cases []routeCase
	for _, name := range keys(byName) {
		r := byName[name]
		labels := map[string]string{"alertname": name, "severity": r.Labels["severity"], "job": "lockd"}
		pager := r.Labels["severity"] == "page"
		if !namespaced[name] {
			want := []string{"platform"}
			if pager {
				want = []string{"platform-pager"}
			}
			cases = append(cases, routeCase{labels, want})
			continue
		}
		for ns, team := range map[string]string{"payments": "payments", "payments-ledger": "payments", "search": "search", "paymentsx": "platform", "-": "platform"} {
			l := maps.Clone(labels)
			l["namespace"] = ns
			want := []string{team}
			if pager && team == "platform" {
				want = []string{"platform-pager"}
			} else if pager {
				want = []string{"platform-pager", team}
			}
			cases = append(cases, routeCase{l, want})
		}
	}
	// No namespaced alert pages today; one that does reaches both.
	cases = append(cases, routeCase{map[string]string{"alertname": "AnyNamespacedPage", "severity": "page", "namespace": "payments-ledger"},
		[]string{"platform-pager", "payments"}})
	for _, c := range cases {
		if got := cfg.Route.receivers(t, c.labels); !slices.Equal(got, c.want) {
			t.Errorf("%v routes to %v, want %v", c.labels, got, c.want)
		}
	}

	amtool, err := exec.LookPath("amtool")
	if err != nil {
		t.Fatalf("amtool not found: `bash ci/tools.sh apt` installs it (Debian's prometheus-alertmanager); the routing must be checked by Alertmanager's own tool too")
	}
	if out, err := exec.CommandContext(t.Context(), amtool, "check-config", amFile).CombinedOutput(); err != nil {
		t.Errorf("amtool check-config %s: %v\n%s", amFile, err, out)
	}
	for _, c := range cases {
		args := []string{"config", "routes", "test", "--config.file=" + amFile}
		for _, k := range keys(c.labels) {
			args = append(args, k+"="+c.labels[k])
		}
		out, err := exec.CommandContext(t.Context(), amtool, args...).Output()
		if err != nil {
			t.Errorf("amtool %s: %v", strings.Join(args, " "), err)
			continue
		}
		if got := strings.Split(strings.TrimSpace(string(out)), ","); !slices.Equal(got, c.want) {
			t.Errorf("amtool routes %v to %v, want %v", c.labels, got, c.want)
		}
	}
}
