package class

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const header = "apiVersion: locks.lockd.dev/v1alpha1\n"

// classYAML returns a valid LockClass document with spec lines replaced
// or added by extra ("key: value" lines; "key: -" deletes the key).
func classYAML(name string, extra ...string) string {
	spec := []string{"purpose: correctness", "enforcement: fenced", "ttl: 15s", "tier: entity", "keys: [\"payments/" + name + "/\"]"}
	for _, e := range extra {
		k, _, _ := strings.Cut(e, ":")
		replaced := false
		for i, s := range spec {
			if strings.HasPrefix(s, k+":") {
				spec[i] = e
				replaced = true
			}
		}
		if !replaced {
			spec = append(spec, e)
		}
	}
	var b strings.Builder
	b.WriteString(header + "kind: LockClass\nmetadata:\n  name: " + name + "\n  namespace: payments\nspec:\n")
	for _, s := range spec {
		if !strings.HasSuffix(s, ": -") {
			b.WriteString("  " + s + "\n")
		}
	}
	return b.String()
}

func advisory(extra ...string) []string {
	return append([]string{"purpose: efficiency", "enforcement: advisory", "ttl: 30s",
		"riskOwner: team", "waiverExpires: 2027-01-01"}, extra...)
}

func TestParseFileClassRules(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		field string // expected field of the single problem; empty: valid
		rule  string
	}{
		{"valid fenced", classYAML("a"), "", ""},
		{"valid advisory", classYAML("a", advisory()...), "", ""},
		{"valid advisory rfc3339 waiver", classYAML("a", advisory("waiverExpires: 2026-12-01T00:00:00Z")...), "", ""},
		{"default ttl", classYAML("a", "ttl: -"), "", ""},
		{"all optional fields", classYAML("a", "onQuorumLoss: closed", "fairness: best-effort", "resource: db"), "", ""},
		{"durable fairness", classYAML("a", "fairness: durable"), "", ""},
		{"open for advisory efficiency", classYAML("a", advisory("onQuorumLoss: open")...), "", ""},

		{"several keys", classYAML("a", `keys: ["payments/a/", "payments/a-archive/"]`), "", ""},
		{"whole namespace", classYAML("a", `keys: ["payments/"]`), "", ""},
		{"nested in another", classYAML("a", "nestedIn: [b]"), "", ""},
		{"missing keys", classYAML("a", "keys: -"), "spec.keys", `must list at least one key prefix the class owns, such as "payments/orders/"`},
		{"empty keys", classYAML("a", "keys: []"), "spec.keys", "must list at least one key prefix"},
		{"key outside namespace", classYAML("a", `keys: ["other/a/"]`), "spec.keys[0]", `must start with the class's namespace "payments/", got "other/a/"`},
		{"key without slash", classYAML("a", `keys: ["payments/a"]`), "spec.keys[0]", `invalid prefix "payments/a": prefix must end with "/"`},
		{"key listed twice", classYAML("a", `keys: ["payments/a/", "payments/a/"]`), "spec.keys[1]", `"payments/a/" is listed twice (spec.keys[0])`},
		{"key inside its own", classYAML("a", `keys: ["payments/a/b/", "payments/a/"]`), "spec.keys[1]", `"payments/a/b/" is inside "payments/a/", also listed: list only "payments/a/"`},
		{"nested in itself", classYAML("a", "nestedIn: [a]"), "spec.nestedIn[0]", "names the class itself"},
		{"nested in twice", classYAML("a", "nestedIn: [b, b]"), "spec.nestedIn[1]", `"b" is listed twice`},
		{"nested in a bad name", classYAML("a", "nestedIn: [B_x]"), "spec.nestedIn[0]", "must be the name of a class of the namespace"},

		{"bad apiVersion", strings.Replace(classYAML("a"), "v1alpha1", "v1", 1), "apiVersion", "must be locks.lockd.dev/v1alpha1"},
		{"missing apiVersion", strings.TrimPrefix(classYAML("a"), header), "apiVersion", "is required"},
		{"bad kind", strings.Replace(classYAML("a"), "LockClass", "Lock", 1), "kind", "must be LockClass, LockGrant, LockNamespace or PauseTestResult"},
		{"bad name", classYAML("Bad_Name"), "metadata.name", "DNS label"},
		{"missing name", strings.Replace(classYAML("a"), "  name: a\n", "", 1), "metadata.name", "is required"},
		{"wrong namespace", strings.Replace(classYAML("a", `keys: ["other/a/"]`), "namespace: payments", "namespace: other", 1), "metadata.namespace", `must equal the namespace folder "payments"`},
		{"missing namespace", strings.Replace(classYAML("a"), "  namespace: payments\n", "", 1), "metadata.namespace", "is required"},
		{"unknown top-level field", classYAML("a") + "status: {}\n", "status", "unknown field"},
		{"unknown spec field", classYAML("a", "color: red"), "spec.color", "unknown field"},
		{"wrong-case field", classYAML("a", "ttl: -", "TTL: 15s"), "spec.TTL", "unknown field"},
		{"duplicate key", classYAML("a") + "  tier: coord\n", "", "already set"},
		{"missing purpose", classYAML("a", "purpose: -"), "spec.purpose", "is required"},
		{"bad purpose", classYAML("a", "purpose: speed"), "spec.purpose", `must be one of correctness, efficiency, got "speed"`},
		{"missing enforcement", classYAML("a", "enforcement: -"), "spec.enforcement", "is required"},
		{"bad enforcement", classYAML("a", "enforcement: strict"), "spec.enforcement", "must be one of fenced, advisory"},
		{"missing tier", classYAML("a", "tier: -"), "spec.tier", "is required"},
		{"bad tier", classYAML("a", "tier: global"), "spec.tier", "must be one of entity, coord"},
		{"ttl too short", classYAML("a", "ttl: 2s"), "spec.ttl", "must be between 5s and 300s, got 2s"},
		{"ttl too long", classYAML("a", "ttl: 301s"), "spec.ttl", "must be between 5s and 300s, got 301s"},
		{"ttl not a duration", classYAML("a", "ttl: soon"), "spec.ttl", "must be a Go duration"},
		{"ttl a number", classYAML("a", "ttl: 15"), "spec.ttl", "must be a string, got number"},
		{"advisory ttl too short", classYAML("a", advisory("ttl: 29s")...), "spec.ttl", "advisory classes must have a ttl of at least 30s"},
		{"advisory default ttl", classYAML("a", advisory("ttl: -")...), "spec.ttl", "at least 30s, got 15s (the default)"},
		{"advisory without riskOwner", classYAML("a", advisory("riskOwner: -")...), "spec.riskOwner", "is required for advisory classes"},
		{"advisory empty riskOwner", classYAML("a", advisory(`riskOwner: ""`)...), "spec.riskOwner", "is required for advisory classes"},
		{"advisory without waiver", classYAML("a", advisory("waiverExpires: -")...), "spec.waiverExpires", "is required for advisory classes"},
		{"advisory expired waiver", classYAML("a", advisory("waiverExpires: 2026-11-30")...), "spec.waiverExpires", "not in the future"},
		{"bad waiver date", classYAML("a", advisory("waiverExpires: 30/11/2027")...), "spec.waiverExpires", "must be a date YYYY-MM-DD"},
		{"open for correctness", classYAML("a", "onQuorumLoss: open"), "spec.onQuorumLoss", "not allowed for purpose correctness"},
		{"open for fenced efficiency", classYAML("a", "purpose: efficiency", "onQuorumLoss: open"), "spec.onQuorumLoss", "not allowed for enforcement fenced"},
		{"bad onQuorumLoss", classYAML("a", "onQuorumLoss: maybe"), "spec.onQuorumLoss", "must be one of closed, open"},
		{"bad fairness", classYAML("a", "fairness: fifo"), "spec.fairness", "must be one of best-effort, durable"},
		{"not a mapping", "- a\n- b\n", "", "document must be a mapping"},
		{"invalid yaml", classYAML("a") + "  x: [1\n", "", "invalid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			classes, grants, problems := ParseFile("classes/payments/x.yaml", []byte(tt.doc), "payments", testNow)
			require.Empty(t, grants)
			if tt.rule == "" {
				require.Empty(t, problems)
				require.Len(t, classes, 1)
				return
			}
			require.Empty(t, classes)
			require.Len(t, problems, 1, "%v", problems)
			p := problems[0]
			require.Equal(t, tt.field, p.Field)
			require.Contains(t, p.Rule, tt.rule)
			require.Equal(t, "classes/payments/x.yaml", p.File)
			require.Positive(t, p.Line)
			msg := p.Error()
			require.True(t, strings.HasPrefix(msg, "classes/payments/x.yaml:"), msg)
			if tt.field != "" {
				require.Contains(t, msg, ": "+tt.field+": ")
			}
		})
	}
}

