// Package printer is the one output path of lockctl (and of any lockd command
// whose output is data: -o table|json|yaml). A command builds a plain
// view value; the printer marshals it for -o json and -o yaml (the view's
// json tags are the stable field names, shared by both), or asks it to
// fill a Table.
//
// Tables are terminal-aware: on a terminal, columns are aligned under a
// header, times are relative ("3m ago") and colour is used when allowed;
// when piped, rows are tab-separated without a header, times are RFC 3339
// and there is never colour.
package printer

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Tabular is a view a command prints.
type Tabular interface {
	// WriteTable renders the view into t for -o table.
	WriteTable(t *Table)
}

// Noter is a view with plain-words lines for the operator, such as "the
// arbiter is sealed". They follow a table on a terminal and go to stderr
// otherwise, so machine-readable stdout stays clean.
type Noter interface {
	Notes() []string
}

// Printer writes views in one format.
type Printer struct {
	Format Format
	Out    io.Writer
	ErrOut io.Writer
	// TTY: stdout is a terminal. Color: colour is allowed (implies TTY).
	TTY, Color bool
	// Now is the clock for relative times.
	Now func() time.Time
}

// Print writes v.
func (p *Printer) Print(v Tabular) error {
	var notes []string
	if n, ok := v.(Noter); ok {
		notes = n.Notes()
	}
	switch p.Format {
	case FormatJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("printing json: %w", err)
		}
		if _, err := p.Out.Write(append(b, '\n')); err != nil {
			return err
		}
		return p.writeNotes(p.ErrOut, notes)
	case FormatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("printing yaml: %w", err)
		}
		if _, err := p.Out.Write(b); err != nil {
			return err
		}
		return p.writeNotes(p.ErrOut, notes)
	case FormatTable, "":
		t := &Table{tty: p.TTY, color: p.Color && p.TTY, now: p.now()}
		v.WriteTable(t)
		if err := t.render(p.Out); err != nil {
			return err
		}
		if p.TTY {
			return p.writeNotes(p.Out, notes)
		}
		return p.writeNotes(p.ErrOut, notes)
	default:
		return fmt.Errorf("unknown output format %q", p.Format)
	}
}

func (p *Printer) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *Printer) writeNotes(w io.Writer, notes []string) error {
	if w == nil {
		return nil
	}
	for _, n := range notes {
		if p.Color && w == p.Out {
			n = Yellow.wrap(n)
		}
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// Style is a cell's colour; it is dropped when colour is off.
type Style int

// Styles.
const (
	Plain Style = iota
	Bold
	Red
	Yellow
	Green
	Dim
)

func (s Style) wrap(text string) string {
	code := map[Style]string{Bold: "1", Red: "31", Yellow: "33", Green: "32", Dim: "2"}[s]
	if code == "" || text == "" {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

// Cell is one styled table cell.
type Cell struct {
	Text  string
	Style Style
}

// Table collects rows, then renders them for a terminal or a pipe.
type Table struct {
	tty, color bool
	now        time.Time
	header     []string
	rows       [][]Cell
	empty      string
	fields     bool
}

// IsTTY reports whether the table is rendered for a terminal.
func (t *Table) IsTTY() bool { return t.tty }

// Header sets the column names (shown on a terminal only).
func (t *Table) Header(cols ...string) { t.header = cols }

// Row adds a row of plain cells.
func (t *Table) Row(cells ...string) {
	r := make([]Cell, len(cells))
	for i, c := range cells {
		r[i] = Cell{Text: c}
	}
	t.rows = append(t.rows, r)
}

// RowCells adds a row of styled cells.
func (t *Table) RowCells(cells ...Cell) { t.rows = append(t.rows, cells) }

// Field adds a "label: value" line of a one-record view. On a terminal the
// values are aligned after "Label:"; piped, the line is "label<TAB>value".
func (t *Table) Field(label string, value Cell) {
	t.fields = true
	t.rows = append(t.rows, []Cell{{Text: label}, value})
}

// Empty sets the line shown on a terminal when there are no rows. Piped,
// no rows print nothing.
func (t *Table) Empty(msg string) { t.empty = msg }

// Time formats a timestamp: relative on a terminal, RFC 3339 (UTC) piped.
// The zero time is "-" on a terminal and empty piped.
func (t *Table) Time(ts time.Time) string {
	if ts.IsZero() {
		if t.tty {
			return "-"
		}
		return ""
	}
	if !t.tty {
		return ts.UTC().Format(time.RFC3339)
	}
	return Relative(t.now, ts)
}

// Duration formats a duration: truncated to the second on a terminal (to the
// millisecond under a second), to the millisecond piped.
func (t *Table) Duration(d time.Duration) string {
	if t.tty && (d >= time.Second || d <= -time.Second) {
		return d.Truncate(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// Relative describes ts against now: "5s ago", "3m ago", "2h ago",
// "4d ago", or "in 5s" for a time ahead.
func Relative(now, ts time.Time) string {
	d := now.Sub(ts)
	suffix := " ago"
	if d < 0 {
		d = -d
		return "in " + coarse(d)
	}
	if d < time.Second {
		return "just now"
	}
	return coarse(d) + suffix
}

func coarse(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
}

func (t *Table) render(w io.Writer) error {
	var b strings.Builder
	switch {
	case len(t.rows) == 0:
		if t.tty && t.empty != "" {
			b.WriteString(t.empty + "\n")
		}
	case !t.tty:
		for _, r := range t.rows {
			for i, c := range r {
				if i > 0 {
					b.WriteByte('\t')
				}
				text := c.Text
				if t.fields && i == 0 {
					text = strings.ToLower(strings.ReplaceAll(text, " ", "_"))
				}
				b.WriteString(sanitize(text))
			}
			b.WriteByte('\n')
		}
	default:
		rows := t.rows
		if t.fields {
			rows = make([][]Cell, len(t.rows))
			for i, r := range t.rows {
				rows[i] = append([]Cell{{Text: r[0].Text + ":", Style: Bold}}, r[1:]...)
			}
		} else if len(t.header) > 0 {
			h := make([]Cell, len(t.header))
			for i, c := range t.header {
				h[i] = Cell{Text: c, Style: Bold}
			}
			rows = append([][]Cell{h}, rows...)
		}
		var widths []int
		for _, r := range rows {
			for i, c := range r {
				if i >= len(widths) {
					widths = append(widths, 0)
				}
				widths[i] = max(widths[i], utf8.RuneCountInString(c.Text))
			}
		}
		for _, r := range rows {
			for i, c := range r {
				text := c.Text
				if t.color {
					text = c.Style.wrap(text)
				}
				b.WriteString(text)
				if i < len(r)-1 {
					b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c.Text)+2))
				}
			}
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sanitize keeps a piped cell on one line and in one column.
func sanitize(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}
