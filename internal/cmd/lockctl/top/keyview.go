package top

import (
	"fmt"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
)

// soonDefault is "expiring soon" for a session whose class TTL is unknown.
const soonDefault = 5 * time.Second

const keysFormat = "%-40s %8s %8s %12s  %s"

// keysView is the opened class's hottest keys.
func (m model) keysView() string {
	var b strings.Builder
	b.WriteString("  " + m.st.hdr.Render(fmt.Sprintf(keysFormat, "KEY", "WAITERS", "AGE", "SESSION LEFT", "HOLDER")) + "\n")
	keys := m.keys()
	if len(keys) == 0 {
		b.WriteString(m.st.dim.Render("  no holds in this class") + "\n")
		return b.String()
	}
	soonAt := m.soonAt(m.class)
	for i, k := range keys {
		left, soon := "-", false
		if k.SessionTTLLeftSeconds != nil {
			d := cmdutil.Duration(*k.SessionTTLLeftSeconds)
			left, soon = d.Round(time.Second).String(), d < soonAt
		}
		line := fmt.Sprintf(keysFormat, k.Key, fmt.Sprint(k.Waiters), k.age(), left, k.Holder)
		b.WriteString(m.row(line, i == m.keyCur, k.Waiters > 0, soon) + "\n")
	}
	return b.String()
}

// soonAt is when a session of class counts as expiring soon: under a third
// of the class TTL, which a holder renewing every TTL/3 never reaches.
func (m model) soonAt(class string) time.Duration {
	if ttl := ClassTTLs(m.data)[class]; ttl > 0 {
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
		field("holder", fmt.Sprintf("%s (session %d)", h.GetHolder(), h.GetSessionId()))
		field("held for", (h.GetAge().AsDuration() + since).Round(time.Second).String())
		if h.GetSessionTtlLeft() == nil {
			field("session left", "not reported by this lockd")
		} else {
			left := max(0, h.GetSessionTtlLeft().AsDuration()-since)
			text := left.Round(time.Second).String() + " (counting down here from lockd's reading " +
				since.Round(time.Second).String() + " ago; renewed by the holder's keepalives)"
			if left < m.soonAt(h.GetClass()) {
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