func TestParseFileClassValues(t *testing.T) {
	doc := classYAML("a", advisory("resource: db", "ttl: 1m")...)
	classes, _, problems := ParseFile("f.yaml", []byte(doc), "payments", testNow)
	require.Empty(t, problems)
	require.Equal(t, &Class{
		Namespace:     "payments",
		Name:          "a",
		Purpose:       PurposeEfficiency,
		Enforcement:   EnforcementAdvisory,
		TTL:           time.Minute,
		Tier:          TierEntity,
		OnQuorumLoss:  QuorumLossClosed,
		Fairness:      FairnessBestEffort,
		Resource:      "db",
		RiskOwner:     "team",
		WaiverExpires: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		Keys:          []string{"payments/a/"},
		Source:        "f.yaml",
		Line:          1,
	}, classes[0])
}

func grantYAML(name, id string, prefixes ...string) string {
	s := header + "kind: LockGrant\nmetadata: {name: " + name + ", namespace: payments}\nspec:\n  spiffeID: " + id + "\n  prefixes:\n"
	for _, p := range prefixes {
		s += "    - " + p + "\n"
	}
	return s
}

func TestParseFileGrantRules(t *testing.T) {
	const id = "spiffe://example.org/ns/payments/sa/ledger"
	tests := []struct {
		name  string
		doc   string
		field string
		rule  string
	}{
		{"valid", grantYAML("g", id, "payments/ledger/", "payments/"), "", ""},
		{"missing spiffeID", grantYAML("g", `""`, "payments/"), "spec.spiffeID", "is required"},
		{"not spiffe scheme", grantYAML("g", "https://example.org/x", "payments/"), "spec.spiffeID", "must be a spiffe://"},
		{"no trust domain", grantYAML("g", "spiffe:///x", "payments/"), "spec.spiffeID", "must be a spiffe://"},
		{"no path", grantYAML("g", "spiffe://example.org", "payments/"), "spec.spiffeID", "must have a path"},
		{"no prefixes", grantYAML("g", id), "spec.prefixes", "at least one prefix"},
		{"other namespace", grantYAML("g", id, "payments/a/", "billing/a/"), "spec.prefixes[1]", `must start with the grant's namespace "payments/"`},
		{"namespace without slash", grantYAML("g", id, "paymentsx/"), "spec.prefixes[0]", "must start with"},
		{"no trailing slash", grantYAML("g", id, "payments/ledger"), "spec.prefixes[0]", `must end with "/"`},
		{"dotdot", grantYAML("g", id, "payments/../"), "spec.prefixes[0]", `segment ".."`},
		{"prefixes not a list", strings.Replace(grantYAML("g", id), "  prefixes:\n", "  prefixes: payments/\n", 1), "spec.prefixes", "must be a list, got string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			classes, grants, problems := ParseFile("p.yaml", []byte(tt.doc), "payments", testNow)
			require.Empty(t, classes)
			if tt.rule == "" {
				require.Empty(t, problems)
				require.Len(t, grants, 1)
				return
			}
			require.Empty(t, grants)
			require.Len(t, problems, 1, "%v", problems)
			require.Equal(t, tt.field, problems[0].Field)
			require.Contains(t, problems[0].Rule, tt.rule)
			require.Equal(t, "LockGrant payments/g", problems[0].Object)
		})
	}
}

