package class

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a class directory, located precisely
// enough for a linter to print it.
type Problem struct {
	// File is the path of the offending file (or directory).
	File string
	// Line is the 1-based line in File, or 0 when unknown.
	Line int
	// Object is "Kind namespace/name", or empty when not known.
	Object string
	// Field is the field path, e.g. "spec.ttl", or empty.
	Field string
	// Rule describes the rule broken.
	Rule string
	// ID names the rule broken, e.g. "ttl-range" (see Rules), so that
	// tools and people can refer to it.
	ID string
	// Warning marks a problem that does not fail a check (for example a
	// waiver that lapses soon). Loaders never return warnings.
	Warning bool
}

// Error formats the problem as "file:line: Kind ns/name: field: rule",
// leaving out parts that are empty.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
	}
	for _, part := range []string{p.Object, p.Field, p.Rule} {
		if part != "" {
			b.WriteString(": ")
			b.WriteString(part)
		}
	}
	return b.String()
}

// LoadError reports every problem found while loading a class directory.
// It wraps [ErrInvalid] and each [Problem].
type LoadError struct {
	// Problems lists the problems in file and line order.
	Problems []Problem
}

// Error lists all problems, one per line.
func (e *LoadError) Error() string {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	n := "problems"
	if len(e.Problems) == 1 {
		n = "problem"
	}
	return fmt.Sprintf("%v: %d %s:\n%v", ErrInvalid, len(e.Problems), n, errors.Join(errs...))
}

// Unwrap returns ErrInvalid followed by the problems, so that errors.Is
// and errors.As see them.
func (e *LoadError) Unwrap() []error {
	errs := make([]error, 0, len(e.Problems)+1)
	errs = append(errs, ErrInvalid)
	for _, p := range e.Problems {
		errs = append(errs, p)
	}
	return errs
}
