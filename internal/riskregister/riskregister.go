// Package riskregister builds the advisory risk register for the nightly
// report: every advisory class (a class whose resource does not check
// fencing tokens, so a paused holder can overlap the next one), who owns
// that risk, when the waiver lapses and, from Prometheus, how much the class
// was used in the last day.
//
// It reads classes straight from a class directory, including classes
// lockd refuses (a lapsed waiver is exactly what the register is for).
package riskregister

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
)

// Status is where a waiver stands.
type Status string

// Statuses, most urgent first.
const (
	// StatusMissing means the advisory class has no waiverExpires at all.
	StatusMissing Status = "missing"
	// StatusExpired means the waiver has lapsed.
	StatusExpired Status = "expired"
	// StatusExpiring means the waiver lapses within class.WaiverWarning
	// (30 days), the same window class-lint check warns in.
	StatusExpiring Status = "expiring"
	// StatusOK means the waiver lapses later than that.
	StatusOK Status = "ok"
)

// Key names a class.
type Key struct {
	// Namespace is the class's namespace.
	Namespace string
	// Class is the class's name.
	Class string
}

// Row is one advisory class. Its JSON field names are stable.
type Row struct {
	// Namespace is the class's namespace.
	Namespace string `json:"namespace"`
	// Class is the class's name.
	Class string `json:"class"`
	// RiskOwner owns the risk ("" when the class names none).
	RiskOwner string `json:"risk_owner"`
	// WaiverExpires is the waiver's expiry date, YYYY-MM-DD in UTC ("" when
	// missing).
	WaiverExpires string `json:"waiver_expires"`
	// DaysLeft is whole days until the waiver lapses, rounded down:
	// negative once it has lapsed, nil when it is missing.
	DaysLeft *int `json:"days_left"`
	// Status is ok, expiring, expired or missing.
	Status Status `json:"status"`
	// Grants24h is the holds granted in the last 24 hours, rounded; nil
	// when the register was built without Prometheus.
	Grants24h *int64 `json:"grants_24h,omitempty"`
}

// Register is the advisory risk register.
type Register struct {
	// Dir is the class directory it was built from.
	Dir string `json:"dir"`
	// Now is the time days are counted from.
	Now time.Time `json:"now"`
	// Rows are the advisory classes, most urgent first: missing waivers,
	// then by days left, then by namespace and name.
	Rows []Row `json:"advisory"`
	// Notes say what was left out or assumed.
	Notes []string `json:"notes"`
	// WithGrants says Grants24h is filled in (from Prometheus).
	WithGrants bool `json:"-"`
}

// Load builds the register for the class directory dir at now. Classes
// that break a rule are listed all the same; the problems are counted in a
// note, since a class that cannot be decoded at all is left out.
func Load(dir string, now time.Time) (*Register, error) {
	t, err := class.Inspect(dir, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("riskregister: %w", err)
	}
	r := Build(t.Classes, now)
	r.Dir = dir
	if n := len(t.Problems); n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%s has %d problem(s) (run class-lint check %s); classes that could not be read are left out", dir, n, dir))
	}
	return r, nil
}

// Build makes the register of the advisory classes among classes at now.
func Build(classes []*class.Class, now time.Time) *Register {
	r := &Register{Now: now, Rows: []Row{}, Notes: []string{}}
	for _, c := range classes {
		if c.Enforcement != class.EnforcementAdvisory {
			continue
		}
		row := Row{Namespace: c.Namespace, Class: c.Name, RiskOwner: c.RiskOwner, Status: StatusMissing}
		if !c.WaiverExpires.IsZero() {
			days := DaysLeft(c.WaiverExpires, now)
			row.WaiverExpires = c.WaiverExpires.UTC().Format(time.DateOnly)
			row.DaysLeft = &days
			row.Status = WaiverStatus(c.WaiverExpires, now)
		}
		r.Rows = append(r.Rows, row)
	}
	slices.SortFunc(r.Rows, compareRows)
	return r
}

// DaysLeft is the whole days from now until expires, rounded down: -1 on
// the day after a waiver lapsed at midnight.
func DaysLeft(expires, now time.Time) int {
	return int(math.Floor(expires.Sub(now).Hours() / 24))
}

// WaiverStatus is expired when expires is not after now (the rule lockd
// and class-lint check apply), expiring within class.WaiverWarning, else ok.
func WaiverStatus(expires, now time.Time) Status {
	left := expires.Sub(now)
	switch {
	case left <= 0:
		return StatusExpired
	case left <= class.WaiverWarning:
		return StatusExpiring
	default:
		return StatusOK
	}
}

func compareRows(a, b Row) int {
	switch {
	case a.DaysLeft == nil && b.DaysLeft != nil:
		return -1
	case a.DaysLeft != nil && b.DaysLeft == nil:
		return 1
	case a.DaysLeft != nil && b.DaysLeft != nil && *a.DaysLeft != *b.DaysLeft:
		return cmp.Compare(*a.DaysLeft, *b.DaysLeft)
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Class, b.Class))
}

// SetGrants fills in each row's grants in the last 24 hours from counts
// (as Prometheus returns them: increase() extrapolates, so they are
// rounded). A class absent from counts shows 0, and a note names it: either
// it had no grants since lockd started or Prometheus does not scrape lockd.
func (r *Register) SetGrants(counts map[Key]float64) {
	r.WithGrants = true
	var missing []string
	for i := range r.Rows {
		row := &r.Rows[i]
		v, ok := counts[Key{row.Namespace, row.Class}]
		if !ok {
			missing = append(missing, row.Namespace+"/"+row.Class)
		}
		n := int64(math.Round(v))
		row.Grants24h = &n
	}
	switch {
	case len(missing) > 0 && len(counts) == 0:
		r.Notes = append(r.Notes, "no lockd_grants_total data in Prometheus at all: grants shown as 0 (does it scrape lockd?)")
	case len(missing) > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("no lockd_grants_total data in Prometheus for %s: shown as 0 (no grants since lockd started)",
			strings.Join(missing, ", ")))
	}
}

// Counts returns how many rows have each status.
func (r *Register) Counts() map[Status]int {
	out := map[Status]int{}
	for _, row := range r.Rows {
		out[row.Status]++
	}
	return out
}
