// Package cost prices lock-class changes: what a change to a class costs
// lockd and etcd in renewals, how long a dead holder can block the next
// one, and what risks it adds, from the load Prometheus reports today.
//
// The figures are estimates for review, not guarantees. A namespace's
// sessions are counted from lockd_sessions, which counts sessions by the
// namespace of their identity, not by class: each class is priced as if
// every session of its namespace renewed at its TTL, an upper bound when a
// namespace has several classes.
package cost

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
)

// Detection is the detection term of the liveness bound. A holder that dies
// just after a keepalive leaves its lease a full TTL; once the lease runs
// out, etcd revokes it within its 500 ms expiry sweep, and a queued waiter
// hears of it from its watch at once or, if it misses the event, from its
// next poll (lockd's default 1 s poll with ±50 % jitter: at most 1.5 s).
// An etcd leader change can add one more TTL (it resets lease deadlines
// unless lease checkpointing is on); the bound leaves that out.
const Detection = 2 * time.Second

// FalseExpiryTTL is the TTL below which an advisory class is flagged: a GC
// pause or network stall longer than the TTL lets a second holder in, and
// nothing at the resource stops the first one's writes.
const FalseExpiryTTL = 60 * time.Second

// DurableWritesPerWaiter is the most extra consensus writes a durable line
// costs per waiter: one to join it, and one more to leave it without the
// key (a timeout, a caller gone). A waiter that is granted leaves in the
// grant's own transaction, so it costs one: the benchmark measures 2.02
// writes per grant on a contended durable key against 1.01 best-effort
// (docs/performance.md). The price is this bound.
const DurableWritesPerWaiter = 2

// Kind says how a class changed.
type Kind string

// Kinds of change.
const (
	// Added means the class exists only in the work tree.
	Added Kind = "added"
	// Removed means the class exists only at the base.
	Removed Kind = "removed"
	// Changed means at least one spec field differs.
	Changed Kind = "changed"
)

// Mark is the diff mark of the kind: "+", "−" or "~".
func (k Kind) Mark() string {
	switch k {
	case Added:
		return "+"
	case Removed:
		return "−"
	default:
		return "~"
	}
}

// Key names a class.
type Key struct {
	// Namespace is the class's namespace.
	Namespace string
	// Class is the class's name.
	Class string
}

// Source reports the current load of lockd. *[Prometheus] is the real one.
type Source interface {
	// Sessions returns the open sessions by namespace. A namespace with no
	// data is absent from the map.
	Sessions(ctx context.Context) (map[string]float64, error)
	// WaitRates returns the acquires that queued per second by class. A
	// class with no data is absent from the map.
	WaitRates(ctx context.Context) (map[Key]float64, error)
}

// FieldChange is one spec field that differs between base and work tree.
type FieldChange struct {
	// Field is the YAML field name under spec, e.g. "ttl".
	Field string `json:"field"`
	// Before is the value at the base ("(none)" when unset).
	Before string `json:"before"`
	// After is the value in the work tree ("(none)" when unset).
	After string `json:"after"`
}

// Side is one class version and its cost.
type Side struct {
	// TTLSeconds is the class TTL.
	TTLSeconds float64 `json:"ttl_seconds"`
	// Enforcement is fenced or advisory.
	Enforcement class.Enforcement `json:"enforcement"`
	// Fairness is best-effort or durable.
	Fairness class.Fairness `json:"fairness"`
	// KeepalivesPerSecond is sessions × 1/(TTL/3): lockd's client sends a
	// keepalive every TTL/3, and each is one etcd lease renewal.
	KeepalivesPerSecond float64 `json:"keepalives_per_second"`
	// LivenessBoundSeconds is TTL + Detection: how long a dead holder can
	// keep the next one waiting.
	LivenessBoundSeconds float64 `json:"liveness_bound_seconds"`
	// DurableWritesPerSecond is DurableWritesPerWaiter × the waiter rate for
	// a durable class, else 0.
	DurableWritesPerSecond float64 `json:"durable_writes_per_second"`
}