func TestParseFileLinesAndMultipleDocuments(t *testing.T) {
	data := "# leading comment\n" + // 1
		classYAML("a", "ttl: 2s") + // 2..11, ttl on line 10
		"---\n" + // 12
		"\n# only a comment\n" + // 13, 14
		"---\n" + // 15
		classYAML("b", "purpose: speed", "color: red") + // 16.., purpose on 22, color on 26
		"---\n" +
		grantYAML("g", "spiffe://example.org/x", "payments/a/", "payments/b") // prefixes[1] is the last line
	lines := strings.Count(data, "\n")
	_, _, problems := ParseFile("x.yaml", []byte(data), "payments", testNow)
	var got []string
	for _, p := range problems {
		got = append(got, p.Error())
	}
	require.Equal(t, []string{
		"x.yaml:10: LockClass payments/a: spec.ttl: must be between 5s and 300s, got 2s",
		"x.yaml:28: LockClass payments/b: spec.color: unknown field",
		"x.yaml:23: LockClass payments/b: spec.purpose: must be one of correctness, efficiency, got \"speed\"",
		"x.yaml:" + strconv.Itoa(lines) + ": LockGrant payments/g: spec.prefixes[1]: invalid prefix \"payments/b\": prefix must end with \"/\"",
	}, got)
}

