package classlint

import (
	"fmt"
	"time"
)

// nowFlag is the --now flag of the subcommands that read the date: it
// replaces the clock with a fixed RFC 3339 time, for reproducible reports
// and tests.
type nowFlag struct {
	now *func() time.Time
	at  string
}

func (f *nowFlag) String() string { return f.at }

func (f *nowFlag) Type() string { return "time" }

func (f *nowFlag) Set(s string) error {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("must be an RFC 3339 time such as 2026-03-01T12:00:00Z")
	}
	f.at = s
	*f.now = func() time.Time { return t }
	return nil
}
