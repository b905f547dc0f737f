package top

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
)

// View implements tea.Model.
func (m model) View() string {
	var b strings.Builder
	b.WriteString(m.header() + "\n")
	for _, l := range m.banners() {
		b.WriteString(l + "\n")
	}
	switch {
	case m.help:
		b.WriteString(m.helpView())
	case m.screen == screenKey:
		b.WriteString(m.keyView())
	case m.screen == screenKeys:
		b.WriteString(m.keysView())
	case m.byShard:
		b.WriteString(m.shardsView())
	default:
		b.WriteString(m.classesView())
	}
	b.WriteString("\n" + m.footer() + "\n")
	return b.String()
}

func (m model) header() string {
	crumb, opened := "", m.class
	if m.byShard {
		opened = "shard " + m.shard
	}
	switch m.screen {
	case screenClasses:
		if m.byShard {
			crumb = " › shards"
		}
	case screenKeys:
		crumb = " › " + opened
	case screenKey:
		crumb = " › " + opened + " › " + m.key
	}
	at := "-"
	if !m.at.IsZero() {
		at = m.at.UTC().Format("15:04:05")
	}
	filter := ""
	if m.filter != "" || m.typing {
		filter = "  filter: " + m.filter
	}
	return m.st.title.Render("lockctl top"+crumb) + fmt.Sprintf("  every %s  sort: %s%s  at %s", m.interval, m.sortBy, filter, at)
}

// banners are the state lines under the header: sealed, unprotected
// grants, epoch grace, unreachable, a failed action, an action's outcome.
func (m model) banners() []string {
	var out []string
	banner := func(style lipgloss.Style, badge, text string) {
		lines := wrap(text, m.width-len(badge)-3)
		out = append(out, style.Render(" "+badge+" ")+" "+lines[0])
		for _, l := range lines[1:] {
			out = append(out, strings.Repeat(" ", len(badge)+3)+l)
		}
	}
	switch {
	case m.snap != nil && len(m.snap.SealedClusters) > 0:
		for _, c := range m.snap.SealedClusters {
			banner(m.st.alarm, "SEALED", "cluster "+c.Cluster+": lockd refuses every grant of its keys until operators advance its epoch: "+
				c.Reason+" (lockctl epoch status --cluster "+c.Cluster+")")
		}
	case m.snap != nil && m.snap.Sealed:
		banner(m.st.alarm, "SEALED", "lockd refuses every grant until operators advance the epoch: "+
			m.snap.SealedReason+" (lockctl epoch status)")
	}
	if m.snap != nil {
		if u := m.snap.unprotected(); u != "" {
			banner(m.st.warn, "UNPROTECTED", u)
		}
		for _, u := range m.snap.unproven() {
			banner(m.st.warn, "NOT FENCED", u)
		}
	}
	if client.Reason(m.err) == "EPOCH_GRACE" || client.Reason(m.actErr) == "EPOCH_GRACE" {
		banner(m.st.warn, "EPOCH GRACE", "the epoch just advanced: grants resume once every old holder is fenced")
	}
	if m.err != nil {
		last := "no data yet"
		if !m.at.IsZero() {
			last = "showing the last good data, from " + m.at.UTC().Format("15:04:05")
		}
		text := last + "; retrying every " + m.interval.String() + ": " + m.scrub(m.err)
		if unreachable(m.err) {
			banner(m.st.alarm, "LOCKD UNREACHABLE", text)
		} else {
			banner(m.st.warn, "REFRESH FAILED", text)
		}
	}
	if m.actErr != nil {
		banner(m.st.warn, "FAILED", m.scrub(m.actErr))
	}
	if m.notice != "" {
		for _, l := range strings.Split(m.notice, "\n") {
			out = append(out, m.st.ok.Render(l))
		}
	}
	return out
}

// wrap breaks text into lines of at most width runes, at spaces where it
// can.
func wrap(text string, width int) []string {
	width = max(width, 20)
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		for len([]rune(word)) > width {
			if line != "" {
				lines, line = append(lines, line), ""
			}
			r := []rune(word)
			lines, word = append(lines, string(r[:width])), string(r[width:])
		}
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= width:
			line += " " + word
		default:
			lines, line = append(lines, line), word
		}
	}
	return append(lines, line)
}

// unreachable reports whether err means lockd did not answer at all.
func unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return client.Reason(err) == "" // UNAVAILABLE with a reason: lockd answered, its store did not
	}
	return false
}