func TestParseFileDuplicates(t *testing.T) {
	data := classYAML("a") + "---\n" + classYAML("a") + "---\n" + grantYAML("a", "spiffe://e.org/x", "payments/")
	classes, grants, problems := ParseFile("d.yaml", []byte(data), "payments", testNow)
	require.Len(t, classes, 1)
	require.Len(t, grants, 1) // same name, different kind: fine
	require.Len(t, problems, 1)
	require.Contains(t, problems[0].Error(), "d.yaml:13: LockClass payments/a: metadata.name: duplicate LockClass, first defined at line 1")
}

func TestParseFileBadSeparator(t *testing.T) {
	data := classYAML("a") + "--- # next\n" + classYAML("b")
	_, _, problems := ParseFile("s.yaml", []byte(data), "payments", testNow)
	require.NotEmpty(t, problems)
	require.Equal(t, 12, problems[0].Line)
	require.Contains(t, problems[0].Rule, `exactly "---"`)
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"README.md":              "# classes\n",
		"CODEOWNERS":             "/payments/ @payments\n",
		"payments/a.yaml":        classYAML("a"),
		"payments/b.yml":         classYAML("b") + "---\n" + grantYAML("g", "spiffe://e.org/x", "payments/x/"),
		"payments/notes.txt":     "ignored",
		"payments/.hidden.yaml":  "garbage: [",
		".git/config.yaml":       "garbage: [",
		"payments/.cache/x.yaml": "garbage: [",
	})
	set, err := LoadDir(dir, testNow)
	require.NoError(t, err)
	require.Equal(t, []string{"payments"}, set.Namespaces())
	require.True(t, set.HasNamespace("payments"))
	require.False(t, set.HasNamespace("billing"))
	c, ok := set.Class("payments", "b")
	require.True(t, ok)
	require.Equal(t, filepath.Join(dir, "payments", "b.yml"), c.Source)
	_, ok = set.Class("payments", "zzz")
	require.False(t, ok)
	require.Len(t, set.Classes(), 2)
	require.Equal(t, "a", set.Classes()[0].Name)
	require.Len(t, set.Grants(), 1)
	require.Equal(t, []string{"payments/x/"}, set.Grants()[0].Prefixes)
}

func TestLoadDirProblems(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"root.yaml":           classYAML("r"),
		"payments/a.yaml":     classYAML("a", "ttl: 1s"),
		"payments/b.yaml":     classYAML("b") + "---\n" + classYAML("b2", "tier: x"),
		"payments/c.yaml":     classYAML("b"),
		"payments/sub/d.yaml": classYAML("d"),
		"billing/e.yaml":      classYAML("e"),
	})
	set, err := LoadDir(dir, testNow)
	require.Nil(t, set)
	require.ErrorIs(t, err, ErrInvalid)
	var le *LoadError
	require.True(t, errors.As(err, &le))
	var rules []string
	for _, p := range le.Problems {
		rules = append(rules, strings.TrimPrefix(p.Error(), dir+string(filepath.Separator)))
	}
	require.Equal(t, []string{
		`billing/e.yaml:5: LockClass payments/e: metadata.namespace: must equal the namespace folder "billing", got "payments"`,
		`payments/a.yaml:9: LockClass payments/a: spec.ttl: must be between 5s and 300s, got 1s`,
		`payments/b.yaml:22: LockClass payments/b2: spec.tier: must be one of entity, coord, got "x"`,
		`payments/c.yaml:1: LockClass payments/b: metadata.name: duplicate LockClass, first defined at ` + filepath.Join(dir, "payments", "b.yaml") + `:1`,
		`payments/sub/d.yaml: must be directly inside a namespace folder; nested folders are not read`,
		`root.yaml: must be inside a namespace folder`,
	}, rules)
	// The joined message lists every problem.
	require.Contains(t, err.Error(), "class: invalid: 6 problems:\n")
	for _, p := range le.Problems {
		require.Contains(t, err.Error(), p.Error())
	}
}

func TestLoadDirMissing(t *testing.T) {
	_, err := LoadDir(filepath.Join(t.TempDir(), "nope"), testNow)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NotErrorIs(t, err, ErrInvalid)
}

