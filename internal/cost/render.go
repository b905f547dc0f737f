package cost

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"
)

// Formulas, as printed under the table.
const (
	keepaliveFormula = "keepalives/s = sessions × 1/(TTL/3): lockd's client renews every TTL/3; " +
		"sessions are the namespace's (lockd_sessions counts by the namespace of the identity, not by class), " +
		"so each class is priced as if all of them used its TTL"
	durableFormula = "durable writes/s = 2 consensus writes per waiter × the class's waiter rate (rate of lockd_waits_total over 5m)"
)

func livenessFormula() string {
	return fmt.Sprintf("liveness bound = TTL + %s detection: a holder that dies just after a keepalive leaves a full TTL, "+
		"then etcd's lease sweep (500 ms) and a waiter's poll (at most 1.5 s) pass before the next grant", Duration(Detection))
}

// row is a change as table cells.
type row struct {
	Mark, Class, Change, Sessions, Keepalives, Liveness, Durable string
}

func (r *Report) rows() []row {
	out := make([]row, 0, len(r.Changes))
	for _, c := range r.Changes {
		sessions := Number(c.Sessions)
		if !c.SessionsKnown {
			sessions += " (no data)"
		}
		out = append(out, row{
			Mark:       c.Kind.Mark(),
			Class:      c.Name(),
			Change:     c.describe(),
			Sessions:   sessions,
			Keepalives: pair(c, func(s *Side) string { return Number(s.KeepalivesPerSecond) }),
			Liveness:   pair(c, func(s *Side) string { return seconds(s.LivenessBoundSeconds) }),
			Durable:    pair(c, func(s *Side) string { return Number(s.DurableWritesPerSecond) }),
		})
	}
	return out
}

// describe is the change column: "added (ttl 15s)", "removed" or the
// fields that differ.
func (c Change) describe() string {
	switch c.Kind {
	case Added:
		return "added (ttl " + seconds(c.After.TTLSeconds) + ")"
	case Removed:
		return "removed"
	}
	parts := make([]string, len(c.Fields))
	for i, f := range c.Fields {
		parts[i] = f.Field + " " + f.Before + " → " + f.After
	}
	return strings.Join(parts, ", ")
}

// pair is "before → after", "-" for a missing side, or one value when
// both are the same.
func pair(c Change, f func(*Side) string) string {
	b, a := "-", "-"
	if c.Before != nil {
		b = f(c.Before)
	}
	if c.After != nil {
		a = f(c.After)
	}
	if b == a {
		return a
	}
	return b + " → " + a
}

func seconds(s float64) string { return Duration(time.Duration(s * float64(time.Second))) }

func (r *Report) hasDurable() bool { return slices.ContainsFunc(r.Changes, durable) }

// risks are the changes' risks prefixed with the class.
func (r *Report) risks() []string {
	var out []string
	for _, c := range r.Changes {
		for _, risk := range c.Risks {
			out = append(out, c.Name()+": "+risk)
		}
	}
	return out
}

// rehomeMessages are the rehomes' messages, in order.
func (r *Report) rehomeMessages() []string { return rehomeMessages(r.Rehomes) }

func rehomeMessages(rs []Rehome) []string {
	var out []string
	for _, rh := range rs {
		out = append(out, rh.Messages...)
	}
	return out
}

func (r *Report) formulas() []string {
	out := []string{keepaliveFormula, livenessFormula()}
	if r.hasDurable() {
		out = append(out, durableFormula)
	}
	return out
}

// WriteText writes the report for a terminal: an aligned diff table with
// + (added), − (removed) and ~ (changed) marks, then risks and notes.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Renewal cost of class changes: %s at %s → work tree\n", r.Dir, r.Base.Short())
	fmt.Fprintf(&b, "Load from Prometheus at %s\n\n", r.Prometheus)
	if len(r.Changes) == 0 {
		b.WriteString("No class changed.\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := "\tCLASS\tCHANGE\tSESSIONS\tKEEPALIVES/S\tLIVENESS BOUND"
		if r.hasDurable() {
			head += "\tDURABLE WRITES/S"
		}
		fmt.Fprintln(tw, head)
		for _, x := range r.rows() {
			line := strings.Join([]string{x.Mark, x.Class, x.Change, x.Sessions, x.Keepalives, x.Liveness}, "\t")
			if r.hasDurable() {
				line += "\t" + x.Durable
			}
			fmt.Fprintln(tw, line)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s:\n", title)
		for _, it := range items {
			fmt.Fprintf(&b, "  - %s\n", it)
		}
	}
	list("Rehomes", r.rehomeMessages())
	list("Risks", r.risks())
	list("Notes", r.Notes)
	if len(r.Changes) > 0 {
		list("How it is computed", r.formulas())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON with stable field names,
// for scripts.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

//go:embed templates/cost.md.tmpl
var markdownTemplate string

var markdown = template.Must(template.New("cost.md").Funcs(template.FuncMap{"cell": cell}).Parse(markdownTemplate))

//go:embed templates/rehome.md.tmpl
var rehomeTemplate string

var rehomeMarkdown = template.Must(template.New("rehome.md").Parse(rehomeTemplate))

// rehomeSection is the markdown section listing rehomes, with notes when
// it stands alone (without the cost section, which shows them).
func rehomeSection(dir string, base Base, rs []Rehome, notes []string) string {
	var b strings.Builder
	data := struct {
		Dir     string
		Base    Base
		Rehomes []Rehome
		Notes   []string
	}{dir, base, rs, notes}
	if err := rehomeMarkdown.Execute(&b, data); err != nil {
		// The template is fixed and its data always fits it.
		panic(fmt.Sprintf("cost: render markdown: %v", err))
	}
	return b.String()
}

// Markdown renders the report as two sections of a pull-request comment:
// the rehomes, then the renewal cost (a diff table with + / − / ~ marks,
// risks, notes and the formulas).
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString(rehomeSection(r.Dir, r.Base, r.Rehomes, nil))
	data := struct {
		*Report
		Rows     []row
		Risks    []string
		Formulas []string
		Durable  bool
	}{r, r.rows(), r.risks(), r.formulas(), r.hasDurable()}
	if err := markdown.Execute(&b, data); err != nil {
		// The template is fixed and its data always fits it.
		panic(fmt.Sprintf("cost: render markdown: %v", err))
	}
	return b.String()
}

// cell escapes a value for a markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// Markdown renders the report as a section of a pull-request comment, the
// same as the first section of [Report.Markdown], with the notes.
func (r *RehomeReport) Markdown() string {
	return rehomeSection(r.Dir, r.Base, r.Rehomes, r.Notes)
}
