package class

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// LoadDir loads and validates the class directory dir: one folder per
// namespace holding .yaml/.yml files. Other files are ignored, as are
// hidden files and folders (names starting with "."). now is used to check
// that risk waivers have not expired (zero skips that check).
//
// If any definition is invalid, LoadDir returns a *[LoadError] listing
// every problem; it wraps [ErrInvalid]. If dir cannot be read, the error
// wraps the underlying fs error. The review rules of [Review] are not
// applied: lockd serves a directory that passes LoadDir.
func LoadDir(dir string, now time.Time) (*Set, error) {
	t, err := Inspect(dir, now)
	if err != nil {
		return nil, err
	}
	if len(t.Problems) > 0 {
		return nil, &LoadError{Problems: t.Problems}
	}
	return NewSet(t.Classes, t.Grants, t.Homes...).WithPauseTests(t.PauseTests), nil
}

// Tree is everything [Inspect] found in a class directory.
type Tree struct {
	// Dir is the class directory.
	Dir string
	// Namespaces are the names of the namespace folders, sorted.
	Namespaces []string
	// Classes, Grants and PauseTests are the objects that could be decoded,
	// including those that break a rule (see Problems).
	Classes    []*Class
	Grants     []Grant
	PauseTests []PauseTest
	Homes      []Home
	// Problems are the load-rule problems, in file and line order.
	Problems []Problem
}

// Inspect reads the class directory dir like [LoadDir] but returns every
// object that could be decoded along with the problems found, so that a
// directory under review can still be priced and listed. The error is
// non-nil only when dir itself cannot be read.
func Inspect(dir string, now time.Time) (*Tree, error) {
	t := &Tree{Dir: dir}
	type loc struct {
		file string
		line int
	}
	seen := make(map[string]loc)
	load := func(path, ns string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Problems = append(t.Problems, Problem{File: path, Rule: fmt.Sprintf("cannot read: %v", err), ID: RuleLayout})
			return
		}
		f := Parse(path, data, ns, now)
		t.Problems = append(t.Problems, f.Problems...)
		for _, o := range f.Objects {
			kind, ns, name, line := o.key()
			key := kind + "/" + ns + "/" + name
			if first, ok := seen[key]; ok {
				t.Problems = append(t.Problems, Problem{
					File: path, Line: line, Object: objectName(kind, ns, name), Field: "metadata.name",
					Rule: fmt.Sprintf("duplicate %s, first defined at %s:%d", kind, first.file, first.line), ID: RuleDuplicate,
				})
				continue
			}
			seen[key] = loc{path, line}
			switch {
			case o.Class != nil:
				t.Classes = append(t.Classes, o.Class)
			case o.Grant != nil:
				t.Grants = append(t.Grants, *o.Grant)
			case o.Home != nil:
				t.Homes = append(t.Homes, *o.Home)
			default:
				t.PauseTests = append(t.PauseTests, *o.PauseTest)
			}
		}
	}

	// Read two levels by hand rather than with filepath.WalkDir so that
	// symlinked folders (as made by git-sync and similar) are followed.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("class: load %s: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case hidden(e.Name()):
		case !isDir(path, e):
			if isYAML(e.Name()) {
				t.Problems = append(t.Problems, Problem{File: path, Rule: "must be inside a namespace folder", ID: RuleLayout})
			}
		default:
			files, err := os.ReadDir(path)
			if err != nil {
				t.Problems = append(t.Problems, Problem{File: path, Rule: fmt.Sprintf("cannot read: %v", err), ID: RuleLayout})
				continue
			}
			t.Namespaces = append(t.Namespaces, e.Name())
			for _, f := range files {
				fpath := filepath.Join(path, f.Name())
				switch {
				case hidden(f.Name()):
				case isDir(fpath, f):
					t.Problems = append(t.Problems, nested(fpath)...)
				case isYAML(f.Name()):
					load(fpath, e.Name())
				}
			}
		}
	}
	t.Problems = append(t.Problems, CheckOwnership(t.Classes)...)
	t.Problems = append(t.Problems, CheckRegions(t.Classes, t.Homes)...)
	sortProblems(t.Problems)
	return t, nil
}

func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}

func isYAML(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

func hidden(name string) bool { return strings.HasPrefix(name, ".") }

// isDir reports whether path is a folder, following symlinks.
func isDir(path string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir()
	}
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// nested reports the YAML files below a folder nested in a namespace
// folder: they would silently not be read.
func nested(dir string) []Problem {
	var out []Problem
	_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case hidden(e.Name()) && e.IsDir():
			return filepath.SkipDir
		case !e.IsDir() && !hidden(e.Name()) && isYAML(e.Name()):
			out = append(out, Problem{File: path, Rule: "must be directly inside a namespace folder; nested folders are not read", ID: RuleLayout})
		}
		return nil
	})
	return out
}
