package history

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Kinds of history rows this view reads beyond holds' starts and ends.
const (
	KindUnprotected = "unprotected-grant" // an unprotected grant
	KindMove        = "shard-move"        // a step of a shard plan moving a range
)

// How a hold ended (HoldView.Ended).
const (
	EndReleased      = "released"
	EndHandedOff     = "handed-off"
	EndExpired       = "expired"
	EndSessionClosed = "session-closed"
	EndForced        = "forced"
	EndEpochAdvance  = "epoch-advance"
)

// TokenView is a fencing token (cmdutil.TokenView).
type TokenView = cmdutil.TokenView

// HoldView is one hold as the history recorded it.
type HoldView struct {
	Key       string     `json:"key"`
	Holder    string     `json:"holder"`
	SessionID int64      `json:"session_id,string"`
	Class     string     `json:"class"`
	Token     *TokenView `json:"token,omitempty"`
	// Start is when it was granted (the granting lockd's clock); End when
	// the tailer read its end. No End: still held as far as the history goes.
	Start *time.Time `json:"start,omitempty"`
	End   *time.Time `json:"end,omitempty"`
	// Ended is how it ended: released, handed-off, expired, session-closed,
	// forced or epoch-advance.
	Ended string `json:"ended,omitempty"`
	// ForcedBy are the requester and the approver of a force-release;
	// Reason is theirs.
	ForcedBy        []string `json:"forced_by,omitempty"`
	Reason          string   `json:"reason,omitempty"`
	DurationSeconds *float64 `json:"duration_seconds,omitempty"`
	StartRevision   int64    `json:"start_revision,omitempty"`
	EndRevision     int64    `json:"end_revision,omitempty"`
	// Unprotected marks a grant lockd made without an etcd quorum (a class
	// with onQuorumLoss: open), with token 0: another holder may have held
	// the key at the same time. Arbiter and SpoolSeq name it; StartRevision
	// is where it was shipped to etcd when quorum returned, not when it was
	// granted. Its end is not recorded.
	Unprotected bool   `json:"unprotected,omitempty"`
	Arbiter     string `json:"arbiter_id,omitempty"`
	SpoolSeq    uint64 `json:"spool_seq,omitempty"`
}

// GapView is revisions the history does not have.
type GapView struct {
	From       int64     `json:"from_revision"`
	To         int64     `json:"to_revision"`
	Reason     string    `json:"reason"`
	DetectedAt time.Time `json:"detected_at"`
}

// AdvanceView is an epoch advance.
type AdvanceView struct {
	From     uint32    `json:"from_epoch"`
	To       uint32    `json:"to_epoch"`
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
}

// MoveView is a step of a shard plan moving a range the target is in (or
// a range under the target prefix): Range is the range, Reason says the
// plan, the step and the shards.
type MoveView struct {
	Range     string    `json:"range"`
	Revision  int64     `json:"revision"`
	At        time.Time `json:"at"`
	Requester string    `json:"requester"`
	Approver  string    `json:"approver"`
	Reason    string    `json:"reason"`
}

// View is `lockctl history`.
type View struct {
	Target    string        `json:"target"`
	Holds     []HoldView    `json:"holds"`
	Moves     []MoveView    `json:"shard_moves,omitempty"`
	Advances  []AdvanceView `json:"epoch_advances,omitempty"`
	Gaps      []GapView     `json:"gaps,omitempty"`
	Truncated bool          `json:"truncated"`
	prefix    bool
}

func timePtr(ts interface{ AsTime() time.Time }, ok bool) *time.Time {
	if !ok {
		return nil
	}
	t := ts.AsTime()
	return &t
}

var endOf = map[string]string{
	"release": EndReleased, "handoff": EndHandedOff, "expiry": EndExpired, "session-close": EndSessionClosed,
	"force-release": EndForced, "epoch-advance": EndEpochAdvance,
}

