package cost

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
)

// Report is the priced difference between the class directory at a git
// base and in the work tree. Its JSON field names are stable.
type Report struct {
	// Dir is the class directory, as given.
	Dir string `json:"dir"`
	// Base is what the work tree was compared with.
	Base Base `json:"base"`
	// Prometheus is the URL the load came from.
	Prometheus string `json:"prometheus"`
	// DetectionSeconds is the Detection term of every liveness bound.
	DetectionSeconds float64 `json:"detection_seconds"`
	// Changes are the classes added, removed or changed, by namespace and
	// name.
	Changes []Change `json:"changes"`
	// Rehomes are the keys that change tier or quorum-loss posture, or
	// lose their class, by namespace and prefix ([Rehomes]).
	Rehomes []Rehome `json:"rehomes"`
	// Notes say what was assumed (no data in Prometheus, a fallback base)
	// or left out (classes that could not be read).
	Notes []string `json:"notes"`
}

// Options say what Compare compares and where the load comes from.
type Options struct {
	// Dir is the class directory, inside a git work tree.
	Dir string
	// Base is the git ref to compare with; empty means DefaultBase, with
	// fallbacks.
	Base string
	// Prometheus is the URL of a Prometheus server that scrapes lockd.
	Prometheus string
	// Source, when set, is used instead of Prometheus (for tests).
	Source Source
}

// Compare loads the class directory at the base ref and in the work tree,
// prices the classes that differ with the load Prometheus reports and
// finds the keys that change tier or posture ([Rehomes]). It reads classes
// even when they break a rule lockd enforces (a lapsed waiver): the review
// is about what the change costs.
// An unreachable Prometheus is an error; a namespace it has no data for is
// priced at zero and named in Notes.
func Compare(ctx context.Context, o Options) (*Report, error) {
	src := o.Source
	if src == nil {
		p, err := NewPrometheus(o.Prometheus)
		if err != nil {
			return nil, err
		}
		src = p
	}
	t, err := readTrees(ctx, o.Dir, o.Base)
	if err != nil {
		return nil, err
	}
	r, err := Estimate(ctx, t.before, t.after, src)
	if err != nil {
		return nil, err
	}
	r.Dir, r.Base, r.Prometheus = o.Dir, t.base, o.Prometheus
	r.Notes = append(t.notes, r.Notes...)
	return r, nil
}

// trees are the classes of a class directory at a git base and in the work
// tree.
type trees struct {
	base          Base
	before, after []*class.Class
	// notes say which base was used when it is not the one asked for, and
	// that classes the work tree could not read are left out.
	notes []string
}

// readTrees reads the class directory dir at the base ref (empty: the
// default, with fallbacks) and in the work tree. It reads classes even when
// they break a rule lockd enforces (a lapsed waiver): the review is about
// what the change does.
func readTrees(ctx context.Context, dir, ref string) (*trees, error) {
	tmp, err := os.MkdirTemp("", "class-lint-base-")
	if err != nil {
		return nil, fmt.Errorf("cost: temp dir for the base classes: %w", err)
	}
	defer os.RemoveAll(tmp)

	base, baseDir, err := checkoutBase(ctx, dir, ref, tmp)
	if err != nil {
		return nil, err
	}
	t := &trees{base: base}
	if baseDir != "" {
		if t.before, _, err = load(baseDir); err != nil {
			return nil, fmt.Errorf("cost: classes at %s: %w", base.Ref, err)
		}
	}
	var problems int
	if t.after, problems, err = load(dir); err != nil {
		return nil, err
	}
	if base.Note != "" {
		t.notes = append(t.notes, base.Note)
	}
	if problems > 0 {
		t.notes = append(t.notes, fmt.Sprintf("%s has %d problem(s) (run class-lint check %s); classes that could not be read are left out",
			dir, problems, dir))
	}
	return t, nil
}

// Estimate prices the difference between the classes before and after with
// the load src reports. The report's Dir, Base and Prometheus are left for
// the caller.
func Estimate(ctx context.Context, before, after []*class.Class, src Source) (*Report, error) {
	r := &Report{DetectionSeconds: Detection.Seconds(), Changes: Diff(before, after), Rehomes: Rehomes(before, after)}
	notes, err := Price(ctx, r.Changes, src)
	if err != nil {
		return nil, err
	}
	r.Notes = append([]string{}, notes...)
	if r.Changes == nil {
		r.Changes = []Change{}
	}
	return r, nil
}

// load reads every class of dir that can be decoded, rule violations or
// not, and counts the problems found. A zero now skips the waiver-expiry
// check: a lapsed waiver does not change what a class costs.
func load(dir string) ([]*class.Class, int, error) {
	t, err := class.Inspect(dir, time.Time{})
	if err != nil {
		return nil, 0, fmt.Errorf("cost: %w", err)
	}
	return t.Classes, len(t.Problems), nil
}
