package printer_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli/printer"
)

type rows struct {
	Items []string `json:"items"`
}

func (r rows) WriteTable(t *printer.Table) {
	t.Header("NAME", "STATE")
	for _, it := range r.Items {
		t.RowCells(printer.Cell{Text: it}, printer.Cell{Text: "sealed\tnow", Style: printer.Red})
	}
}

// now is the fixed clock the tests render against.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestColourOnlyOnATerminal(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var out bytes.Buffer
		p := &printer.Printer{Format: printer.FormatTable, Out: &out, ErrOut: &out, TTY: tty, Color: true, Now: func() time.Time { return now }}
		require.NoError(t, p.Print(rows{Items: []string{"a", "bbbb"}}))
		if tty {
			require.Contains(t, out.String(), "\x1b[31m")
			// Alignment counts visible characters, not escape codes.
			lines := strings.Split(out.String(), "\n")
			require.Equal(t, strings.Index(lines[1], "\x1b[31m"), strings.Index(lines[2], "\x1b[31m"))
		} else {
			require.NotContains(t, out.String(), "\x1b[")
			require.Equal(t, "a\tsealed now\nbbbb\tsealed now\n", out.String(), "piped: no header, tab-separated, one line per row")
		}
	}
}

func TestRelative(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "just now", 5 * time.Second: "5s ago", 3*time.Minute + 59*time.Second: "3m ago",
		5 * time.Hour: "5h ago", 47 * time.Hour: "47h ago", 72 * time.Hour: "3d ago", -10 * time.Second: "in 10s",
	} {
		require.Equal(t, want, printer.Relative(now, now.Add(-d)), "%s", d)
	}
}

func TestParseFormat(t *testing.T) {
	f, err := printer.ParseFormat("JSON")
	require.NoError(t, err)
	require.Equal(t, printer.FormatJSON, f)
	_, err = printer.ParseFormat("xml")
	require.EqualError(t, err, "must be one of table, json, yaml")
}
