package top

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Contention is the holds of a group of keys (a class, a shard) and the
// waiters behind them.
type Contention struct {
	Holds int `json:"holds"`
	// Waiters queued behind these holds; Contended is how many of the
	// holds have anyone waiting, and Ratio is Contended/Holds.
	Waiters            int     `json:"waiters"`
	Contended          int     `json:"contended"`
	Ratio              float64 `json:"contention_ratio"`
	LongestHoldSeconds float64 `json:"longest_hold_seconds"`
}

// add counts hold h.
func (c *Contention) add(h *lockv1.Hold) {
	c.Holds++
	c.Waiters += int(h.GetWaiters())
	if h.GetWaiters() > 0 {
		c.Contended++
	}
	c.LongestHoldSeconds = max(c.LongestHoldSeconds, cmdutil.Seconds(h.GetAge()))
	c.Ratio = float64(c.Contended) / float64(c.Holds)
}

// contended reports whether half or more of the holds have waiters; such
// a row is shown in red.
func (c Contention) contended() bool { return c.Ratio >= 0.5 }

// before orders c ahead of o by the sort by (names break ties, as name
// sorts).
func (c Contention) before(o Contention, by, name, oname string) bool {
	switch by {
	case SortHolds:
		if c.Holds != o.Holds {
			return c.Holds > o.Holds
		}
	case SortContention:
		if c.Waiters != o.Waiters {
			return c.Waiters > o.Waiters
		}
		if c.Ratio != o.Ratio {
			return c.Ratio > o.Ratio
		}
	}
	return name < oname
}

// ClassRow is contention for one class.
type ClassRow struct {
	Namespace string `json:"namespace"`
	Class     string `json:"class"`
	Contention
	// From the lockd answering, since it started: grants, their p99
	// latency (a histogram bound: at most), and the namespace's sessions
	// that expired without release.
	Grants                 uint64  `json:"grants"`
	GrantP99Seconds        float64 `json:"grant_p99_seconds"`
	ExpiriesWithoutRelease uint64  `json:"expiries_without_release"`
	// UnprotectedGrants are the grants among Grants made without an etcd
	// quorum (token 0).
	UnprotectedGrants uint64 `json:"unprotected_grants,omitempty"`
	// Enforcement is what lockd serves the class as: fenced only while a
	// current pause test proves it. Unproven says why a class that declares
	// fenced is served as advisory (empty otherwise).
	Enforcement string `json:"enforcement,omitempty"`
	Unproven    string `json:"unproven,omitempty"`
	// From the audit history, the last hour (nil when lockd keeps none):
	// holds that ended by expiry, and the longest hold that ended.
	ExpiriesLastHour            *int64   `json:"expiries_last_hour,omitempty"`
	LongestEndedLastHourSeconds *float64 `json:"longest_ended_last_hour_seconds,omitempty"`
}

// ShardRow is contention on one etcd cluster (an entity shard, or the
// coord cluster) when lockd fronts several.
type ShardRow struct {
	Cluster string `json:"cluster"`
	Contention
	// Sealed: lockd refuses every grant of this cluster's keys until
	// operators advance its epoch.
	Sealed bool `json:"sealed,omitempty"`
}

// HotKey is one of the most contended keys.
type HotKey struct {
	Key   string `json:"key"`
	Class string `json:"class"`
	// Cluster is the etcd cluster the hold is on when lockd fronts several.
	Cluster    string  `json:"cluster,omitempty"`
	Holder     string  `json:"holder"`
	Waiters    int     `json:"waiters"`
	AgeSeconds float64 `json:"age_seconds"`
	// SessionTTLLeftSeconds is how long the holder's session had left when
	// lockd read it; nil when lockd did not say.
	SessionTTLLeftSeconds *float64 `json:"session_ttl_left_seconds,omitempty"`
}

// Snapshot is one refresh of `lockctl top`.
type Snapshot struct {
	At      time.Time  `json:"at"`
	Classes []ClassRow `json:"classes"`
	// Shards groups the same holds by the etcd cluster they are on, when
	// lockd fronts several (every cluster it fronts is listed, held or not).
	Shards    []ShardRow `json:"shards,omitempty"`
	Hot       []HotKey   `json:"hot_keys"`
	Truncated bool       `json:"truncated"`
	// Sealed: lockd refuses every grant until operators advance the epoch.
	Sealed       bool   `json:"sealed,omitempty"`
	SealedReason string `json:"sealed_reason,omitempty"`
	// SealedClusters, when lockd fronts several etcd clusters, are those
	// sealed: only their keys are refused.
	SealedClusters []SealedCluster `json:"sealed_clusters,omitempty"`
	// NoHistory: lockd keeps no audit history, so the last-hour columns
	// are empty.
	NoHistory bool `json:"no_history,omitempty"`
}

