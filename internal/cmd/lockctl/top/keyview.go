package top

import (
	"fmt"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
)

// soonDefault is "expiring soon" for a session whose class TTL is unknown.
const soonDefault = 5 * time.Second

const (
	keysFormat      = "%-40s %8s %8s %12s  %s"
	keysExtraFormat = "%-40s %-24s %8s %8s %12s  %s" // with a SHARD or CLASS column
)

// keysView is the opened class's (or shard's) hottest keys. Keys of a
// class say their shard when lockd fronts several clusters; keys of a
// shard say their class.
func (m model) keysView() string {
	var b strings.Builder
	keys := m.keys()
	format, header := keysFormat, []any{"KEY", "WAITERS", "AGE", "SESSION LEFT", "HOLDER"}
	var extra func(HotKey) string // the second column, if any
	switch {
	case m.byShard:
		extra = func(k HotKey) string { return k.Class }
		format, header = keysExtraFormat, []any{"KEY", "CLASS", "WAITERS", "AGE", "SESSION LEFT", "HOLDER"}
	case m.snap != nil && len(m.snap.Shards) > 0:
		extra = func(k HotKey) string { return k.Cluster }
		format, header = keysExtraFormat, []any{"KEY", "SHARD", "WAITERS", "AGE", "SESSION LEFT", "HOLDER"}
	}
	b.WriteString("  " + m.st.hdr.Render(fmt.Sprintf(format, header...)) + "\n")
	if len(keys) == 0 {
		what := "in this class"
		if m.byShard {
			what = "on this shard"
		}
		b.WriteString(m.st.dim.Render("  no holds "+what) + "\n")
		return b.String()
	}
	ttls := ClassTTLs(m.data)
	for i, k := range keys {
		left, soon := "-", false
		if k.SessionTTLLeftSeconds != nil {
			d := cmdutil.Duration(*k.SessionTTLLeftSeconds)
			left, soon = d.Round(time.Second).String(), d < soonAt(ttls, k.Class)
		}
		cols := []any{k.Key, fmt.Sprint(k.Waiters), k.age(), left, k.Holder}
		if extra != nil {
			cols = append([]any{k.Key, extra(k)}, cols[1:]...)
		}
		b.WriteString(m.row(fmt.Sprintf(format, cols...), i == m.keyCur, k.Waiters > 0, soon) + "\n")
	}
	return b.String()
}

// soonAt is when a session of class (TTLs from ttls) counts as expiring soon: under a third
// of the class TTL, which a holder renewing every TTL/3 never reaches.
func soonAt(ttls map[string]time.Duration, class string) time.Duration {
	if ttl := ttls[class]; ttl > 0 {
		return ttl / 3
	}
	return soonDefault
}

// keyView is the opened key: holder, session, waiters in order.
func (m model) keyView() string {
	var b strings.Builder
	field := func(name, value string) { b.WriteString(fmt.Sprintf("  %-14s %s\n", name, value)) }
	if m.inspect == nil {
		if m.inspectErr != nil {
			b.WriteString("  " + m.st.warn.Render(" INSPECT FAILED ") + " " + m.scrub(m.inspectErr) + "\n")
		} else {
			b.WriteString(m.st.dim.Render("  inspecting "+m.key+" …") + "\n")
		}
		return b.String()
	}
	in := m.inspect
	since := max(0, m.clock.Sub(m.inspectedAt))
	field("key", m.key)
	if !in.GetHeld() {
		field("held", "no")
	} else {
		h := in.GetHold()
		field("class", h.GetClass())
		if in.GetRange() != "" {
			field("shard", fmt.Sprintf("%s (range %s, map version %d)", in.GetCluster(), in.GetRange(), in.GetShardMapVersion()))
		}
		field("holder", fmt.Sprintf("%s (session %d)", h.GetHolder(), h.GetSessionId()))
		field("held for", (h.GetAge().AsDuration() + since).Round(time.Second).String())
		if h.GetSessionTtlLeft() == nil {
			field("session left", "not reported by this lockd")
		} else {
			left := max(0, h.GetSessionTtlLeft().AsDuration()-since)
			text := left.Round(time.Second).String() + " (counting down here from lockd's reading " +
				since.Round(time.Second).String() + " ago; renewed by the holder's keepalives)"
			if left < soonAt(ClassTTLs(m.data), h.GetClass()) {
				text = m.st.soon.Render(text + " — expiring soon")
			}
			field("session left", text)
		}
	}
	queue := in.GetQueue()
	waiting := fmt.Sprintf("%d", in.GetWaiters())
	switch {
	case len(queue) > 0:
		waiting = m.st.hot.Render(waiting + " waiting, granted in this order:")
	case in.GetWaiters() > 0:
		waiting = m.st.hot.Render(waiting+" waiting") + " (this lockd does not list the queue)"
	}
	field("waiters", waiting)
	if len(queue) > 0 {
		b.WriteString("  " + m.st.hdr.Render(fmt.Sprintf("%4s  %-40s %19s %10s", "#", "IDENTITY", "SESSION", "WAITED")) + "\n")
		for _, w := range queue {
			b.WriteString(fmt.Sprintf("  %4d  %-40s %19d %10s\n", w.GetPosition(), w.GetIdentity(), w.GetSessionId(),
				(w.GetWaited().AsDuration() + since).Round(time.Second)))
		}
	}
	b.WriteString("  " + m.st.dim.Render("history: lockctl history "+m.key+" --since 1h (each hold and how it ended)") + "\n")
	if m.asking {
		b.WriteString("\n  force-release " + m.key + ": reason: " + m.reason + "█\n")
		b.WriteString(m.st.dim.Render("  enter requests it (a second operator must approve) · esc cancels") + "\n")
	} else if m.pending {
		b.WriteString("\n  " + m.st.dim.Render("requesting force-release of "+m.key+" …") + "\n")
	}
	return b.String()
}
