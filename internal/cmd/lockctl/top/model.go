package top

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// model is the contention view: a class table, the hottest keys on
// demand, refreshed every interval. A failed refresh shows its error over
// the last good snapshot and is retried at the next tick.
type model struct {
	fetch    fetcher
	now      func() time.Time
	interval time.Duration
	filter   string
	sortBy   string
	hot      bool // drill-down to the hottest keys
	snap     *Snapshot
	err      error
	width    int
}

type fetchedMsg struct {
	snapResp *Snapshot
	err      error
}

type tickMsg struct{}

func newModel(f fetcher, now func() time.Time, interval time.Duration, filter, sortBy string) model {
	return model{fetch: f, now: now, interval: interval, filter: filter, sortBy: sortBy, width: 100}
}

func (m model) refresh() tea.Cmd {
	f, now, filter, by := m.fetch, m.now, m.filter, m.sortBy
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := f(ctx)
		if err != nil {
			return fetchedMsg{err: err}
		}
		return fetchedMsg{snapResp: Build(now(), d, filter, by, 10)}
	}
}

func (m model) tick() tea.Cmd {
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
}

// Init implements tea.Model.
func (m model) Init() tea.Cmd { return m.refresh() }

// Update implements tea.Model.
func (m model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		case "s":
			m.sortBy = map[string]string{SortContention: SortHolds, SortHolds: SortName, SortName: SortContention}[m.sortBy]
			return m, m.refresh()
		case "enter", "h":
			m.hot = !m.hot
		case "r":
			return m, m.refresh()
		}
	case fetchedMsg:
		if msg.err != nil {
			m.err = msg.err
		} else {
			m.err, m.snap = nil, msg.snapResp
		}
		return m, m.tick()
	case tickMsg:
		return m, m.refresh()
	}
	return m, nil
}

var (
	title = lipgloss.NewStyle().Bold(true)
	hdr   = lipgloss.NewStyle().Bold(true).Underline(true)
	bad   = lipgloss.NewStyle().Foreground(lipgloss.Color("9"))
	dim   = lipgloss.NewStyle().Faint(true)
)

// View implements tea.Model.
func (m model) View() string {
	var b strings.Builder
	at := "-"
	if m.snap != nil {
		at = m.snap.At.UTC().Format("15:04:05")
	}
	filter := ""
	if m.filter != "" {
		filter = "  filter: " + m.filter
	}
	b.WriteString(title.Render("lockctl top") + fmt.Sprintf("  every %s  sort: %s%s  at %s\n", m.interval, m.sortBy, filter, at))
	if m.err != nil {
		b.WriteString(bad.Render("refresh failed, retrying: "+m.err.Error()) + "\n")
	}
	b.WriteString(hdr.Render(padded(columnNames())) + "\n")
	if m.snap == nil || len(m.snap.Classes) == 0 {
		b.WriteString(dim.Render("no holds") + "\n")
	} else {
		for _, r := range m.snap.Classes {
			cells := r.cells(func(d time.Duration) string { return d.Round(time.Second).String() })
			texts := make([]string, len(cells))
			for i, c := range cells {
				texts[i] = c.Text
			}
			line := padded(texts)
			if r.contended() {
				line = bad.Render(line)
			}
			b.WriteString(line + "\n")
		}
	}
	if m.hot && m.snap != nil {
		b.WriteString("\n" + hdr.Render(fmt.Sprintf("%-32s %-22s %8s %8s  %s", "HOT KEY", "CLASS", "WAITERS", "AGE", "HOLDER")) + "\n")
		for _, h := range m.snap.Hot {
			b.WriteString(fmt.Sprintf("%-32s %-22s %8d %8s  %s\n", h.Key, h.Class, h.Waiters, h.age(), h.Holder))
		}
	}
	b.WriteString(dim.Render("\nq quit · s sort · enter hot keys · r refresh") + "\n")
	return b.String()
}

// padded lays texts out in classColumns' widths, one space apart.
func padded(texts []string) string {
	parts := make([]string, len(texts))
	for i, t := range texts {
		c := classColumns[i]
		if c.left {
			parts[i] = fmt.Sprintf("%-*s", c.width, t)
		} else {
			parts[i] = fmt.Sprintf("%*s", c.width, t)
		}
	}
	return strings.Join(parts, " ")
}
