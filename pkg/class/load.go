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
// that risk waivers have not expired.
//
// If any definition is invalid, LoadDir returns a *[LoadError] listing
// every problem; it wraps [ErrInvalid]. If dir cannot be read, the error
// wraps the underlying fs error.
func LoadDir(dir string, now time.Time) (*Set, error) {
	var (
		classes  []*Class
		grants   []Grant
		problems []Problem
	)
	type loc struct {
		file string
		line int
	}
	seen := make(map[string]loc)
	dup := func(kind, ns, name, file string, line int) bool {
		key := kind + "/" + ns + "/" + name
		if first, ok := seen[key]; ok {
			problems = append(problems, Problem{
				File: file, Line: line, Object: objectName(kind, ns, name), Field: "metadata.name",
				Rule: fmt.Sprintf("duplicate %s, first defined at %s:%d", kind, first.file, first.line),
			})
			return true
		}
		seen[key] = loc{file, line}
		return false
	}

	load := func(path, ns string) {
		data, err := os.ReadFile(path)
		if err != nil {
			problems = append(problems, Problem{File: path, Rule: fmt.Sprintf("cannot read: %v", err)})
			return
		}
		cs, gs, ps := ParseFile(path, data, ns, now)
		problems = append(problems, ps...)
		for _, c := range cs {
			if !dup(KindLockClass, c.Namespace, c.Name, c.Source, c.Line) {
				classes = append(classes, c)
			}
		}
		for _, g := range gs {
			if !dup(KindLockGrant, g.Namespace, g.Name, g.Source, g.Line) {
				grants = append(grants, g)
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
				problems = append(problems, Problem{File: path, Rule: "must be inside a namespace folder"})
			}
		default:
			files, err := os.ReadDir(path)
			if err != nil {
				problems = append(problems, Problem{File: path, Rule: fmt.Sprintf("cannot read: %v", err)})
				continue
			}
			for _, f := range files {
				fpath := filepath.Join(path, f.Name())
				switch {
				case hidden(f.Name()):
				case isDir(fpath, f):
					problems = append(problems, nested(fpath)...)
				case isYAML(f.Name()):
					load(fpath, e.Name())
				}
			}
		}
	}
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b Problem) int {
			return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
		})
		return nil, &LoadError{Problems: problems}
	}
	return NewSet(classes, grants), nil
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
			out = append(out, Problem{File: path, Rule: "must be directly inside a namespace folder; nested folders are not read"})
		}
		return nil
	})
	return out
}
