package cmdutil

import (
	"fmt"
	"strings"
)

// Doc removes the common leading indentation of a raw-string help text and
// its surrounding blank lines, so help can be written indented in code.
func Doc(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		} else {
			lines[i] = strings.TrimLeft(l, " \t")
		}
		lines[i] = strings.TrimRight(lines[i], " \t")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

// Docf is Doc then fmt.Sprintf.
func Docf(format string, args ...any) string { return fmt.Sprintf(Doc(format), args...) }

// Example is Doc indented by two spaces, as cobra lays out examples.
func Example(s string) string {
	lines := strings.Split(Doc(s), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n")
}
