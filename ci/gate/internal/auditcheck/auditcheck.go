// Package auditcheck is the release gate's audit check: after a run, the
// history the audit tailer wrote must hold every grant a worker observed
// (same token), every release a worker made and every force-release the
// gate made, ended the right way, with no token granted twice and no gap.
// When a force-release revoked the holder's session, the other holds the
// revoke ended are forced too, and recorded so, never as expired.
package auditcheck

import (
	"fmt"
	"slices"
	"sort"

	"github.com/lockd-dev/lockd/ci/gate/internal/check"
	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/internal/audit"
)

// Result is the check's outcome.
type Result struct {
	Rows   int            `json:"rows"`
	ByKind map[string]int `json:"byKind"`
	// Grants, Releases and Forces are the observed operations checked;
	// Unprotected the unprotected grants (made without quorum).
	Grants      int `json:"grants"`
	Unprotected int `json:"unprotected"`
	Releases    int `json:"releases"`
	Forces      int `json:"forces"`
	// Revokes are the force-releases that revoked the holder's session;
	// RevokedHolds the other holds of those sessions the revoke ended,
	// each checked to be recorded as a force-release with the operators.
	Revokes      int `json:"revokes"`
	RevokedHolds int `json:"revokedHolds"`
	// RolledBack are observed grants or releases missing from the history
	// inside a restore's or a rebuild's window: the store itself lost them
	// (rolled back to the snapshot, or wiped) before the tailer read them.
	RolledBack int `json:"rolledBack"`
	// AdvancesLost are epoch advances (of a restore or a rebuild) missing
	// from the history because a later restore or rebuild destroyed that
	// store life before any tailer caught up with it.
	AdvancesLost int `json:"advancesLost,omitempty"`
	// Problems are the violations, one line each; Passed is len == 0.
	Problems []string `json:"problems,omitempty"`
}

// Passed reports whether the history is complete and consistent.
func (r Result) Passed() bool { return len(r.Problems) == 0 }

// lossWindow is how long before a restore or a rebuild an observed change
// may be lost with the store: the gate waits for the history to catch up
// first, and the tailer normally reads within a second of a change.
const lossWindow int64 = 5e9