// SealedCluster is one sealed etcd cluster and why.
type SealedCluster struct {
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
}

// Sort orders.
const (
	SortContention = "contention"
	SortHolds      = "holds"
	SortName       = "name"
)

// Data is what one refresh reads from lockd.
type Data struct {
	Holds   *lockv1.ListHoldsResponse
	Stats   *lockv1.ClassStatsResponse
	Classes *lockv1.ListClassesResponse
	// Epoch is nil when lockd did not answer EpochStatus.
	Epoch *lockv1.EpochStatusResponse
	// History is the audit history's last hour per class; nil when lockd
	// keeps no history.
	History *lockv1.HistoryStatsResponse
}

// Build aggregates holds per class, keeping keys matching filter (a
// substring of key or class; empty keeps all), sorted by by, with the
// hotN most contended keys.
func Build(now time.Time, d Data, filter, by string, hotN int) *Snapshot {
	resp := d.Holds
	s := &Snapshot{At: now, Truncated: resp.GetTruncated(), Classes: []ClassRow{}, Hot: []HotKey{},
		Sealed: d.Epoch.GetSealed(), SealedReason: d.Epoch.GetSealedReason(), NoHistory: d.History == nil}
	if cs := d.Epoch.GetClusters(); len(cs) > 1 {
		for _, c := range cs {
			if c.GetSealed() {
				s.SealedClusters = append(s.SealedClusters, SealedCluster{Cluster: c.GetCluster(), Reason: c.GetSealedReason()})
			}
		}
		s.Sealed = len(s.SealedClusters) > 0
		if s.Sealed {
			s.SealedReason = s.SealedClusters[0].Reason
		}
	}
	shards := map[string]*ShardRow{}
	if cs := d.Epoch.GetClusters(); len(cs) > 1 {
		for _, c := range cs {
			shards[c.GetCluster()] = &ShardRow{Cluster: c.GetCluster(), Sealed: c.GetSealed()}
		}
	}
	rows := map[string]*ClassRow{}
	for _, st := range d.Stats.GetStats() {
		ref := st.GetNamespace() + "/" + st.GetClass()
		if filter != "" && !strings.Contains(ref, filter) {
			continue
		}
		rows[ref] = &ClassRow{Namespace: st.GetNamespace(), Class: st.GetClass(), Grants: st.GetGrants(),
			GrantP99Seconds: cmdutil.Seconds(st.GetGrantLatencyP99()), ExpiriesWithoutRelease: st.GetExpiriesWithoutRelease(),
			UnprotectedGrants: st.GetUnprotectedGrants()}
	}
	for _, c := range d.Classes.GetClasses() {
		ref := c.GetNamespace() + "/" + c.GetName()
		if rows[ref] == nil && (filter == "" || strings.Contains(ref, filter)) {
			rows[ref] = &ClassRow{Namespace: c.GetNamespace(), Class: c.GetName()}
		}
		if r := rows[ref]; r != nil {
			r.Enforcement = c.GetEnforcement()
			if c.GetDeclaredEnforcement() == "fenced" && c.GetEnforcement() != "fenced" {
				r.Unproven = c.GetFenceProof().GetMessage()
			}
		}
	}
	for _, c := range d.History.GetClasses() {
		ref := c.GetNamespace() + "/" + c.GetClass()
		r := rows[ref]
		if r == nil {
			if filter != "" && !strings.Contains(ref, filter) {
				continue
			}
			r = &ClassRow{Namespace: c.GetNamespace(), Class: c.GetClass()}
			rows[ref] = r
		}
		exp, longest := c.GetExpiries(), cmdutil.Seconds(c.GetLongestHold())
		r.ExpiriesLastHour, r.LongestEndedLastHourSeconds = &exp, &longest
	}
	for _, h := range resp.GetHolds() {
		if filter != "" && !strings.Contains(h.GetKey(), filter) && !strings.Contains(h.GetClass(), filter) {
			continue
		}
		ns, name, _ := strings.Cut(h.GetClass(), "/")
		r := rows[h.GetClass()]
		if r == nil {
			r = &ClassRow{Namespace: ns, Class: name}
			rows[h.GetClass()] = r
		}
		r.add(h)
		if c := h.GetCluster(); c != "" {
			if shards[c] == nil {
				shards[c] = &ShardRow{Cluster: c}
			}
			shards[c].add(h)
		}
		s.Hot = append(s.Hot, hotKey(h))
	}
	for _, r := range rows {
		s.Classes = append(s.Classes, *r)
	}
	sort.Slice(s.Classes, func(i, j int) bool {
		a, b := s.Classes[i], s.Classes[j]
		return a.before(b.Contention, by, a.Ref(), b.Ref())
	})
	for _, r := range shards {
		s.Shards = append(s.Shards, *r)
	}
	sort.Slice(s.Shards, func(i, j int) bool {
		a, b := s.Shards[i], s.Shards[j]
		return a.before(b.Contention, by, a.Cluster, b.Cluster)
	})
	s.Hot = hottest(s.Hot, hotN)
	return s
}

