package class

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// The seed corpora are the inputs added in each target, the repository's
// own class files (classes/, added by addClassFiles), and what a fuzz run
// found, committed under testdata/fuzz/.

// addClassFiles adds each YAML file under the repository's classes/ to
// f's corpus, with its namespace folder.
func addClassFiles(f *testing.F) {
	root := filepath.Join("..", "..", "classes")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		f.Add(data, strings.Split(rel, string(filepath.Separator))[0])
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
}

// FuzzParseLocatesEveryProblem: Parse never panics on any bytes; every
// problem names the file, a rule, and a field or a line of the file; the
// same bytes parse to the same objects; and every document Parse reports
// Valid, read as a Kubernetes object, is accepted by ParseObject as the
// same object (a class is the same class from a file or from the API
// server). The load-time checks across objects (CheckOwnership,
// CheckRegions, the waiver review) run on what was decoded, and locate
// their problems too.
func FuzzParseLocatesEveryProblem(f *testing.F) {
	f.Add([]byte(header+"kind: LockClass\nmetadata: {name: ledger, namespace: payments}\nspec:\n  keys: [\"payments/ledger/\"]\n  purpose: correctness\n  enforcement: fenced\n  tier: entity\n"), "payments")
	addClassFiles(f)
	f.Fuzz(func(t *testing.T, data []byte, nsDir string) {
		const path = "classes/fuzz/fuzz.yaml"
		got := Parse(path, data, nsDir, testNow)
		lines := strings.Count(string(data), "\n") + 1
		checkProblems(t, "Parse", got.Problems, path, lines)

		if again := Parse(path, data, nsDir, testNow); !reflect.DeepEqual(normalFile(again), normalFile(got)) {
			t.Fatalf("the same bytes parse differently:\n%#v\n%#v", again, got)
		}

		// Every Valid object, as the API server would hold it.
		byLine := make(map[int]Object)
		for _, o := range got.Objects {
			if _, _, _, line := o.key(); o.Valid {
				byLine[line] = o
			}
		}
		for _, d := range (&fileParser{path: path}).split(data) {
			o, ok := byLine[d.start]
			if !ok {
				continue
			}
			js, err := yaml.YAMLToJSONStrict([]byte(strings.Join(d.lines, "\n")))
			if err != nil {
				t.Fatalf("a Valid document at line %d is not YAML: %v", d.start, err)
			}
			var obj map[string]any
			if err := json.Unmarshal(js, &obj); err != nil {
				t.Fatal(err)
			}
			// What the API server adds is not the author's: it changes nothing.
			if meta, ok := obj["metadata"].(map[string]any); ok {
				meta["uid"], meta["generation"] = "6f1c", 3.0
			}
			obj["status"] = map[string]any{"fenced": true}
			k, ps := ParseObject(obj)
			if len(ps) != 0 || !k.Valid {
				t.Fatalf("the document at line %d is Valid in a file; as a Kubernetes object: %v", d.start, ps)
			}
			if !reflect.DeepEqual(normalObject(k), normalObject(o)) {
				t.Fatalf("the document at line %d as a Kubernetes object:\n%#v\nin a file:\n%#v", d.start, normalObject(k), normalObject(o))
			}
		}

		var (
			classes []*Class
			homes   []Home
		)
		for _, o := range got.Objects {
			switch {
			case o.Class != nil:
				classes = append(classes, o.Class)
			case o.Home != nil:
				homes = append(homes, *o.Home)
			}
		}
		cross := append(CheckOwnership(classes), CheckRegions(classes, homes)...)
		for _, c := range classes {
			cross = append(cross, ReviewClass(c, testNow)...)
		}
		checkProblems(t, "the cross-object checks", cross, path, lines)
	})
}

// FuzzParseObjectAgreesWithParse: ParseObject never panics on any object
// the API server could hand over (any JSON object); a refused object always
// has a problem saying why, naming the object's source, and a field or a
// line; and what ParseObject accepts, Parse accepts from a file in the
// namespace's folder, as the same object.
func FuzzParseObjectAgreesWithParse(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"locks.lockd.dev/v1alpha1","kind":"LockGrant","metadata":{"name":"ledger","namespace":"payments"},"spec":{"spiffeID":"spiffe://lockd.local/payments/ledger","prefixes":["payments/ledger/"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil || obj == nil {
			return
		}
		o, ps := ParseObject(obj)
		for _, p := range ps {
			if !strings.HasPrefix(p.File, "kubernetes:") {
				t.Fatalf("problem %q does not name the object's source", p.Error())
			}
		}
		checkProblems(t, "ParseObject", ps, "", 0)
		if o.Valid != (len(ps) == 0) {
			t.Fatalf("Valid %v with problems %v", o.Valid, ps)
		}
		if !o.Valid {
			return
		}
		meta, _ := obj["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		authored := map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"],
			"metadata": map[string]any{"name": meta["name"], "namespace": ns}, "spec": obj["spec"]}
		js, err := json.Marshal(authored)
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			t.Fatal(err)
		}
		file := Parse(ns+"/objects.yaml", y, ns, time.Time{})
		if len(file.Problems) != 0 || len(file.Objects) != 1 || !file.Objects[0].Valid {
			t.Fatalf("ParseObject accepts the object; Parse of it as YAML:\n%s\n%v", y, file.Problems)
		}
		if !reflect.DeepEqual(normalObject(file.Objects[0]), normalObject(o)) {
			t.Fatalf("the object as YAML:\n%#v\nfrom the API:\n%#v", normalObject(file.Objects[0]), normalObject(o))
		}
	})
}

