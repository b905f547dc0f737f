package classlint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/cost"
)

// reviewOptions say what the pull-request review covers.
type reviewOptions struct {
	// Dir is the class directory of the work tree.
	Dir string
	// Base is the git ref the rehomes and the cost report compare with.
	Base string
	// PrometheusURL, when set, adds the cost report; the rehomes need
	// only the base.
	PrometheusURL string
	// Now is the clock for expiry rules.
	Now func() time.Time
	// costSource, when set, replaces Prometheus (golden tests of the
	// comment's layout; the figures are tested against a real Prometheus).
	costSource cost.Source
}

// review runs check, finds the rehomes against the git base (keys that
// change tier or quorum-loss posture, or lose their class) and, when a
// Prometheus URL is given, prices the change; it renders them as one
// markdown document. failed reports whether check found violations. err is
// non-nil when the review could not be made at all.
func review(ctx context.Context, opts reviewOptions) (markdown string, failed bool, err error) {
	rep, err := runCheck([]string{opts.Dir}, opts.Now())
	if err != nil {
		return "", false, err
	}
	// The comment is compared with the last one posted: paths must not
	// depend on where CI checked the repository out.
	for i := range rep.Dirs {
		rep.Dirs[i] = relPath(rep.Dirs[i])
	}
	for i := range rep.Problems {
		rep.Problems[i].File = relPath(rep.Problems[i].File)
	}
	var b strings.Builder
	b.WriteString("## class-lint\n\n")
	b.WriteString(rep.Markdown())
	if opts.PrometheusURL == "" && opts.costSource == nil {
		// The rehomes need only the base: they are shown all the same.
		rr, err := cost.CompareRehomes(ctx, cost.Options{Dir: opts.Dir, Base: opts.Base})
		if err != nil {
			return "", false, fmt.Errorf("rehomes: %w", err)
		}
		b.WriteString(rr.Markdown())
		b.WriteString("### Renewal cost\n\nNot computed: no Prometheus URL was given (`--prometheus`).\n")
	} else {
		cr, err := cost.Compare(ctx, cost.Options{Dir: opts.Dir, Base: opts.Base, Prometheus: opts.PrometheusURL, Source: opts.costSource})
		if err != nil {
			return "", false, fmt.Errorf("cost: %w", err)
		}
		b.WriteString(cr.Markdown())
	}
	return b.String(), rep.Violations > 0, nil
}

// relPath returns p relative to the working directory when p is inside it.
func relPath(p string) string {
	wd, err := os.Getwd()
	if err != nil || !filepath.IsAbs(p) {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
		return r
	}
	return p
}
