// Package printer forwards to internal/cli/printer, where lockctl's printer
// now lives. It exists only because cmdutil/factory.go, which is being
// changed on another branch, still imports this path: once that file
// imports internal/cli/printer, delete this package.
package printer

import "github.com/lockd-dev/lockd/internal/cli/printer"

// Format is printer.Format.
type Format = printer.Format

// FormatTable is printer.FormatTable.
const FormatTable = printer.FormatTable

// Printer is printer.Printer.
type Printer = printer.Printer