// Run checks rows against the operations the workers and the gate recorded.
// clusterOf names the etcd cluster serving a key (nil: one serves them
// all): a restore or a rebuild of one cluster loses only its keys' rows.
func Run(ops []history.Op, rows []audit.Event, faults []history.Fault, clusterOf check.ClusterOf) Result {
	res := Result{Rows: len(rows), ByKind: map[string]int{}}
	// Holds are named by key and token: keys granted in one batch share a
	// token.
	started := map[check.HoldID][]audit.Event{} // rows that started the hold
	ended := map[check.HoldID][]audit.Event{}   // rows that ended it
	type spooled struct {
		arbiter string
		seq     uint64
	}
	unprotected := map[spooled]audit.Event{}
	bySession := map[int64][]audit.Event{} // session -> rows that ended its holds
	for _, r := range rows {
		if r.EndedSession != 0 {
			bySession[r.EndedSession] = append(bySession[r.EndedSession], r)
		}
		res.ByKind[string(r.Kind)]++
		switch r.Kind {
		case audit.KindUnprotected:
			unprotected[spooled{r.Arbiter, r.SpoolSeq}] = r
		case audit.KindGap:
			res.Problems = append(res.Problems, fmt.Sprintf("gap: revisions %d-%d of cluster %x are missing (%s); the gate never compacts", r.GapFrom, r.GapTo, r.ClusterID, r.Reason))
		case audit.KindGrant:
			started[check.HoldOf(r.Key, r.Token)] = append(started[check.HoldOf(r.Key, r.Token)], r)
		case audit.KindHandoff:
			started[check.HoldOf(r.Key, r.Token)] = append(started[check.HoldOf(r.Key, r.Token)], r)
			ended[check.HoldOf(r.Key, r.EndedToken)] = append(ended[check.HoldOf(r.Key, r.EndedToken)], r)
		case audit.KindEpochAdvance:
			if r.Key != audit.EpochKey {
				ended[check.HoldOf(r.Key, r.EndedToken)] = append(ended[check.HoldOf(r.Key, r.EndedToken)], r)
			}
		case audit.KindMove:
			// A range's move starts and ends no hold (one the drain ended
			// has its own force-release row).
		default:
			ended[check.HoldOf(r.Key, r.EndedToken)] = append(ended[check.HoldOf(r.Key, r.EndedToken)], r)
		}
	}
	for h, rs := range started {
		if h.Token != 0 && len(rs) > 1 {
			res.Problems = append(res.Problems, fmt.Sprintf("token %d started %d holds of %s: %s", h.Token, len(rs), h.Key, where(rs)))
		}
	}
	lost := func(op history.Op) bool {
		for _, f := range faults {
			if f.Err != "" || (f.Kind != "restore" && f.Kind != "store-rebuild") || op.Call > f.End {
				continue
			}
			if f.Cluster != "" && clusterOf != nil && clusterOf(op.Key, op.Token) != f.Cluster {
				continue // another cluster's store
			}
			// The gate lets the history catch up before it destroys the
			// log; only the last moments can be lost. When no tailer caught
			// up, anything of that store life may be.
			if op.Call >= f.Start-lossWindow || (f.HistoryBehind && op.Call >= prevWipe(faults, f)) {
				return true
			}
		}
		return false
	}
	for _, op := range ops {
		if op.Kind == history.Unprotected && op.Outcome == history.Ok {
			res.Unprotected++
			r, ok := unprotected[spooled{op.Arbiter, op.SpoolSeq}]
			switch {
			case !ok:
				res.Problems = append(res.Problems, fmt.Sprintf("worker %d's unprotected grant of %s (lockd %s, spool seq %d) is not in the history", op.Worker, op.Key, op.Arbiter, op.SpoolSeq))
			case r.Key != op.Key || !r.Unprotected || r.Token != 0:
				res.Problems = append(res.Problems, fmt.Sprintf("worker %d's unprotected grant of %s (lockd %s, spool seq %d) is in the history as %s of %s, unprotected=%v", op.Worker, op.Key, op.Arbiter, op.SpoolSeq, r.Kind, r.Key, r.Unprotected))
			}
			continue
		}
		if op.Outcome != history.Ok || op.Token == 0 {
			continue
		}
		switch op.Kind {
		case history.Acquire:
			res.Grants++
			rs := started[check.HoldOf(op.Key, op.Token)]
			switch {
			case len(rs) == 0 && lost(op):
				res.RolledBack++
			case len(rs) == 0:
				res.Problems = append(res.Problems, fmt.Sprintf("worker %d's grant of %s (token %d) is not in the history", op.Worker, op.Key, op.Token))
			}
		case history.Release:
			res.Releases++
			rs := ended[check.HoldOf(op.Key, op.Token)]
			switch {
			case len(rs) == 0 && lost(op):
				res.RolledBack++
			case len(rs) == 0:
				res.Problems = append(res.Problems, fmt.Sprintf("worker %d's release of %s (token %d) is not in the history", op.Worker, op.Key, op.Token))
			case !anyRow(rs, func(r audit.Event) bool { return r.Kind == audit.KindRelease || r.Kind == audit.KindHandoff }):
				res.Problems = append(res.Problems, fmt.Sprintf("worker %d released %s (token %d); the history says %s", op.Worker, op.Key, op.Token, where(rs)))
			}
		case history.Force:
			res.Forces++
			rs := ended[check.HoldOf(op.Key, op.Token)]
			switch {
			case len(rs) == 0 && lost(op):
				res.RolledBack++
			case len(rs) == 0:
				res.Problems = append(res.Problems, fmt.Sprintf("the force-release of %s (token %d) is not in the history", op.Key, op.Token))
			case !anyRow(rs, forcedByOperators):
				res.Problems = append(res.Problems, fmt.Sprintf("the force-release of %s (token %d) is not recorded as one with its operators and reason: %s", op.Key, op.Token, where(rs)))
			case op.Revoke:
				res.Revokes++
				res.checkRevoked(op, rs, bySession[op.Session], ended)
			}
		}
	}
	res.checkAdvances(rows, faults)
	res.checkReleasedByHolder(ops, rows)
	sort.Strings(res.Problems)
	return res
}

// checkReleasedByHolder: a hold a worker was granted that the history says
// was released (or handed over by its release) was released by a call of
// its holder: a Release whose outcome is ok or unknown, or that lockd
// answered "not held" (a retry of a release that had committed), or an
// Unhold. A release the client refused to send (its deadline had passed,
// its session had ended) cannot explain one: a hold that ended with its
// lease, by expiry, close or revoke, recorded as released would hide why
// it ended.
func (res *Result) checkReleasedByHolder(ops []history.Op, rows []audit.Event) {
	granted := map[check.HoldID]history.Op{}
	released := map[check.HoldID]bool{}
	for _, op := range ops {
		switch {
		case op.Token == 0:
		case (op.Kind == history.Acquire || op.Kind == history.Reenter) && op.Outcome == history.Ok:
			granted[check.HoldOf(op.Key, op.Token)] = op
		case op.Kind == history.Unhold,
			op.Kind == history.Release && (op.Outcome != history.Fail || op.Err == ""):
			released[check.HoldOf(op.Key, op.Token)] = true
		}
	}
	for _, r := range rows {
		if (r.Kind != audit.KindRelease && r.Kind != audit.KindHandoff) || released[check.HoldOf(r.Key, r.EndedToken)] {
			continue
		}
		if op, ok := granted[check.HoldOf(r.Key, r.EndedToken)]; ok {
			res.Problems = append(res.Problems, fmt.Sprintf("worker %d's hold of %s (token %d) is in the history as released (%s), but the worker never released it",
				op.Worker, op.Key, r.EndedToken, where([]audit.Event{r})))
		}
	}
}

