package top

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/lipgloss"
)

// helpKeys is every key the console takes, for the ? overlay.
var helpKeys = [][2]string{
	{"↑/k ↓/j", "move the cursor (g/G: first/last)"},
	{"enter", "open: a class's hottest keys, then a key's holder, session and waiters"},
	{"esc/backspace", "back a level (on the class table: clear the filter)"},
	{"/", "filter as you type (classes and keys containing the text); enter keeps it, esc clears it"},
	{"tab", "group the table by class or by shard (the etcd cluster holds are on, when lockd fronts several)"},
	{"s", "cycle the sort: contention, holds, name"},
	{"r", "refresh now"},
	{"f", "on a key: request a force-release (asks for a reason; a second operator approves)"},
	{"?", "this help (esc closes it)"},
	{"q", "quit (ctrl+c also quits, even while typing)"},
}

func (m model) helpView() string {
	var b strings.Builder
	b.WriteString("  " + m.st.hdr.Render("keys") + "\n")
	for _, k := range helpKeys {
		b.WriteString(fmt.Sprintf("  %-14s %s\n", k[0], k[1]))
	}
	b.WriteString("\n  " + m.st.hdr.Render("colours and banners") + "\n")
	for _, c := range []struct {
		style lipgloss.Style
		name  string
		what  string
	}{
		{m.st.hot, "red", "waiters queued: contention"},
		{m.st.soon, "yellow", "a holder's session has under a third of its class TTL left: expiring soon"},
		{m.st.alarm, " SEALED ", "lockd refuses every grant until operators advance the epoch"},
		{m.st.warn, " UNPROTECTED ", "this lockd granted classes open on quorum loss without a quorum (token 0)"},
		{m.st.warn, " EPOCH GRACE ", "the epoch just advanced; grants resume once old holders are fenced"},
		{m.st.alarm, " LOCKD UNREACHABLE ", "lockd did not answer: the data shown is the last good refresh"},
		{m.st.warn, " REFRESH FAILED ", "lockd answered with an error: the data shown is the last good refresh"},
	} {
		b.WriteString("  " + c.style.Render(c.name) + strings.Repeat(" ", max(1, 20-len(c.name))) + c.what + "\n")
	}
	return b.String()
}