func TestLoadDirSymlinkedRoot(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"real/payments/a.yaml": classYAML("a")})
	require.NoError(t, os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "current")))
	set, err := LoadDir(filepath.Join(dir, "current"), testNow)
	require.NoError(t, err)
	require.Len(t, set.Classes(), 1)
}

func TestRepositoryClassesAreValid(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	set, err := LoadDir("../../classes", now)
	require.NoError(t, err)
	require.Equal(t, []string{"demo", "payments", "platform"}, set.Namespaces())

	tests := []struct {
		ns, name    string
		enforcement Enforcement
		ttl         time.Duration
		tier        Tier
	}{
		{"demo", "demo", EnforcementAdvisory, 30 * time.Second, TierEntity},
		{"demo", "demo-fast", EnforcementFenced, 5 * time.Second, TierEntity},
		{"demo", "demo-line", EnforcementAdvisory, 30 * time.Second, TierEntity},
		{"payments", "ledger-writes", EnforcementFenced, 15 * time.Second, TierEntity},
		{"payments", "report-export", EnforcementAdvisory, 60 * time.Second, TierEntity},
		{"platform", "leader-election", EnforcementFenced, 15 * time.Second, TierCoord},
	}
	for _, tt := range tests {
		t.Run(tt.ns+"/"+tt.name, func(t *testing.T) {
			c, ok := set.Class(tt.ns, tt.name)
			require.True(t, ok)
			require.Equal(t, tt.enforcement, c.Enforcement)
			require.Equal(t, tt.ttl, c.TTL)
			require.Equal(t, tt.tier, c.Tier)
		})
	}
	ids := map[string][]string{}
	for _, g := range set.Grants() {
		ids[g.SPIFFEID] = append(ids[g.SPIFFEID], g.Prefixes...)
	}
	require.Equal(t, map[string][]string{
		"spiffe://lockd.local/dev":                      {"demo/"},
		"spiffe://lockd.local/worker-1":                 {"demo/"},
		"spiffe://lockd.local/worker-2":                 {"demo/"},
		"spiffe://lockd.local/ns/payments/sa/ledger":    {"payments/ledger/"},
		"spiffe://lockd.local/ns/platform/sa/scheduler": {"platform/leader/"},
	}, ids)
}

func TestZeroNowSkipsWaiverExpiry(t *testing.T) {
	doc := classYAML("a", advisory("waiverExpires: 2020-01-01")...)
	classes, _, problems := ParseFile("f.yaml", []byte(doc), "payments", time.Time{})
	require.Empty(t, problems)
	require.Len(t, classes, 1)
	_, _, problems = ParseFile("f.yaml", []byte(doc), "payments", testNow)
	require.Len(t, problems, 1)
}

// Found by FuzzParseLocatesEveryProblem: YAML reads a lone carriage return
// as a line break, so a problem after one named a line the file (as Gitea
// shows it) does not have.
func TestALoneCarriageReturnIsRefusedAtItsLine(t *testing.T) {
	data := classYAML("a", "ttl: 2s\rpurpose: speed") + "\r\"\n"
	lines := strings.Count(data, "\n")
	_, _, problems := ParseFile("cr.yaml", []byte(data), "payments", testNow)
	require.NotEmpty(t, problems)
	for _, p := range problems {
		require.LessOrEqual(t, p.Line, lines, "%v names a line past the end of a %d-line file", p, lines)
	}
	var cr []int
	for _, p := range problems {
		if strings.Contains(p.Rule, "carriage return") {
			cr = append(cr, p.Line)
		}
	}
	require.Equal(t, []int{9, lines}, cr)
}

// Found by FuzzParseLocatesEveryProblem in CI: at the end of its input the
// YAML decoder names the line after the last one, so class-lint named a
// line the file does not have.
func TestAYAMLErrorAtTheEndOfADocumentNamesItsLastLine(t *testing.T) {
	for _, data := range []string{"?\n0", classYAML("a") + "---\n?\n0"} {
		lines := strings.Count(data, "\n") + 1
		_, _, problems := ParseFile("end.yaml", []byte(data), "payments", testNow)
		require.NotEmpty(t, problems)
		last := problems[len(problems)-1]
		require.Equal(t, lines, last.Line, "%v", last)
		require.Contains(t, last.Rule, "invalid YAML")
		require.Contains(t, last.Rule, "at the end of the document")
	}
}