// row renders one table line with the cursor gutter; hot and soon colour it.
func (m model) row(line string, cursor, hot, soon bool) string {
	style, mark := m.st.plain, "  "
	if cursor {
		style, mark = m.st.cursor, "> "
	}
	switch {
	case hot && cursor:
		style = m.st.hotCursor
	case hot:
		style = m.st.hot
	case soon && cursor:
		style = m.st.soonCursor
	case soon:
		style = m.st.soon
	}
	return mark + style.Render(line)
}

// texts are cells' texts, the longest hold to the second.
func texts(cells func(longest func(time.Duration) string) []printer.Cell) []string {
	cs := cells(func(d time.Duration) string { return d.Round(time.Second).String() })
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Text
	}
	return out
}

// shardsView is the main table grouped by shard: one row per etcd cluster.
func (m model) shardsView() string {
	var b strings.Builder
	b.WriteString("  " + m.st.hdr.Render(padded(shardColumns, columnNames(shardColumns))) + "\n")
	if m.snap == nil || len(m.snap.Shards) == 0 {
		b.WriteString(m.st.dim.Render("  "+noShards+" (tab: back to classes)") + "\n")
		return b.String()
	}
	for i, r := range m.snap.Shards {
		b.WriteString(m.row(padded(shardColumns, texts(r.cells)), i == m.shardCur, r.Waiters > 0 || r.Sealed, false) + "\n")
	}
	b.WriteString("\n" + m.st.dim.Render("  holds and waiters per etcd cluster the keys are homed on (lockctl shards status: the map and each shard's load)") + "\n")
	return b.String()
}

func (m model) classesView() string {
	var b strings.Builder
	b.WriteString("  " + m.st.hdr.Render(padded(classColumns, columnNames(classColumns))) + "\n")
	if m.snap == nil || len(m.snap.Classes) == 0 {
		b.WriteString(m.st.dim.Render("  no classes or holds you may see") + "\n")
		return b.String()
	}
	for i, r := range m.snap.Classes {
		b.WriteString(m.row(padded(classColumns, texts(r.cells)), i == m.classCur, r.Waiters > 0, false) + "\n")
	}
	cur := m.snap.Classes[m.classCur].Ref()
	n := len(m.hist[cur])
	b.WriteString(fmt.Sprintf("\n%s  samples: %d over %s (the last %d are kept)\n", m.st.title.Render(cur), n,
		m.hist.span(cur).Round(time.Second), historyLen))
	rate, p99, waiters := m.hist.grantRate(cur), m.hist.p99(cur), m.hist.waiters(cur)
	b.WriteString(fmt.Sprintf("  %-10s %-*s %s\n", "grants/s", historyLen, sparkline(rate), lastf(rate, "%.1f/s")))
	b.WriteString(fmt.Sprintf("  %-10s %-*s %s\n", "grant p99", historyLen, sparkline(p99), lastDur(p99)))
	b.WriteString(fmt.Sprintf("  %-10s %-*s %s\n", "waiters", historyLen, sparkline(waiters), lastf(waiters, "%.0f")))
	for _, n := range m.snap.Notes() {
		if !strings.HasPrefix(n, "hot: ") && !strings.HasPrefix(n, "lockd is sealed") {
			b.WriteString(m.st.dim.Render("  "+n) + "\n")
		}
	}
	return b.String()
}

func lastf(vals []float64, format string) string {
	if len(vals) == 0 {
		return "-"
	}
	return fmt.Sprintf(format, vals[len(vals)-1])
}

func lastDur(vals []float64) string {
	if len(vals) == 0 {
		return "-"
	}
	return cmdutil.Duration(vals[len(vals)-1]).String()
}

func (m model) footer() string {
	if m.typing {
		return "/" + m.filter + "█" + m.st.dim.Render("   enter keep · esc clear")
	}
	hints := "↑↓ move · enter open · / filter · s sort · ? help · q quit"
	if m.snap != nil && len(m.snap.Shards) > 0 {
		hints = "↑↓ move · enter open · tab classes/shards · / filter · s sort · ? help · q quit"
	}
	switch m.screen {
	case screenKeys:
		hints = "↑↓ move · enter key · esc back · / filter · ? help · q quit"
	case screenKey:
		hints = "f force-release · esc back · r refresh · ? help · q quit"
	}
	return m.st.dim.Render(hints)
}

// padded lays texts out in cols' widths, one space apart.
func padded(cols []column, texts []string) string {
	parts := make([]string, len(texts))
	for i, t := range texts {
		c := cols[i]
		if c.left {
			parts[i] = fmt.Sprintf("%-*s", c.width, t)
		} else {
			parts[i] = fmt.Sprintf("%*s", c.width, t)
		}
	}
	return strings.Join(parts, " ")
}