// Change is one class that differs between base and work tree, priced.
type Change struct {
	// Kind is added, removed or changed.
	Kind Kind `json:"change"`
	// Namespace is the class's namespace.
	Namespace string `json:"namespace"`
	// Class is the class's name.
	Class string `json:"class"`
	// Fields lists the spec fields that differ (empty unless changed).
	Fields []FieldChange `json:"fields"`
	// Sessions is the namespace's open sessions now (0 when unknown).
	Sessions float64 `json:"sessions"`
	// SessionsKnown is false when Prometheus had no data for the namespace.
	SessionsKnown bool `json:"sessions_known"`
	// WaitersPerSecond is the class's current waiter rate, when a side is
	// durable (0 otherwise or when unknown).
	WaitersPerSecond float64 `json:"waiters_per_second"`
	// Before is the class at the base; nil when added.
	Before *Side `json:"before"`
	// After is the class in the work tree; nil when removed.
	After *Side `json:"after"`
	// Risks are warnings about the work-tree version.
	Risks []string `json:"risks"`
}

// Name is "namespace/class".
func (c Change) Name() string { return c.Namespace + "/" + c.Class }

// KeepalivesPerSecond is the renewal rate of sessions on one TTL: lockd's
// client sends a keepalive every TTL/3.
func KeepalivesPerSecond(sessions float64, ttl time.Duration) float64 {
	if ttl <= 0 {
		return 0
	}
	return sessions / (ttl.Seconds() / 3)
}

// LivenessBound is how long a holder that dies can keep the next one
// waiting: TTL + [Detection].
func LivenessBound(ttl time.Duration) time.Duration { return ttl + Detection }

// DurableWritesPerSecond is the extra consensus writes per second a durable
// queue costs at waitersPerSecond; 0 for best-effort.
func DurableWritesPerSecond(f class.Fairness, waitersPerSecond float64) float64 {
	if f != class.FairnessDurable {
		return 0
	}
	return DurableWritesPerWaiter * waitersPerSecond
}

// FalseExpiryRisk returns a warning for an advisory class whose TTL is below
// [FalseExpiryTTL], or "".
func FalseExpiryRisk(e class.Enforcement, ttl time.Duration) string {
	if e != class.EnforcementAdvisory || ttl >= FalseExpiryTTL {
		return ""
	}
	return fmt.Sprintf("advisory with ttl %s: a GC pause or network stall longer than %s means a duplicate writer, "+
		"and nothing fences it; use a ttl of at least %s or make the resource check tokens", Duration(ttl), Duration(ttl), Duration(FalseExpiryTTL))
}

// Diff pairs the classes of base and head by namespace and name and returns
// those added, removed or changed (any spec field), sorted by namespace and
// name, not yet priced.
func Diff(base, head []*class.Class) []Change {
	index := func(cs []*class.Class) map[Key]*class.Class {
		m := make(map[Key]*class.Class, len(cs))
		for _, c := range cs {
			m[Key{c.Namespace, c.Name}] = c
		}
		return m
	}
	before, after := index(base), index(head)
	var out []Change
	for k, b := range before {
		a, ok := after[k]
		switch {
		case !ok:
			out = append(out, Change{Kind: Removed, Namespace: k.Namespace, Class: k.Class, Fields: []FieldChange{}, Before: side(b)})
		default:
			if fields := diffFields(b, a); len(fields) > 0 {
				out = append(out, Change{Kind: Changed, Namespace: k.Namespace, Class: k.Class, Fields: fields,
					Before: side(b), After: side(a)})
			}
		}
	}
	for k, a := range after {
		if _, ok := before[k]; !ok {
			out = append(out, Change{Kind: Added, Namespace: k.Namespace, Class: k.Class, Fields: []FieldChange{}, After: side(a)})
		}
	}
	slices.SortFunc(out, func(x, y Change) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Class, y.Class))
	})
	return out
}

func side(c *class.Class) *Side {
	return &Side{TTLSeconds: c.TTL.Seconds(), Enforcement: c.Enforcement, Fairness: c.Fairness}
}