func hotKey(h *lockv1.Hold) HotKey {
	k := HotKey{Key: h.GetKey(), Class: h.GetClass(), Cluster: h.GetCluster(), Holder: h.GetHolder(), Waiters: int(h.GetWaiters()),
		AgeSeconds: cmdutil.Seconds(h.GetAge())}
	if h.GetSessionTtlLeft() != nil {
		left := cmdutil.Seconds(h.GetSessionTtlLeft())
		k.SessionTTLLeftSeconds = &left
	}
	return k
}

// hottest orders keys most waiters first, then oldest, and keeps n.
func hottest(keys []HotKey, n int) []HotKey {
	sort.SliceStable(keys, func(i, j int) bool {
		if keys[i].Waiters != keys[j].Waiters {
			return keys[i].Waiters > keys[j].Waiters
		}
		return keys[i].AgeSeconds > keys[j].AgeSeconds
	})
	if len(keys) > n {
		keys = keys[:n]
	}
	return keys
}

// ClassKeys are the n hottest keys of class ("namespace/name") matching
// filter (a substring of the key or the class; empty keeps all).
func ClassKeys(d Data, class, filter string, n int) []HotKey {
	return hotKeys(d, filter, n, func(h *lockv1.Hold) bool { return h.GetClass() == class })
}

// ShardKeys are the n hottest keys held on cluster matching filter (a
// substring of the key or its class; empty keeps all).
func ShardKeys(d Data, cluster, filter string, n int) []HotKey {
	return hotKeys(d, filter, n, func(h *lockv1.Hold) bool { return h.GetCluster() == cluster })
}

// hotKeys are the n hottest held keys in a group (in) matching filter.
func hotKeys(d Data, filter string, n int, in func(*lockv1.Hold) bool) []HotKey {
	keys := []HotKey{}
	for _, h := range d.Holds.GetHolds() {
		if in(h) && (filter == "" || strings.Contains(h.GetKey(), filter) || strings.Contains(h.GetClass(), filter)) {
			keys = append(keys, hotKey(h))
		}
	}
	return hottest(keys, n)
}

// ClassTTLs maps "namespace/name" to the class TTL, from ListClasses.
func ClassTTLs(d Data) map[string]time.Duration {
	ttl := map[string]time.Duration{}
	for _, c := range d.Classes.GetClasses() {
		ttl[c.GetNamespace()+"/"+c.GetName()] = c.GetTtl().AsDuration()
	}
	return ttl
}

// Ref is the class's "namespace/name".
func (r ClassRow) Ref() string { return r.Namespace + "/" + r.Class }

// column is one column of the class table. The TUI pads it to width,
// left- or right-aligned; the --once table sizes columns to their cells.
type column struct {
	name  string
	width int
	left  bool
}

// classColumns are the class table's columns, in the order of cells.
var classColumns = []column{
	{"NAMESPACE", 14, true}, {"CLASS", 22, true}, {"HOLDS", 6, false}, {"WAITERS", 8, false},
	{"CONTENDED", 10, false}, {"LONGEST HOLD", 13, false}, {"GRANTS", 8, false}, {"GRANT P99", 10, false},
	{"EXPIRIES", 9, false}, {"EXP 1H", 7, false}, {"LONGEST 1H", 11, false},
}

// shardColumns are the shard table's columns, in the order of cells.
var shardColumns = []column{
	{"CLUSTER", 14, true}, {"HOLDS", 6, false}, {"WAITERS", 8, false}, {"CONTENDED", 10, false},
	{"LONGEST HOLD", 13, false}, {"STATE", 7, true},
}

func columnNames(cols []column) []string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return names
}

// ratioCell is the contended share, red when contended.
func (c Contention) ratioCell() printer.Cell {
	ratio := printer.Cell{Text: fmt.Sprintf("%.0f%%", c.Ratio*100)}
	if c.contended() {
		ratio.Style = printer.Red
	}
	return ratio
}

// cells is the one rendering of a shard row, for the --once table and the
// TUI alike; longest formats the longest hold.
func (r ShardRow) cells(longest func(time.Duration) string) []printer.Cell {
	state := printer.Cell{Text: "serving"}
	if r.Sealed {
		state = printer.Cell{Text: "SEALED", Style: printer.Red}
	}
	return []printer.Cell{{Text: r.Cluster}, {Text: fmt.Sprint(r.Holds)}, {Text: fmt.Sprint(r.Waiters)}, r.ratioCell(),
		{Text: longest(cmdutil.Duration(r.LongestHoldSeconds))}, state}
}

