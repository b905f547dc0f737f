package top

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// styles are the console's colours. Without colour every style renders
// plain text, so meaning never rests on colour alone: the cursor row is
// marked ">" and the banners say what they are in words.
type styles struct {
	title, hdr, dim lipgloss.Style
	// hot: a class or key with waiters. soon: a session about to expire.
	hot, soon lipgloss.Style
	// plain has no style; cursor marks the selected row (with hot or
	// soon colours too).
	plain, cursor, hotCursor, soonCursor lipgloss.Style
	// alarm: lockd sealed or unreachable. warn: epoch grace, a failed
	// refresh or action. ok: an action's outcome.
	alarm, warn, ok lipgloss.Style
}

// newStyles returns the console's styles, in colour only when color is
// set (iostreams.ColorEnabled: a terminal, no NO_COLOR, TERM not dumb).
func newStyles(color bool) styles {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	if color {
		r.SetColorProfile(termenv.ANSI256)
	}
	return styles{
		title:      r.NewStyle().Bold(true),
		hdr:        r.NewStyle().Bold(true),
		dim:        r.NewStyle().Faint(true),
		hot:        r.NewStyle().Foreground(lipgloss.Color("9")),
		soon:       r.NewStyle().Foreground(lipgloss.Color("11")),
		plain:      r.NewStyle(),
		cursor:     r.NewStyle().Reverse(true),
		hotCursor:  r.NewStyle().Reverse(true).Foreground(lipgloss.Color("9")),
		soonCursor: r.NewStyle().Reverse(true).Foreground(lipgloss.Color("11")),
		alarm:      r.NewStyle().Bold(true).Foreground(lipgloss.Color("15")).Background(lipgloss.Color("1")),
		warn:       r.NewStyle().Bold(true).Foreground(lipgloss.Color("0")).Background(lipgloss.Color("11")),
		ok:         r.NewStyle().Foreground(lipgloss.Color("10")),
	}
}