func diffFields(b, a *class.Class) []FieldChange {
	var out []FieldChange
	add := func(field, before, after string) {
		if before != after {
			out = append(out, FieldChange{Field: field, Before: orNone(before), After: orNone(after)})
		}
	}
	add("purpose", string(b.Purpose), string(a.Purpose))
	add("enforcement", string(b.Enforcement), string(a.Enforcement))
	add("ttl", Duration(b.TTL), Duration(a.TTL))
	add("tier", string(b.Tier), string(a.Tier))
	add("onQuorumLoss", string(b.OnQuorumLoss), string(a.OnQuorumLoss))
	add("fairness", string(b.Fairness), string(a.Fairness))
	add("resource", b.Resource, a.Resource)
	add("resourceSchemaVersion", b.ResourceSchemaVersion, a.ResourceSchemaVersion)
	add("riskOwner", b.RiskOwner, a.RiskOwner)
	add("waiverExpires", date(b.WaiverExpires), date(a.WaiverExpires))
	add("keys", list(b.Keys), list(a.Keys))
	add("nestedIn", list(b.NestedIn), list(a.NestedIn))
	return out
}

// list is a YAML flow list, "" when empty.
func list(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func date(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if t.Equal(t.Truncate(24 * time.Hour)) {
		return t.UTC().Format(time.DateOnly)
	}
	return t.UTC().Format(time.RFC3339)
}

// Price fills in the cost of each change from the load src reports, and
// returns the notes to show with them: one per namespace (or durable class)
// src had no data for, which is then priced at zero. It asks src for the
// sessions even when there is no change, so that a wrong or unreachable
// Prometheus is found on the first run rather than on the first class
// change; it asks for the waiter rate only when a side is durable.
func Price(ctx context.Context, changes []Change, src Source) ([]string, error) {
	sessions, err := src.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	var waits map[Key]float64
	if slices.ContainsFunc(changes, durable) {
		if waits, err = src.WaitRates(ctx); err != nil {
			return nil, err
		}
	}
	var notes []string
	noted := map[string]bool{}
	for i := range changes {
		c := &changes[i]
		c.Sessions, c.SessionsKnown = sessions[c.Namespace]
		if !c.SessionsKnown && !noted[c.Namespace] {
			noted[c.Namespace] = true
			notes = append(notes, fmt.Sprintf("no data for namespace %s in Prometheus: assumed 0 sessions", c.Namespace))
		}
		if durable(*c) {
			rate, ok := waits[Key{c.Namespace, c.Class}]
			if !ok {
				notes = append(notes, fmt.Sprintf("no data for lockd_waits_total of class %s in Prometheus: assumed 0 waiters/s", c.Name()))
			}
			c.WaitersPerSecond = rate
		}
		for _, s := range []*Side{c.Before, c.After} {
			if s == nil {
				continue
			}
			ttl := time.Duration(s.TTLSeconds * float64(time.Second))
			s.KeepalivesPerSecond = KeepalivesPerSecond(c.Sessions, ttl)
			s.LivenessBoundSeconds = LivenessBound(ttl).Seconds()
			s.DurableWritesPerSecond = DurableWritesPerSecond(s.Fairness, c.WaitersPerSecond)
		}
		c.Risks = []string{}
		if a := c.After; a != nil {
			ttl := time.Duration(a.TTLSeconds * float64(time.Second))
			if r := FalseExpiryRisk(a.Enforcement, ttl); r != "" {
				c.Risks = append(c.Risks, r)
			}
			if a.Fairness == class.FairnessDurable {
				c.Risks = append(c.Risks, fmt.Sprintf("fairness durable: up to %d extra consensus writes per waiter (1 to join the line; "+
					"1 more if it leaves without the key) × %s waiters/s = up to %s writes/s",
					DurableWritesPerWaiter, Number(c.WaitersPerSecond), Number(a.DurableWritesPerSecond)))
			}
		}
	}
	return notes, nil
}

func durable(c Change) bool {
	return (c.Before != nil && c.Before.Fairness == class.FairnessDurable) ||
		(c.After != nil && c.After.Fairness == class.FairnessDurable)
}

// Duration formats d as class files write it: whole seconds as "90s",
// anything else as time.Duration does.
func Duration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// Number formats a rate for people: at most two decimals, no trailing
// zeros.
func Number(v float64) string {
	r := math.Round(v*100) / 100
	if r == 0 {
		r = 0 // no "-0"
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}