// checkProblems fails unless every problem is located: in file (when not
// empty), with a known rule, and a field or a line in 1..lines (any line
// when lines is 0).
func checkProblems(t *testing.T, what string, ps []Problem, file string, lines int) {
	t.Helper()
	for _, p := range ps {
		switch {
		case file != "" && p.File != file:
			t.Fatalf("%s: problem %q names file %q, want %q", what, p.Error(), p.File, file)
		case p.Rule == "" || !slices.Contains(Rules, p.ID):
			t.Fatalf("%s: problem %q has no rule, or an unknown rule id %q", what, p.Error(), p.ID)
		case p.Field == "" && p.Line <= 0:
			t.Fatalf("%s: problem %q names neither a field nor a line", what, p.Error())
		case p.Line < 0 || lines > 0 && p.Line > lines:
			t.Fatalf("%s: problem %q is at line %d of a %d-line file", what, p.Error(), p.Line, lines)
		}
	}
}

// normalFile is f with its objects made comparable (see normalObject),
// source and line kept.
func normalFile(f File) File {
	out := File{Problems: f.Problems}
	for _, o := range f.Objects {
		out.Objects = append(out.Objects, normalTimes(o))
	}
	return out
}

// normalObject is a copy of o without where it was read from (file and
// line, or the Kubernetes source) and with its times in UTC, so objects
// read from different places compare equal when they say the same.
func normalObject(o Object) Object {
	o = normalTimes(o)
	switch {
	case o.Class != nil:
		o.Class.Source, o.Class.Line = "", 0
	case o.Grant != nil:
		o.Grant.Source, o.Grant.Line = "", 0
	case o.Home != nil:
		o.Home.Source, o.Home.Line = "", 0
	case o.PauseTest != nil:
		o.PauseTest.Source, o.PauseTest.Line = "", 0
	}
	return o
}

// normalTimes is a copy of o with its times in UTC: time.Parse gives each
// offset its own *Location, which reflect.DeepEqual tells apart.
func normalTimes(o Object) Object {
	switch {
	case o.Class != nil:
		c := *o.Class
		c.WaiverExpires = c.WaiverExpires.UTC()
		o.Class = &c
	case o.Grant != nil:
		g := *o.Grant
		o.Grant = &g
	case o.Home != nil:
		h := *o.Home
		o.Home = &h
	case o.PauseTest != nil:
		pt := *o.PauseTest
		pt.RanAt, pt.Expires = pt.RanAt.UTC(), pt.Expires.UTC()
		o.PauseTest = &pt
	}
	return o
}

// FuzzCodeownersLocatesProblemsAndTakesTheSuggestedLine: reading any
// CODEOWNERS file never panics; every problem about a line names it; and
// the line class-lint suggests for an uncovered namespace folder, added to
// the file, covers that folder, whatever came before it (Gitea reads every
// line of the file).
func FuzzCodeownersLocatesProblemsAndTakesTheSuggestedLine(f *testing.F) {
	f.Add([]byte(".*            @platform-team\npayments/.*   @payments-team\n"), "payments")
	f.Fuzz(func(t *testing.T, data []byte, ns string) {
		if !lockkey.IsDNSLabel(ns) {
			ns = "payments" // namespace folders are namespaces: DNS labels
		}
		const path = "classes/CODEOWNERS"
		rules, ps := parseCodeowners(path, data)
		lines := strings.Count(string(data), "\n") + 1
		for _, p := range ps {
			if p.File != path || p.Line < 1 || p.Line > lines || p.ID != RuleCodeowners {
				t.Fatalf("problem %q: want file %s, a line in 1..%d and rule %s", p.Error(), path, lines, RuleCodeowners)
			}
		}
		uncovered := codeownersProblems(path, rules, []string{ns})
		if codeownersCovers(rules, ns) != (len(uncovered) == 0) {
			t.Fatalf("covers %v, but problems %v", codeownersCovers(rules, ns), uncovered)
		}
		for _, p := range uncovered {
			_, suggested, ok := strings.Cut(p.Rule, "`")
			suggested, _, ok2 := strings.Cut(suggested, "`")
			if !ok || !ok2 {
				t.Fatalf("problem %q suggests no line", p.Error())
			}
			fixed := append(append(slices.Clip(data), '\n'), suggested...)
			fixedRules, _ := parseCodeowners(path, fixed)
			if !codeownersCovers(fixedRules, ns) {
				t.Fatalf("with the suggested line %q added, folder %s/ is still not covered", suggested, ns)
			}
		}
	})
}
