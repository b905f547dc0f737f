// Package golden compares test output with files under testdata/.
// Run `go test ./internal/cmd/lockctl/... -update` to rewrite them.
package golden

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/golden"
)

// Assert compares got with testdata/<name>.golden.
func Assert(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Assert(t, name, got)
}

// Now is the fixed clock golden output is rendered against.
var Now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// AssertPrinted renders v in every output mode (table on a terminal,
// table piped, json, yaml) and compares each with
// testdata/<name>.<mode>.golden. Stdout and stderr are both recorded: a
// mode's notes belong in one of them.
func AssertPrinted(t *testing.T, name string, v printer.Tabular) {
	t.Helper()
	modes := []struct {
		mode   string
		format printer.Format
		tty    bool
	}{
		{"table-tty", printer.FormatTable, true},
		{"table-piped", printer.FormatTable, false},
		{"json", printer.FormatJSON, false},
		{"yaml", printer.FormatYAML, false},
	}
	for _, m := range modes {
		t.Run(m.mode, func(t *testing.T) {
			var out, errOut bytes.Buffer
			p := &printer.Printer{Format: m.format, Out: &out, ErrOut: &errOut, TTY: m.tty, Now: func() time.Time { return Now }}
			require.NoError(t, p.Print(v))
			got := out.String()
			if errOut.Len() > 0 {
				got += "--- stderr ---\n" + errOut.String()
			}
			Assert(t, name+"."+m.mode, []byte(got))
		})
	}
}
