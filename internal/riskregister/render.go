package riskregister

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// columns are the column names, lower case, with grants only when known.
func (r *Register) columns() []string {
	cols := []string{"namespace", "class", "risk owner", "waiver expires", "days left", "status"}
	if r.WithGrants {
		cols = append(cols, "grants 24h")
	}
	return cols
}

// values are a row's cells; unknown values are "".
func (r *Register) values(row Row) []string {
	var days, grants string
	if row.DaysLeft != nil {
		days = strconv.Itoa(*row.DaysLeft)
	}
	out := []string{row.Namespace, row.Class, row.RiskOwner, row.WaiverExpires, days, string(row.Status)}
	if r.WithGrants {
		if row.Grants24h != nil {
			grants = strconv.FormatInt(*row.Grants24h, 10)
		}
		out = append(out, grants)
	}
	return out
}

// cells are a row's values for people: unknown values are "-", tabs and
// line breaks are spaces, and markdown's cell separator is escaped when md
// is set.
func (r *Register) cells(row Row, md bool) []string {
	out := r.values(row)
	for i, v := range out {
		v = strings.NewReplacer("\t", " ", "\n", " ").Replace(v)
		switch {
		case v == "":
			v = "-"
		case md:
			v = strings.ReplaceAll(v, "|", `\|`)
		}
		out[i] = v
	}
	return out
}

// summary is "3 advisory classes: 1 expired, 1 expiring within 30 days".
func (r *Register) summary() string {
	n := len(r.Rows)
	s := fmt.Sprintf("%d advisory class", n)
	if n != 1 {
		s += "es"
	}
	c := r.Counts()
	var parts []string
	if c[StatusMissing] > 0 {
		parts = append(parts, fmt.Sprintf("%d without a waiver", c[StatusMissing]))
	}
	if c[StatusExpired] > 0 {
		parts = append(parts, fmt.Sprintf("%d expired", c[StatusExpired]))
	}
	if c[StatusExpiring] > 0 {
		parts = append(parts, fmt.Sprintf("%d expiring within 30 days", c[StatusExpiring]))
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

func (r *Register) day() string { return r.Now.UTC().Format(time.DateOnly) }

// WriteTable writes the register as an aligned table for a terminal,
// followed by its notes.
func (r *Register) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Advisory risk register of %s on %s: %s\n\n", r.Dir, r.day(), r.summary())
	if len(r.Rows) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(r.columns(), "\t")))
		for _, row := range r.Rows {
			fmt.Fprintln(tw, strings.Join(r.cells(row, false), "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Markdown renders the register as a section of the nightly report.
func (r *Register) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Advisory risk register\n\n`%s` on %s: %s.\n", r.Dir, r.day(), r.summary())
	if len(r.Rows) > 0 {
		cols := r.columns()
		b.WriteString("\n| " + strings.Join(cols, " | ") + " |\n|")
		for _, c := range cols {
			if c == "days left" || c == "grants 24h" {
				b.WriteString("--:|")
			} else {
				b.WriteString("---|")
			}
		}
		b.WriteString("\n")
		for _, row := range r.Rows {
			cells := r.cells(row, true)
			if row.Status != StatusOK {
				cells[5] = "**" + cells[5] + "**"
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n**Notes**\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// WriteCSV writes a header line and one line per row, quoted as RFC 4180
// wants; the column names are the JSON field names. Notes are not
// included.
func (r *Register) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := []string{"namespace", "class", "risk_owner", "waiver_expires", "days_left", "status"}
	if r.WithGrants {
		head = append(head, "grants_24h")
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, row := range r.Rows {
		if err := cw.Write(r.values(row)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the register as indented JSON with stable field names.
func (r *Register) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
