package top

import (
	"errors"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// Update implements tea.Model.
func (m model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyMsg:
		return m.onKey(msg)
	case fetchedMsg:
		m.err = msg.err
		if msg.err == nil {
			m.data, m.at = msg.data, msg.at
			m.hist.add(msg.at, Build(msg.at, msg.data, "", SortName, 0).Classes)
			m.rebuild()
		}
		if !msg.next {
			return m, nil
		}
		return m, m.tick()
	case inspectedMsg:
		if msg.key == m.key {
			m.inspectErr = msg.err
			if msg.err == nil {
				m.inspect, m.inspectedAt, m.clock = msg.resp, msg.at, msg.at
			}
		}
	case requestedMsg:
		m.pending = false
		if msg.err != nil {
			m.actErr, m.notice = msg.err, ""
		} else {
			m.actErr = nil
			m.notice = "force-release of " + msg.key + " requested: id " + msg.fr.GetId() +
				".\nA second operator must approve it: lockctl force-release approve " + msg.fr.GetId()
		}
	case tickMsg:
		if m.screen == screenKey {
			return m, tea.Batch(m.refresh(true), m.inspectKey())
		}
		return m, m.refresh(true)
	case clockMsg:
		m.clock = time.Time(msg)
		return m, m.second()
	}
	return m, nil
}

// onKey handles a key: first the text being typed (a reason, a filter),
// then the help overlay, then the view's keys.
func (m model) onKey(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if k.Type == tea.KeyCtrlC {
		return m, tea.Quit
	}
	if k.Type == tea.KeyRunes && len(k.Runes) > 1 && !k.Paste {
		// Keys typed faster than the terminal is read arrive together:
		// each is still a key.
		var cmds []tea.Cmd
		var next tea.Model = m
		for _, r := range k.Runes {
			var cmd tea.Cmd
			next, cmd = next.(model).onKey(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
			cmds = append(cmds, cmd)
		}
		return next, tea.Batch(cmds...)
	}
	switch {
	case m.asking:
		return m.onReasonKey(k)
	case m.typing:
		return m.onFilterKey(k), nil
	case m.help:
		switch k.String() {
		case "q":
			return m, tea.Quit
		case "?", "esc", "enter":
			m.help = false
		}
		return m, nil
	}
	switch k.String() {
	case "q":
		return m, tea.Quit
	case "?":
		m.help = true
	case "/":
		m.typing = true
	case "up", "k":
		m.move(-1)
	case "down", "j":
		m.move(1)
	case "home", "g":
		m.move(-1 << 20)
	case "end", "G":
		m.move(1 << 20)
	case "s":
		m.sortBy = map[string]string{SortContention: SortHolds, SortHolds: SortName, SortName: SortContention}[m.sortBy]
		m.rebuild()
	case "tab":
		if m.screen == screenClasses {
			m.byShard = !m.byShard
		}
	case "r":
		if m.screen == screenKey {
			return m, tea.Batch(m.refresh(false), m.inspectKey())
		}
		return m, m.refresh(false)
	case "enter", "right", "l":
		return m.open()
	case "esc", "backspace", "left", "h":
		m.back()
	case "f":
		if m.screen == screenKey && !m.pending {
			m.asking, m.reason, m.notice, m.actErr = true, "", "", nil
		}
	}
	return m, nil
}

func (m *model) move(d int) {
	switch m.screen {
	case screenClasses:
		switch {
		case m.snap == nil:
		case m.byShard:
			m.shardCur = clamp(m.shardCur+d, len(m.snap.Shards))
		default:
			m.classCur = clamp(m.classCur+d, len(m.snap.Classes))
		}
	case screenKeys:
		m.keyCur = clamp(m.keyCur+d, len(m.keys()))
	}
}

// open drills down: a class (or shard) to its keys, a key to its detail.
func (m model) open() (tea.Model, tea.Cmd) {
	switch m.screen {
	case screenClasses:
		switch {
		case m.snap == nil:
			return m, nil
		case m.byShard && len(m.snap.Shards) > 0:
			m.shard, m.keyCur, m.screen = m.snap.Shards[m.shardCur].Cluster, 0, screenKeys
		case !m.byShard && len(m.snap.Classes) > 0:
			m.class, m.keyCur, m.screen = m.snap.Classes[m.classCur].Ref(), 0, screenKeys
		}
	case screenKeys:
		keys := m.keys()
		if len(keys) == 0 {
			return m, nil
		}
		m.key, m.screen = keys[m.keyCur].Key, screenKey
		m.inspect, m.inspectErr, m.notice, m.actErr = nil, nil, "", nil
		return m, m.inspectKey()
	}
	return m, nil
}

// back goes up a level; on the class table it clears the filter.
func (m *model) back() {
	switch m.screen {
	case screenKey:
		m.screen, m.key, m.inspect, m.notice, m.actErr = screenKeys, "", nil, "", nil
	case screenKeys:
		m.screen, m.class, m.shard = screenClasses, "", ""
	default:
		m.filter = ""
		m.rebuild()
	}
}

// onFilterKey edits the filter as it is typed: enter keeps it, esc clears
// it.
func (m model) onFilterKey(k tea.KeyMsg) model {
	switch k.Type {
	case tea.KeyEsc:
		m.typing, m.filter = false, ""
	case tea.KeyEnter:
		m.typing = false
	case tea.KeyBackspace:
		m.filter = dropLast(m.filter)
	case tea.KeySpace:
		m.filter += " "
	case tea.KeyRunes:
		m.filter += string(k.Runes)
	}
	m.rebuild()
	return m
}

// onReasonKey edits the force-release reason: enter sends the request,
// esc cancels it.
func (m model) onReasonKey(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	switch k.Type {
	case tea.KeyEsc:
		m.asking, m.reason = false, ""
	case tea.KeyEnter:
		if strings.TrimSpace(m.reason) == "" {
			m.actErr = errors.New("a reason is required: say why, it is recorded with the request")
			return m, nil
		}
		m.asking, m.pending, m.actErr = false, true, nil
		return m, m.requestForceRelease()
	case tea.KeyBackspace:
		m.reason = dropLast(m.reason)
	case tea.KeySpace:
		m.reason += " "
	case tea.KeyRunes:
		m.reason += string(k.Runes)
	}
	return m, nil
}

func dropLast(s string) string {
	r := []rune(s)
	if len(r) == 0 {
		return s
	}
	return string(r[:len(r)-1])
}
