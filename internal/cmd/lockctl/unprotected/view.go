package unprotected

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// GrantView is one unprotected grant.
type GrantView struct {
	// AcquiredAt is when it was granted, by the granting lockd's clock
	// (absent if its record had no time).
	AcquiredAt *time.Time `json:"acquired_at,omitempty"`
	Key        string     `json:"key"`
	Class      string     `json:"class"`
	Holder     string     `json:"holder"`
	SessionID  int64      `json:"session_id,string"`
	// Arbiter is the lockd that granted it and SpoolSeq the grant's number
	// in its spool.
	Arbiter  string `json:"arbiter_id"`
	SpoolSeq uint64 `json:"spool_seq"`
	// ShippedRevision is the etcd revision the grant was shipped at, after
	// quorum returned, in the cluster ClusterID (hex) and epoch; ShippedAt
	// when the audit tailer read it.
	ShippedRevision int64     `json:"shipped_revision"`
	ShippedAt       time.Time `json:"shipped_at"`
	ClusterID       string    `json:"cluster_id"`
	Epoch           uint32    `json:"epoch"`
}

// GapView is revisions the history does not have.
type GapView struct {
	From       int64     `json:"from_revision"`
	To         int64     `json:"to_revision"`
	Reason     string    `json:"reason"`
	DetectedAt time.Time `json:"detected_at"`
}

// View is `lockctl unprotected`.
type View struct {
	// Since and Until are the window of the grants' times.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Namespaces are the namespaces read.
	Namespaces []string    `json:"namespaces"`
	Grants     []GrantView `json:"grants"`
	Gaps       []GapView   `json:"gaps,omitempty"`
	// Denied are namespaces with history the caller may not list: their
	// grants are not in Grants.
	Denied []string `json:"denied_namespaces,omitempty"`
}

// NewView keeps the unprotected grants among rows made in [since, until),
// oldest first, and the gaps. A grant whose record had no time is kept (it
// was shipped in the window read), listed last.
func NewView(since, until time.Time, namespaces, denied []string, rows []*lockv1.HistoryEvent) *View {
	v := &View{Since: since.UTC(), Until: until.UTC(), Namespaces: append([]string{}, namespaces...), Grants: []GrantView{}, Denied: denied}
	gaps := map[[2]int64]bool{}
	for _, e := range rows {
		switch e.GetKind() {
		case "gap":
			if id := [2]int64{e.GetGapFrom(), e.GetGapTo()}; !gaps[id] {
				gaps[id] = true
				v.Gaps = append(v.Gaps, GapView{From: e.GetGapFrom(), To: e.GetGapTo(), Reason: e.GetReason(), DetectedAt: cmdutil.Time(e.GetObservedAt())})
			}
			continue
		case Kind:
		default:
			continue
		}
		at := cmdutil.TimePtr(e.GetAcquiredAt())
		if at != nil && (at.Before(v.Since) || !at.Before(v.Until)) {
			continue
		}
		v.Grants = append(v.Grants, GrantView{AcquiredAt: at, Key: e.GetKey(), Class: e.GetClass(), Holder: e.GetHolder(), SessionID: e.GetSessionId(),
			Arbiter: e.GetArbiterId(), SpoolSeq: e.GetSpoolSeq(), ShippedRevision: e.GetRevision(), ShippedAt: cmdutil.Time(e.GetObservedAt()),
			ClusterID: strconv.FormatUint(e.GetClusterId(), 16), Epoch: e.GetEpoch()})
	}
	sort.SliceStable(v.Grants, func(i, j int) bool {
		a, b := v.Grants[i], v.Grants[j]
		switch {
		case (a.AcquiredAt == nil) != (b.AcquiredAt == nil):
			return b.AcquiredAt == nil
		case a.AcquiredAt != nil && !a.AcquiredAt.Equal(*b.AcquiredAt):
			return a.AcquiredAt.Before(*b.AcquiredAt)
		case a.Arbiter != b.Arbiter:
			return a.Arbiter < b.Arbiter
		}
		return a.SpoolSeq < b.SpoolSeq
	})
	sort.Slice(v.Gaps, func(i, j int) bool { return v.Gaps[i].From < v.Gaps[j].From })
	return v
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	t.Header("ACQUIRED", "KEY", "CLASS", "HOLDER", "SESSION", "ARBITER", "SEQ", "SHIPPED")
	for _, g := range v.Grants {
		acquired := t.Time(time.Time{})
		if g.AcquiredAt != nil {
			acquired = t.Time(*g.AcquiredAt)
		}
		t.Row(acquired, g.Key, g.Class, g.Holder, strconv.FormatInt(g.SessionID, 10), g.Arbiter,
			strconv.FormatUint(g.SpoolSeq, 10), strconv.FormatInt(g.ShippedRevision, 10))
	}
	t.Empty(fmt.Sprintf("no unprotected grants between %s and %s", v.Since.Format(time.RFC3339), v.Until.Format(time.RFC3339)))
}

// Notes implements printer.Noter: what the grants mean, gaps and the
// namespaces left out.
func (v *View) Notes() []string {
	var notes []string
	if n := len(v.Grants); n > 0 {
		notes = append(notes, fmt.Sprintf("%d unprotected grant(s) between %s and %s: made without an etcd quorum, with token 0; "+
			"another holder may have held the same key at the same time", n, v.Since.Format(time.RFC3339), v.Until.Format(time.RFC3339)))
	}
	for _, g := range v.Gaps {
		notes = append(notes, fmt.Sprintf("GAP: revisions %d-%d are not in the history (%s): grants shipped in them are not listed", g.From, g.To, g.Reason))
	}
	if len(v.Denied) > 0 {
		notes = append(notes, fmt.Sprintf("not listed: namespaces you may not read: %s", strings.Join(v.Denied, ", ")))
	}
	return notes
}