// checkAdvances: every restore and rebuild ends with two operators
// advancing the epoch (to the fault's Epoch), and each advance has its own
// row, unless the store life it began was destroyed by a later restore or
// rebuild before any tailer caught up with it (that fault's HistoryBehind).
// Each advance is looked for by its epoch: a count would let the store's
// first epoch stand in for a missing one.
func (res *Result) checkAdvances(rows []audit.Event, faults []history.Fault) {
	recorded := map[uint32]bool{}
	for _, r := range rows {
		if r.Kind == audit.KindEpochAdvance && r.Key == audit.EpochKey {
			recorded[r.ToEpoch] = true
		}
	}
	for _, f := range faults {
		if f.Err != "" || (f.Kind != "restore" && f.Kind != "store-rebuild") || recorded[f.Epoch] {
			continue
		}
		if next, ok := nextWipe(faults, f); ok && next.HistoryBehind {
			res.AdvancesLost++
			continue
		}
		res.Problems = append(res.Problems, fmt.Sprintf("the %s at %s advanced the epoch to %d; the history has no advance to it", f.Kind, sinceStart(faults, f.Start), f.Epoch))
	}
}

// nextWipe is the first restore or rebuild of f's cluster after f.
func nextWipe(faults []history.Fault, f history.Fault) (history.Fault, bool) {
	var next history.Fault
	found := false
	for _, g := range faults {
		if g.Err == "" && (g.Kind == "restore" || g.Kind == "store-rebuild") && g.Cluster == f.Cluster && g.Start > f.End && (!found || g.Start < next.Start) {
			next, found = g, true
		}
	}
	return next, found
}

// sinceStart says when t was, counted from the first fault.
func sinceStart(faults []history.Fault, t int64) string {
	first := t
	for _, f := range faults {
		first = min(first, f.Start)
	}
	return fmt.Sprintf("+%.1fs", float64(t-first)/1e9)
}

func forcedByOperators(r audit.Event) bool {
	return r.Kind == audit.KindForceRelease && r.Approver != "" && r.Requester != "" && r.Reason != ""
}

// checkRevoked checks the holds that force-release op ended by revoking
// their session (op.Session), besides the forced one (its rows forced):
// each ended after the force record, in the same store, and unless its
// holder released it (or closed the session) first, or an epoch advance
// deleted it, the revoke ended it, and it must be recorded as a
// force-release naming the operators and the reason, not as an expiry.
// The session's holds on other clusters (op.Others there, their rows in
// ended by token) are held to the same rule: the revoke ends the session
// on every cluster, leaving its record on each.
func (res *Result) checkRevoked(op history.Op, forced, sessionEnded []audit.Event, ended map[check.HoldID][]audit.Event) {
	i := slices.IndexFunc(forced, forcedByOperators)
	at := forced[i]
	checkRow := func(r audit.Event) {
		switch r.Kind {
		case audit.KindRelease, audit.KindHandoff, audit.KindSessionClose, audit.KindEpochAdvance:
			return
		}
		res.RevokedHolds++
		if !forcedByOperators(r) {
			res.Problems = append(res.Problems, fmt.Sprintf("the force-release of %s (token %d) revoked session %d, which ended its hold of %s (token %d); the history says %s, not a force-release with the operators and reason",
				op.Key, op.Token, op.Session, r.Key, r.EndedToken, where([]audit.Event{r})))
		}
	}
	for _, r := range sessionEnded {
		if r.ClusterID == at.ClusterID && r.Revision > at.Revision && check.HoldOf(r.Key, r.EndedToken) != check.HoldOf(op.Key, op.Token) {
			checkRow(r)
		}
	}
	for _, o := range op.Others {
		for _, r := range ended[check.HoldOf(o.Key, o.Token)] {
			if r.ClusterID != at.ClusterID {
				checkRow(r)
			}
		}
	}
}

// prevWipe is when the store life f ended began: the end of the restore or
// rebuild of f's cluster before f (0: the run's start).
func prevWipe(faults []history.Fault, f history.Fault) int64 {
	var at int64
	for _, g := range faults {
		if g.Err == "" && (g.Kind == "restore" || g.Kind == "store-rebuild") && g.Cluster == f.Cluster && g.End < f.Start && g.End > at {
			at = g.End
		}
	}
	return at
}

func anyRow(rs []audit.Event, ok func(audit.Event) bool) bool {
	for _, r := range rs {
		if ok(r) {
			return true
		}
	}
	return false
}

func where(rs []audit.Event) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s at %x/%d/%d", r.Kind, r.Key, r.ClusterID, r.Epoch, r.Revision)
	}
	return s
}
