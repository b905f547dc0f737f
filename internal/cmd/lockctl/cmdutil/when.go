package cmdutil

import (
	"fmt"
	"time"
)

// ParseWhen reads a --since or --until value: a duration before now ("2h")
// or an RFC 3339 time. "" is the zero time.
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("a duration before now must not be negative, got %s", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration before now (90m, 24h) or an RFC 3339 time (2026-12-01T02:14:00Z), got %q", s)
	}
	return t, nil
}
