package class

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// WaiverWarning is how long before an advisory waiver lapses that review
// starts warning about it.
const WaiverWarning = 30 * 24 * time.Hour

// CodeownersPaths are where Gitea looks for the code owners file, relative
// to the repository root, in the order it looks; the first found is used.
var CodeownersPaths = []string{"CODEOWNERS", "docs/CODEOWNERS", ".gitea/CODEOWNERS"}

// Review applies the review rules to a tree read by [Inspect]: rules that
// depend on other files (pause-test results, overlapping grants, code
// owners) or on the date (waivers about to lapse). t.Dir is taken to be the
// root of the class repository, where CODEOWNERS lives. It returns the
// problems found, warnings included, in file and line order; it does not
// repeat the problems already in t.Problems.
func Review(t *Tree, now time.Time) []Problem {
	var ps []Problem
	ps = append(ps, reviewWaivers(t, now)...)
	ps = append(ps, reviewPauseTests(t, now)...)
	ps = append(ps, reviewGrantOverlap(t)...)
	ps = append(ps, reviewCodeowners(t)...)
	sortProblems(ps)
	return ps
}

// ReviewClass applies the review rules that need nothing but the class
// itself and the date (today: a waiver lapsing within WaiverWarning). The
// admission webhook uses it; Review applies it to every class of a tree.
func ReviewClass(c *Class, now time.Time) []Problem {
	return reviewWaivers(&Tree{Classes: []*Class{c}}, now)
}

func reviewWaivers(t *Tree, now time.Time) []Problem {
	var ps []Problem
	for _, c := range t.Classes {
		if c.Enforcement != EnforcementAdvisory || c.WaiverExpires.IsZero() {
			continue
		}
		left := c.WaiverExpires.Sub(now)
		if left > 0 && left <= WaiverWarning {
			ps = append(ps, Problem{
				File: c.Source, Line: fieldLineIn(c.Source, c.Line, "spec.waiverExpires"), Object: objectName(KindLockClass, c.Namespace, c.Name),
				Field: "spec.waiverExpires", ID: RuleWaiverExpiring, Warning: true,
				Rule: fmt.Sprintf("waiver lapses in %d days (%s): fence the resource or renew the waiver with the risk owner %s",
					int(left.Hours()/24), c.WaiverExpires.UTC().Format(time.DateOnly), c.RiskOwner),
			})
		}
	}
	return ps
}

func reviewPauseTests(t *Tree, now time.Time) []Problem {
	var ps []Problem
	for _, c := range t.Classes {
		if c.Enforcement != EnforcementFenced {
			continue
		}
		if _, why := CurrentPauseTest(c, t.PauseTests, now); why != "" {
			ps = append(ps, Problem{
				File: c.Source, Line: fieldLineIn(c.Source, c.Line, "spec.enforcement"), Object: objectName(KindLockClass, c.Namespace, c.Name),
				Field: "spec.enforcement", ID: RuleFencedPauseTest, Rule: why,
			})
		}
	}
	for _, pt := range t.PauseTests {
		if !slices.ContainsFunc(t.Classes, func(c *Class) bool { return c.Namespace == pt.Namespace && c.Name == pt.Class }) {
			ps = append(ps, Problem{
				File: pt.Source, Line: fieldLineIn(pt.Source, pt.Line, "spec.class"), Object: objectName(KindPauseTestResult, pt.Namespace, pt.Name),
				Field: "spec.class", ID: RuleFencedPauseTest,
				Rule: fmt.Sprintf("names class %q, which is not defined in namespace %s", pt.Class, pt.Namespace),
			})
		}
	}
	return ps
}

func reviewGrantOverlap(t *Tree) []Problem {
	var ps []Problem
	byName := make(map[string]*Grant)
	for i := range t.Grants {
		g := &t.Grants[i]
		byName[g.Namespace+"/"+g.Name] = g
	}
	for i := range t.Grants {
		g := &t.Grants[i]
		for j, other := range g.SharedWith {
			if _, ok := byName[g.Namespace+"/"+other]; !ok || other == g.Name {
				field := fmt.Sprintf("spec.sharedWith[%d]", j)
				ps = append(ps, Problem{
					File: g.Source, Line: fieldLineIn(g.Source, g.Line, field), Object: objectName(KindLockGrant, g.Namespace, g.Name),
					Field: field, ID: RuleGrantOverlap,
					Rule: fmt.Sprintf("names %q, which is not another LockGrant of namespace %s", other, g.Namespace),
				})
			}
		}
	}
	for i := range t.Grants {
		for j := i + 1; j < len(t.Grants); j++ {
			a, b := &t.Grants[i], &t.Grants[j]
			if a.Namespace != b.Namespace || a.SPIFFEID == b.SPIFFEID ||
				slices.Contains(a.SharedWith, b.Name) || slices.Contains(b.SharedWith, a.Name) {
				continue
			}
			for _, pa := range a.Prefixes {
				for k, pb := range b.Prefixes {
					if !strings.HasPrefix(pa, pb) && !strings.HasPrefix(pb, pa) {
						continue
					}
					field := fmt.Sprintf("spec.prefixes[%d]", k)
					ps = append(ps, Problem{
						File: b.Source, Line: fieldLineIn(b.Source, b.Line, field), Object: objectName(KindLockGrant, b.Namespace, b.Name),
						Field: field, ID: RuleGrantOverlap,
						Rule: fmt.Sprintf("prefix %q overlaps %q, granted to %s by LockGrant %s (%s:%d); if both identities are meant to lock these keys, say so with spec.sharedWith: [%s] on either grant",
							pb, pa, a.SPIFFEID, a.Name, a.Source, a.Line, a.Name),
					})
				}
			}
		}
	}
	return ps
}