// NewView pairs the rows of a HistoryResponse into holds: a grant (or the
// new side of a handoff) opens a hold, the next end row of its key closes
// it. A hold granted before the history's window is built from its end row.
func NewView(target string, r *lockv1.HistoryResponse, prefix bool) *View {
	v := &View{Target: target, Holds: []HoldView{}, Truncated: r.GetTruncated(), prefix: prefix}
	open := map[string]int{} // key -> index of its open hold
	for _, e := range r.GetEvents() {
		switch e.GetKind() {
		case "gap":
			v.Gaps = append(v.Gaps, GapView{From: e.GetGapFrom(), To: e.GetGapTo(), Reason: e.GetReason(), DetectedAt: cmdutil.Time(e.GetObservedAt())})
			continue
		case KindMove:
			v.Moves = append(v.Moves, MoveView{Range: e.GetKey(), Revision: e.GetRevision(), At: cmdutil.Time(e.GetObservedAt()),
				Requester: e.GetRequester(), Approver: e.GetApprover(), Reason: e.GetReason()})
			continue
		case "epoch-advance":
			if e.GetHolder() == "" && e.GetEndedHolder() == "" {
				v.Advances = append(v.Advances, AdvanceView{From: e.GetFromEpoch(), To: e.GetToEpoch(), Revision: e.GetRevision(), At: cmdutil.Time(e.GetObservedAt())})
				continue
			}
		}
		if how, ends := endOf[e.GetKind()]; ends {
			i, ok := open[e.GetKey()]
			if !ok || v.Holds[i].SessionID != e.GetEndedSessionId() {
				v.Holds = append(v.Holds, HoldView{Key: e.GetKey(), Holder: e.GetEndedHolder(), SessionID: e.GetEndedSessionId(),
					Class: e.GetClass(), Token: cmdutil.NewTokenView(e.GetEndedToken()), Start: timePtr(e.GetEndedAcquiredAt(), e.GetEndedAcquiredAt() != nil)})
				i = len(v.Holds) - 1
			}
			h := &v.Holds[i]
			h.End, h.Ended, h.EndRevision = timePtr(e.GetObservedAt(), e.GetObservedAt() != nil), how, e.GetRevision()
			if how == EndForced {
				h.ForcedBy, h.Reason = []string{e.GetRequester(), e.GetApprover()}, e.GetReason()
			}
			if d := e.GetDuration(); d != nil {
				s := cmdutil.Seconds(d)
				h.DurationSeconds = &s
			}
			delete(open, e.GetKey())
		}
		if e.GetKind() == KindUnprotected {
			// Not open: no end row of its key is its end.
			v.Holds = append(v.Holds, HoldView{Key: e.GetKey(), Holder: e.GetHolder(), SessionID: e.GetSessionId(), Class: e.GetClass(),
				Start: timePtr(e.GetAcquiredAt(), e.GetAcquiredAt() != nil), StartRevision: e.GetRevision(),
				Unprotected: true, Arbiter: e.GetArbiterId(), SpoolSeq: e.GetSpoolSeq()})
			continue
		}
		if e.GetKind() == "grant" || e.GetKind() == "handoff" {
			v.Holds = append(v.Holds, HoldView{Key: e.GetKey(), Holder: e.GetHolder(), SessionID: e.GetSessionId(), Class: e.GetClass(),
				Token: cmdutil.NewTokenView(e.GetToken()), Start: timePtr(e.GetAcquiredAt(), e.GetAcquiredAt() != nil), StartRevision: e.GetRevision()})
			open[e.GetKey()] = len(v.Holds) - 1
		}
	}
	return v
}

// how is a hold's end for the table.
func (h *HoldView) how() string {
	switch h.Ended {
	case "":
		if h.Unprotected {
			return "unprotected"
		}
		return "held"
	case EndHandedOff:
		return "handed off"
	case EndSessionClosed:
		return "session closed"
	case EndEpochAdvance:
		return "epoch advance"
	}
	return h.Ended
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	tokens := false
	for _, h := range v.Holds {
		tokens = tokens || h.Token != nil
	}
	var header []string
	if v.prefix {
		header = append(header, "KEY")
	}
	header = append(header, "HOLDER", "SESSION", "START", "END", "HOW", "HELD FOR")
	if tokens {
		header = append(header, "TOKEN")
	}
	t.Header(header...)
	at := func(p *time.Time) string {
		if p == nil {
			return "-"
		}
		return t.Time(*p)
	}
	for _, h := range v.Holds {
		var row []string
		if v.prefix {
			row = append(row, h.Key)
		}
		held := "-"
		if h.DurationSeconds != nil {
			held = t.Duration(cmdutil.Duration(*h.DurationSeconds))
		}
		row = append(row, h.Holder, strconv.FormatInt(h.SessionID, 10), at(h.Start), at(h.End), h.how(), held)
		if tokens {
			tok := ""
			if h.Token != nil {
				tok = strconv.FormatUint(h.Token.Value, 10)
			}
			row = append(row, tok)
		}
		t.Row(row...)
	}
	t.Empty("no history for " + v.Target + " in this window")
}

// Notes implements printer.Noter: epoch advances, gaps and truncation.
func (v *View) Notes() []string {
	var notes []string
	for _, h := range v.Holds {
		if h.Ended == EndForced {
			notes = append(notes, fmt.Sprintf("%s forced at revision %d: requested by %s, approved by %s: %q",
				h.Key, h.EndRevision, strings.Join(h.ForcedBy[:1], ""), strings.Join(h.ForcedBy[1:], ""), h.Reason))
		}
	}
	for _, h := range v.Holds {
		if h.Unprotected {
			notes = append(notes, fmt.Sprintf("%s: UNPROTECTED grant to %s by arbiter %s (spool #%d) without an etcd quorum, token 0, shipped at revision %d: "+
				"another holder may have held it at the same time; its end is not recorded", h.Key, h.Holder, h.Arbiter, h.SpoolSeq, h.StartRevision))
		}
	}
	for _, m := range v.Moves {
		notes = append(notes, fmt.Sprintf("shard move at revision %d (%s): %s; by %s, approved by %s",
			m.Revision, m.At.UTC().Format(time.RFC3339), m.Reason, m.Requester, m.Approver))
	}
	for _, a := range v.Advances {
		notes = append(notes, fmt.Sprintf("epoch advanced %d -> %d at revision %d (%s): every hold then ended", a.From, a.To, a.Revision, a.At.UTC().Format(time.RFC3339)))
	}
	for _, g := range v.Gaps {
		notes = append(notes, fmt.Sprintf("GAP: revisions %d-%d are not in the history (%s)", g.From, g.To, g.Reason))
	}
	if v.Truncated {
		notes = append(notes, "only the first rows are shown: narrow --since/--until or raise --limit")
	}
	return notes
}
