package classlint

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/cli"
)

// CheckOptions are the options of class-lint check.
type CheckOptions struct {
	// Dirs are the class directories, each the root of a class repository.
	Dirs []string
	// Output is text, json or markdown.
	Output string
	// Now is the clock for waiver and pause-test expiry.
	Now func() time.Time
	Out io.Writer
}

func newCheckCmd(stdout io.Writer) *cobra.Command {
	opts := CheckOptions{Output: "text", Now: time.Now, Out: stdout}
	cmd := &cobra.Command{
		Use:   "check [dir…]",
		Short: "Check class directories (default ./classes) against every class rule",
		Long: `Check reads each class directory (the root of a class repository: one folder per
namespace, CODEOWNERS at the root) and applies the rules lockd applies at load
plus the review rules: a current pause-test result for every fenced class,
waivers about to lapse (a warning), overlapping grants, and a CODEOWNERS entry
per namespace folder. Each problem is printed as

  file:line: rule-id: Kind namespace/name: field: message

Exit status: 0 no violations (warnings allowed), 1 violations, 2 usage error
or a directory that cannot be read.
docs/class-lint.md lists the rules.`,
		Example: `  class-lint check
  class-lint check ./classes -o json | jq '.problems[] | select(.rule == "ttl-range")'
  class-lint check ./classes -o markdown > review.md`,
		RunE: func(_ *cobra.Command, args []string) error {
			opts.Dirs = args
			if len(opts.Dirs) == 0 {
				opts.Dirs = []string{"classes"}
			}
			return checkRun(opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.Output, "output", "o", opts.Output, "output format: text, json or markdown")
	f.Var(&nowFlag{now: &opts.Now}, "now", "check as of this RFC 3339 time instead of the clock (for reproducible reports)")
	return cmd
}

// checkRun checks the directories and prints the report on opts.Out. Its
// error says why the check could not be made; violations are a silent
// ExitViolations, the report having said what they are.
func checkRun(opts CheckOptions) error {
	switch opts.Output {
	case "text", "json", "markdown":
	default:
		return cli.Usagef("-o must be text, json or markdown, got %q", opts.Output)
	}
	rep, err := runCheck(opts.Dirs, opts.Now())
	if err != nil {
		return cli.Exit(ExitUsage, err)
	}
	switch opts.Output {
	case "json":
		enc := json.NewEncoder(opts.Out)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	case "markdown":
		io.WriteString(opts.Out, rep.Markdown())
	default:
		rep.Text(opts.Out)
	}
	if rep.Violations > 0 {
		return &cli.ExitError{Code: ExitViolations, Silent: true}
	}
	return nil
}

// checkReport is the result of check over one or more class directories.
type checkReport struct {
	Dirs       []string        `json:"dirs"`
	Problems   []reportProblem `json:"problems"`
	Violations int             `json:"violations"`
	Warnings   int             `json:"warnings"`
}

// reportProblem is a class.Problem as check reports it.
type reportProblem struct {
	File     string `json:"file"`
	Line     int    `json:"line,omitempty"`
	Rule     string `json:"rule"`
	Severity string `json:"severity"`
	Object   string `json:"object,omitempty"`
	Field    string `json:"field,omitempty"`
	Message  string `json:"message"`
}

// runCheck inspects and reviews each directory. The error is non-nil only
// when a directory cannot be read at all.
func runCheck(dirs []string, now time.Time) (*checkReport, error) {
	rep := &checkReport{Dirs: dirs, Problems: []reportProblem{}}
	for _, dir := range dirs {
		t, err := class.Inspect(dir, now)
		if err != nil {
			return nil, fmt.Errorf("%w (give the class directory: one folder per namespace)", err)
		}
		for _, p := range append(t.Problems, class.Review(t, now)...) {
			rp := reportProblem{File: p.File, Line: p.Line, Rule: p.ID, Severity: "error",
				Object: p.Object, Field: p.Field, Message: p.Rule}
			if p.Warning {
				rp.Severity = "warning"
				rep.Warnings++
			} else {
				rep.Violations++
			}
			rep.Problems = append(rep.Problems, rp)
		}
	}
	return rep, nil
}

// Text writes one line per problem, then a summary.
func (r *checkReport) Text(w io.Writer) {
	for _, p := range r.Problems {
		loc := p.File
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", p.File, p.Line)
		}
		fmt.Fprintf(w, "%s: %s: %s\n", loc, p.Rule, p.message())
	}
	fmt.Fprintf(w, "%s: %s\n", strings.Join(r.Dirs, ", "), r.summary())
}

func (p reportProblem) message() string {
	var parts []string
	if p.Severity == "warning" {
		parts = append(parts, "warning")
	}
	for _, s := range []string{p.Object, p.Field, p.Message} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

func (r *checkReport) summary() string {
	switch {
	case r.Violations == 0 && r.Warnings == 0:
		return "ok"
	case r.Violations == 0:
		return fmt.Sprintf("ok, %s", plural(r.Warnings, "warning"))
	default:
		return fmt.Sprintf("%s, %s", plural(r.Violations, "violation"), plural(r.Warnings, "warning"))
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Markdown renders the report for a pull-request comment.
func (r *checkReport) Markdown() string {
	var b strings.Builder
	b.WriteString("### Class rules\n\n")
	switch {
	case r.Violations > 0:
		fmt.Fprintf(&b, "❌ **%s** in `%s`", plural(r.Violations, "violation"), strings.Join(r.Dirs, "`, `"))
		if r.Warnings > 0 {
			fmt.Fprintf(&b, ", %s", plural(r.Warnings, "warning"))
		}
		b.WriteString(". The pull request cannot merge until they are fixed.\n\n")
	case r.Warnings > 0:
		fmt.Fprintf(&b, "✅ No violations in `%s`; %s.\n\n", strings.Join(r.Dirs, "`, `"), plural(r.Warnings, "warning"))
	default:
		fmt.Fprintf(&b, "✅ No violations in `%s`.\n\n", strings.Join(r.Dirs, "`, `"))
		return b.String()
	}
	b.WriteString("| | Where | Rule | Object | Problem |\n|---|---|---|---|---|\n")
	for _, p := range r.Problems {
		mark := "❌"
		if p.Severity == "warning" {
			mark = "⚠️"
		}
		loc := p.File
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", p.File, p.Line)
		}
		msg := p.Message
		if p.Field != "" {
			msg = "`" + p.Field + "`: " + msg
		}
		fmt.Fprintf(&b, "| %s | `%s` | `%s` | %s | %s |\n", mark, loc, p.Rule, mdCell(p.Object), mdCell(msg))
	}
	b.WriteString("\n")
	return b.String()
}

// mdCell escapes text for a markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