// ByShard prints s grouped by shard: the table is its shard rows (JSON
// and YAML are the whole snapshot).
type ByShard struct{ *Snapshot }

// WriteTable implements printer.Tabular.
func (s ByShard) WriteTable(t *printer.Table) {
	t.Header(columnNames(shardColumns)...)
	for _, r := range s.Shards {
		t.RowCells(r.cells(t.Duration)...)
	}
}

// noShards says why a shard table is empty.
const noShards = "lockd fronts one etcd cluster: there are no shards to group by"

// Notes implements printer.Noter: the snapshot's, and why there are no
// shard rows when there are none.
func (s ByShard) Notes() []string {
	n := s.Snapshot.Notes()
	if len(s.Shards) == 0 {
		n = append([]string{noShards}, n...)
	}
	return n
}

// cells is the one rendering of a class row, for the --once table and the
// TUI alike; longest formats the longest hold.
func (r ClassRow) cells(longest func(time.Duration) string) []printer.Cell {
	return []printer.Cell{{Text: r.Namespace}, {Text: r.Class}, {Text: fmt.Sprint(r.Holds)}, {Text: fmt.Sprint(r.Waiters)}, r.ratioCell(),
		{Text: longest(cmdutil.Duration(r.LongestHoldSeconds))}, {Text: fmt.Sprint(r.Grants)},
		{Text: cmdutil.Duration(r.GrantP99Seconds).String()}, {Text: fmt.Sprint(r.ExpiriesWithoutRelease)},
		{Text: lastHourCount(r.ExpiriesLastHour)}, {Text: lastHourDuration(r.LongestEndedLastHourSeconds, longest)}}
}

// lastHourCount and lastHourDuration show a history column: "-" when the
// class has none or lockd keeps no history.
func lastHourCount(n *int64) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(*n)
}

func lastHourDuration(s *float64, format func(time.Duration) string) string {
	if s == nil || *s == 0 {
		return "-"
	}
	return format(cmdutil.Duration(*s))
}

// age is how long the key has been held, to the second.
func (h HotKey) age() time.Duration { return cmdutil.Duration(h.AgeSeconds).Round(time.Second) }

// WriteTable implements printer.Tabular: the classes; the hot keys are notes.
func (s *Snapshot) WriteTable(t *printer.Table) {
	t.Header(columnNames(classColumns)...)
	for _, r := range s.Classes {
		t.RowCells(r.cells(t.Duration)...)
	}
	t.Empty("no holds")
}

// unprotected says which classes this lockd granted without an etcd quorum
// since it started ("" when none).
func (s *Snapshot) unprotected() string {
	var parts []string
	for _, r := range s.Classes {
		if r.UnprotectedGrants > 0 {
			parts = append(parts, fmt.Sprintf("%d of %s/%s", r.UnprotectedGrants, r.Namespace, r.Class))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "unprotected grants (token 0, made without an etcd quorum) since this lockd started: " + strings.Join(parts, ", ") +
		"; lockctl unprotected --since <outage start> lists them"
}

// unproven says which classes declare fenced and are served as advisory.
func (s *Snapshot) unproven() []string {
	var out []string
	for _, r := range s.Classes {
		if r.Unproven != "" {
			out = append(out, fmt.Sprintf("%s/%s declares fenced and is served as advisory: %s", r.Namespace, r.Class, r.Unproven))
		}
	}
	return out
}

// Notes implements printer.Noter.
func (s *Snapshot) Notes() []string {
	var n []string
	switch {
	case len(s.SealedClusters) > 0:
		for _, c := range s.SealedClusters {
			n = append(n, "cluster "+c.Cluster+" is sealed, every grant of its keys is refused until operators advance its epoch: "+c.Reason)
		}
	case s.Sealed:
		n = append(n, "lockd is sealed, every grant is refused until operators advance the epoch: "+s.SealedReason)
	}
	if u := s.unprotected(); u != "" {
		n = append(n, u)
	}
	n = append(n, s.unproven()...)
	if s.Truncated {
		n = append(n, "only the first holds were listed: narrow it with --prefix")
	}
	if s.NoHistory {
		n = append(n, "EXP 1H and LONGEST 1H come from the audit history, which this lockd does not keep (--audit)")
	}
	for _, h := range s.Hot {
		if h.Waiters > 0 {
			where := h.Class
			if h.Cluster != "" {
				where += ", on " + h.Cluster
			}
			n = append(n, fmt.Sprintf("hot: %s (%s) held by %s for %s, %d waiting", h.Key, where, h.Holder, h.age(), h.Waiters))
		}
	}
	return n
}