// codeownersRule is one rule of a Gitea CODEOWNERS file.
type codeownersRule struct {
	re      *regexp.Regexp
	negated bool
	owners  int
}

func reviewCodeowners(t *Tree) []Problem {
	var (
		path string
		data []byte
	)
	for _, p := range CodeownersPaths {
		b, err := os.ReadFile(filepath.Join(t.Dir, p))
		if err == nil {
			path, data = filepath.Join(t.Dir, p), b
			break
		}
	}
	if path == "" {
		return []Problem{{File: t.Dir, ID: RuleCodeowners,
			Rule: fmt.Sprintf("no CODEOWNERS file (Gitea reads %s at the root of the class repository): add one with an entry per namespace folder",
				strings.Join(CodeownersPaths, ", "))}}
	}
	rules, ps := parseCodeowners(path, data)
	return append(ps, codeownersProblems(path, rules, t.Namespaces)...)
}

// parseCodeowners reads the rules of the CODEOWNERS file path, which holds
// data, and the problems of its lines.
func parseCodeowners(path string, data []byte) ([]codeownersRule, []Problem) {
	var (
		ps    []Problem
		rules []codeownersRule
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		fields := codeownersFields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		expr, negated := strings.CutPrefix(fields[0], "!")
		re, err := regexp.Compile("^" + expr + "$")
		if err != nil {
			ps = append(ps, Problem{File: path, Line: n, ID: RuleCodeowners,
				Rule: fmt.Sprintf("pattern %q is not a Go regular expression (Gitea's CODEOWNERS format): %v", fields[0], err)})
			continue
		}
		if len(fields) == 1 {
			ps = append(ps, Problem{File: path, Line: n, ID: RuleCodeowners,
				Rule: fmt.Sprintf("pattern %q names no owner (@user or @org/team)", fields[0])})
		}
		rules = append(rules, codeownersRule{re: re, negated: negated, owners: len(fields) - 1})
	}
	return rules, ps
}

// codeownersProblems are the namespace folders no rule is about.
func codeownersProblems(path string, rules []codeownersRule, namespaces []string) []Problem {
	var ps []Problem
	for _, ns := range namespaces {
		if !codeownersCovers(rules, ns) {
			ps = append(ps, Problem{File: path, ID: RuleCodeowners,
				Rule: fmt.Sprintf("namespace folder %s/ has no CODEOWNERS entry of its own: add a line such as `%s/.* @%s-owners` so the namespace's owners review its classes", ns, regexp.QuoteMeta(ns), ns)})
		}
	}
	return ps
}

// codeownersCovers reports whether some rule with an owner is about the
// namespace folder ns: it matches a file in ns and does not match the same
// file in a folder of another name (so a catch-all does not count).
func codeownersCovers(rules []codeownersRule, ns string) bool {
	probe, elsewhere := ns+"/class-lint-probe.yaml", "other-namespace-"+ns+"/class-lint-probe.yaml"
	for _, r := range rules {
		if r.negated || r.owners == 0 {
			continue
		}
		if r.re.MatchString(probe) && !r.re.MatchString(elsewhere) {
			return true
		}
	}
	return false
}

// codeownersFields splits a CODEOWNERS line into fields, honouring Gitea's
// escapes (\#, "\ " and \\) and dropping comments.
func codeownersFields(line string) []string {
	var (
		fields []string
		cur    strings.Builder
		esc    bool
	)
	flush := func() {
		if cur.Len() > 0 {
			fields = append(fields, cur.String())
			cur.Reset()
		}
	}
	for _, r := range line {
		switch {
		case esc:
			if r != '#' && r != ' ' && r != '\\' {
				cur.WriteRune('\\')
			}
			cur.WriteRune(r)
			esc = false
		case r == '\\':
			esc = true
		case r == '#':
			flush()
			return fields
		case r == ' ' || r == '\t':
			flush()
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return fields
}

// fieldLineIn returns the line of field in the document starting at line
// of file, or line when the file cannot be read or the field not found.
func fieldLineIn(file string, line int, field string) int {
	data, err := os.ReadFile(file)
	if err != nil {
		return line
	}
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return line
	}
	d := document{first: line, start: line}
	for _, l := range lines[line-1:] {
		if strings.TrimRight(l, " \t\r") == "---" {
			break
		}
		d.lines = append(d.lines, l)
	}
	return d.fieldLine(field)
}
