package top

import (
	"context"
	"regexp"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// screen is which of the console's three views is shown.
type screen int

const (
	screenClasses screen = iota // every class
	screenKeys                  // one class's hottest keys
	screenKey                   // one key: holder, session, waiters
)

// keysShown is how many of a class's hottest keys the console lists.
const keysShown = 20

// model is the console: a class table, a class's hottest keys, one key's
// detail, refreshed every interval. A failed refresh shows its error in the
// banner over the last good data and is retried at the next tick.
type model struct {
	src      Source
	now      func() time.Time
	interval time.Duration
	st       styles
	secrets  []string // never shown: scrubbed from every error

	// The last good refresh, and what it built.
	data Data
	at   time.Time
	snap *Snapshot
	hist history
	err  error // the last refresh's error, nil when it worked

	screen   screen
	sortBy   string
	filter   string
	typing   bool // the filter is being typed
	help     bool
	classCur int
	keyCur   int
	class    string // the class opened ("namespace/name")
	key      string // the key opened
	// byShard: the main table groups holds by the etcd cluster they are
	// on (tab switches); shard is the one opened.
	byShard  bool
	shardCur int
	shard    string

	inspect     *lockv1.InspectResponse
	inspectedAt time.Time
	inspectErr  error
	clock       time.Time // the local clock, ticking every second

	asking  bool   // a force-release reason is being typed
	reason  string // the reason so far
	notice  string // the outcome of the last action
	actErr  error  // the last action's error
	width   int
	height  int
	pending bool // a force-release request is in flight
}

type fetchedMsg struct {
	at   time.Time
	data Data
	err  error
	next bool // schedule the next refresh: only the tick chain does
}

type inspectedMsg struct {
	key  string
	at   time.Time
	resp *lockv1.InspectResponse
	err  error
}

type requestedMsg struct {
	key string
	fr  *lockv1.ForceRelease
	err error
}

type tickMsg struct{}

// clockMsg is the local clock's second: the session TTL counts down on it.
type clockMsg time.Time

// newModel returns the console over src, its clock and refresh interval,
// starting with filter and sortBy; st are its colours.
func newModel(src Source, now func() time.Time, interval time.Duration, filter, sortBy string, st styles) model {
	return model{src: src, now: now, interval: interval, filter: filter, sortBy: sortBy, st: st,
		hist: history{}, width: 100, clock: now()}
}

// refresh fetches from lockd; next is set on the tick chain's own
// refreshes, so an extra one (r) does not start a second chain.
func (m model) refresh(next bool) tea.Cmd {
	src, now := m.src, m.now
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := src.Fetch(ctx)
		return fetchedMsg{at: now(), data: d, err: err, next: next}
	}
}

func (m model) inspectKey() tea.Cmd {
	src, now, key := m.src, m.now, m.key
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := src.Inspect(ctx, key)
		return inspectedMsg{key: key, at: now(), resp: resp, err: err}
	}
}

func (m model) requestForceRelease() tea.Cmd {
	src, key, reason := m.src, m.key, strings.TrimSpace(m.reason)
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fr, err := src.RequestForceRelease(ctx, key, reason)
		return requestedMsg{key: key, fr: fr, err: err}
	}
}

func (m model) tick() tea.Cmd {
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
}

func (m model) second() tea.Cmd {
	now := m.now
	return tea.Tick(time.Second, func(time.Time) tea.Msg { return clockMsg(now()) })
}

// Init implements tea.Model.
func (m model) Init() tea.Cmd { return tea.Batch(m.refresh(true), m.second()) }

// rebuild recomputes the snapshot from the last data with the current
// filter and sort, keeping the cursors on the table.
func (m *model) rebuild() {
	if m.data.Holds == nil && m.data.Stats == nil {
		return
	}
	m.snap = Build(m.at, m.data, m.filter, m.sortBy, keysShown)
	m.classCur = clamp(m.classCur, len(m.snap.Classes))
	m.shardCur = clamp(m.shardCur, len(m.snap.Shards))
	m.keyCur = clamp(m.keyCur, len(m.keys()))
}

// keys are the opened class's or shard's hottest keys.
func (m model) keys() []HotKey {
	if m.byShard {
		return ShardKeys(m.data, m.shard, m.filter, keysShown)
	}
	return ClassKeys(m.data, m.class, m.filter, keysShown)
}

func clamp(i, n int) int { return max(0, min(i, n-1)) }

var bearerRE = regexp.MustCompile(`(?i)bearer\s+\S+`)

// scrub is err's text with every secret (the operator token) and any
// bearer credential blanked: a token is never shown.
func (m model) scrub(err error) string {
	s := err.Error()
	for _, sec := range m.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return bearerRE.ReplaceAllString(s, "Bearer [redacted]")
}
