package printer

import (
	"fmt"
	"strings"
)

// Format is an output format.
type Format string

// Output formats.
const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
	FormatYAML  Format = "yaml"
)

// Formats lists the formats in the order help and completion show them.
var Formats = []Format{FormatTable, FormatJSON, FormatYAML}

// FormatNames are the formats as strings.
func FormatNames() []string {
	s := make([]string, len(Formats))
	for i, f := range Formats {
		s[i] = string(f)
	}
	return s
}

// ParseFormat parses a format name.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if strings.EqualFold(s, string(f)) {
			return f, nil
		}
	}
	return "", fmt.Errorf("must be one of %s", strings.Join(FormatNames(), ", "))
}

// String implements pflag.Value.
func (f *Format) String() string { return string(*f) }

// Set implements pflag.Value.
func (f *Format) Set(s string) error {
	v, err := ParseFormat(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// Type implements pflag.Value; help shows it as the value placeholder.
func (f *Format) Type() string { return strings.Join(FormatNames(), "|") }
