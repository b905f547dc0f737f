package check

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// KindQuorumLoss is the fault kind whose windows checkQuorumLoss reads: two
// of three members stopped, from Start to End.
const KindQuorumLoss = "quorum-loss"

// recoveryWindow is how long after an outage ends an arbiter may still be
// in its open posture: until its next successful epoch read (every second,
// each bounded by the request timeout) and the shipping of its spool.
const recoveryWindow = int64(20e9)

// usableMargin is how long after an unprotected lock is due to be checked
// (two keepalive intervals after its grant) the outage must still last for
// the check to apply: the worker checks every half second.
const usableMargin = int64(time.Second)

// reloadSlack is how long after a class-reload fault ends lockd may still
// serve the classes it wrote (it reloads on a file watch).
const reloadSlack = int64(5 * time.Second)

// QuorumResult is the quorum-loss check: while two of three members are
// stopped no consensus write can commit, so
//
//   - a key of a closed class is granted nothing: no grant called after
//     the outage began returned before it ended;
//   - a key of an open class is granted only unprotected (token 0) in
//     that time;
//   - an unprotected grant is called only during an outage (or in the
//     moments after one, before the arbiter has seen quorum again).
//
// And around the unprotected holds:
//
//   - (i) no consensus grant of a key certainly committed while a holder of
//     an unprotected lock of it had not been told it ended (Overlaps);
//   - (ii) an unprotected lock granted in an outage is still usable two
//     keepalive intervals later while the outage lasts (CheckedUsable);
//   - (iii) an Acquire naming a class that does not own the key is refused
//     with CLASS_MISMATCH, with quorum and without (Mismatches…).
//
// Every unprotected grant must also be in the history with
// unprotected=true; the audit check checks that.
type QuorumResult struct {
	// Outages counts the quorum-loss faults; Inside the grants called and
	// answered inside one, of which Unprotected were unprotected.
	Outages     int `json:"outages"`
	Inside      int `json:"inside"`
	Unprotected int `json:"unprotected"`
	// Told counts the unprotected holds whose holder was told they ended
	// (a lost operation); Released those it released with no lost
	// recorded; Unended those with neither (they last to the end of the
	// history).
	Told     int `json:"told"`
	Released int `json:"released"`
	Unended  int `json:"unended"`
	// Overlaps are consensus grants that certainly committed inside an
	// unprotected hold of the same key whose holder had not been told.
	Overlaps []Overlap `json:"overlaps,omitempty"`
	// CheckedUsable counts the unprotected grants checked to be still
	// usable two keepalive intervals after they were granted, the outage
	// lasting; CheckedUsablePerOutage counts them per outage, in the order
	// of the faults.
	CheckedUsable          int   `json:"checkedUsable"`
	CheckedUsablePerOutage []int `json:"checkedUsablePerOutage,omitempty"`
	// MismatchesInside and MismatchesOutside count the Acquires naming a
	// class that does not own the key that lockd refused with
	// CLASS_MISMATCH inside an outage and clear of every outage;
	// MismatchesExcused those refused as DENIED while a class-reload had
	// removed the worker's grant (lockd authorizes before it reads the
	// class).
	MismatchesInside  int `json:"mismatchesInside"`
	MismatchesOutside int `json:"mismatchesOutside"`
	MismatchesExcused int `json:"mismatchesExcused"`
	// Details has one line per violation.
	Details []string `json:"details,omitempty"`
}

// Overlap is a consensus grant (Grantee's acquire, token Token) that
// certainly committed while Holder held the same key unprotected and had
// not been told: its earliest possible commit (its call, or the end of the
// outage its call fell in) is at or after the unprotected grant's return,
// and it returned at or before the hold's end (HoldEnd 0: none recorded).
type Overlap struct {
	Key         string `json:"key"`
	Holder      int    `json:"holder"`
	HolderSeq   int64  `json:"holderSeq"`
	HoldFrom    int64  `json:"holdFrom"`
	HoldEnd     int64  `json:"holdEnd,omitempty"`
	Grantee     int    `json:"grantee"`
	GrantSeq    int64  `json:"grantSeq"`
	Token       uint64 `json:"token"`
	GrantCall   int64  `json:"grantCall"`
	GrantReturn int64  `json:"grantReturn"`
	// EarliestCommit is GrantCall, or the end of the outage it fell in.
	EarliestCommit int64 `json:"earliestCommit"`
}

// unprotectedHold is one unprotected lock as its worker held it.
type unprotectedHold struct {
	grant history.Op
	// lost is its Lost (the holder told it ended, with why), release its
	// worker's release call, each 0 when not recorded; released is that
	// call when the release found the lock still held (a failed release
	// found it ended already: the worker did not end it).
	lost, release, released int64
	why                     string
	checks                  []history.Op // its unprotected-check operations
}

// end is when the hold ended: the first of its Lost and its worker's
// release call; 0 when neither was recorded (it lasts to the end of the
// history).
func (h *unprotectedHold) end() int64 {
	switch {
	case h.lost == 0:
		return h.release
	case h.release == 0:
		return h.lost
	}
	return min(h.lost, h.release)
}

// unprotectedHolds pairs every unprotected grant with what its worker
// recorded about it afterwards: a worker holds one lock of a key at a time,
// so its Lost (token 0), checks and release of the key belong to its latest
// unprotected grant of that key. ops are ordered by call.
func unprotectedHolds(ops []history.Op) []*unprotectedHold {
	type wk struct {
		worker int
		key    string
	}
	var holds []*unprotectedHold
	cur := map[wk]*unprotectedHold{}
	for _, op := range ops {
		at := wk{op.Worker, op.Key}
		h := cur[at]
		switch {
		case op.Kind == history.Unprotected && op.Outcome == history.Ok:
			if h != nil && h.end() == 0 {
				h.release = op.Call // the worker went on to a new grant: it no longer held this one
			}
			h = &unprotectedHold{grant: op}
			holds = append(holds, h)
			cur[at] = h
		case h == nil:
		case op.Kind == history.Lost && op.Token == 0:
			if h.lost == 0 {
				h.lost, h.why = op.Call, op.Err
			}
		case op.Kind == history.UnprotectedRelease:
			if h.release == 0 {
				h.release = op.Call
				if op.Outcome != history.Fail {
					h.released = op.Call
				}
			}
		case op.Kind == history.UnprotectedCheck && h.release == 0:
			h.checks = append(h.checks, op)
		}
	}
	return holds
}

// checkQuorumLoss checks the grants against the quorum-loss outages, the
// unprotected holds against the consensus grants, and the mismatch
// operations; ops are ordered by call.
func checkQuorumLoss(ops []history.Op, opt Options) QuorumResult {
	var res QuorumResult
	var outages []history.Fault
	for _, f := range opt.Faults {
		if f.Kind == KindQuorumLoss && f.Err == "" {
			outages = append(outages, f)
		}
	}
	res.Outages = len(outages)
	inside := func(op history.Op) bool {
		for _, f := range outages {
			// Another cluster's outage: this key's cluster had quorum. (Even
			// the coord cluster's: a session that exists may be granted a
			// key on the entity cluster, in a transaction there; its client
			// ends it at the session's deadline.)
			if f.Cluster != "" && opt.ClusterOf != nil && opt.ClusterOf(op.Key, op.Token) != f.Cluster {
				continue // another cluster's outage: this key's cluster had quorum
			}
			if op.Call >= f.Start && op.Return != 0 && op.Return <= f.End {
				return true
			}
		}
		return false
	}
	during := func(op history.Op) bool {
		for _, f := range outages {
			if op.Call >= f.Start && op.Call <= f.End+recoveryWindow {
				return true
			}
		}
		return false
	}
	for _, op := range ops {
		// A re-entry returns a hold the client has already: not a grant.
		granted := op.Outcome == history.Ok && (op.Kind == history.Acquire || op.Kind == history.Unprotected)
		if !granted {
			continue
		}
		open := slices.Contains(opt.OpenKeys, op.Key)
		where := fmt.Sprintf("w%d %s %q (op %d)", op.Worker, op.Kind, op.Key, op.Seq)
		if op.Kind == history.Unprotected {
			res.Unprotected++
			switch {
			case !open:
				res.Details = append(res.Details, "quorum loss: unprotected grant of a key of a closed class: "+where)
			case op.Token != 0:
				res.Details = append(res.Details, fmt.Sprintf("quorum loss: unprotected grant with token %s: %s", FormatToken(op.Token), where))
			case !during(op):
				res.Details = append(res.Details, "quorum loss: unprotected grant outside any outage: "+where)
			}
		}
		if !inside(op) {
			continue
		}
		res.Inside++
		switch {
		case !open:
			res.Details = append(res.Details, fmt.Sprintf("quorum loss: a closed class granted token %s while two members were stopped: %s", FormatToken(op.Token), where))
		case op.Kind != history.Unprotected:
			res.Details = append(res.Details, fmt.Sprintf("quorum loss: an open class granted protected token %s while two members were stopped: %s", FormatToken(op.Token), where))
		}
	}

	holds := unprotectedHolds(ops)
	for _, h := range holds {
		switch {
		case h.lost != 0:
			res.Told++
		case h.release != 0:
			res.Released++
		default:
			res.Unended++
		}
	}
	res.checkOverlaps(ops, holds, outages)
	res.checkUsable(holds, outages, opt.OpenTTL)
	res.checkMismatches(ops, outages, opt.Faults)
	return res
}

// checkOverlaps is (i): no consensus grant of a key certainly committed
// inside an unprotected hold of it whose holder had not been told. A grant
// certainly committed in [earliest commit, return]: its call, or the end of
// the outage its call fell in (nothing commits without quorum), up to its
// return. The hold is [the unprotected grant's return, its end], its end
// being the holder's Lost or its own release call, whichever came first,
// or the end of the history.
func (res *QuorumResult) checkOverlaps(ops []history.Op, holds []*unprotectedHold, outages []history.Fault) {
	byKey := map[string][]*unprotectedHold{}
	for _, h := range holds {
		byKey[h.grant.Key] = append(byKey[h.grant.Key], h)
	}
	for _, g := range ops {
		if g.Kind != history.Acquire || g.Outcome != history.Ok || g.Token == 0 || len(byKey[g.Key]) == 0 {
			continue
		}
		commit := g.Call
		for _, f := range outages {
			if g.Call >= f.Start && g.Call <= f.End {
				commit = max(commit, f.End)
			}
		}
		for _, h := range byKey[g.Key] {
			end := h.end()
			if commit < h.grant.Return || (end != 0 && g.Return > end) {
				continue
			}
			o := Overlap{Key: g.Key, Holder: h.grant.Worker, HolderSeq: h.grant.Seq, HoldFrom: h.grant.Return, HoldEnd: end,
				Grantee: g.Worker, GrantSeq: g.Seq, Token: g.Token, GrantCall: g.Call, GrantReturn: g.Return, EarliestCommit: commit}
			res.Overlaps = append(res.Overlaps, o)
			res.Details = append(res.Details, describeOverlap(o, h))
		}
	}
}

func describeOverlap(o Overlap, h *unprotectedHold) string {
	end := "no end recorded, to the end of the history"
	switch {
	case h.end() == 0:
	case h.end() == h.lost:
		end = fmt.Sprintf("told at %s: %s", sec(h.lost), h.why)
	default:
		end = fmt.Sprintf("released by the worker at %s", sec(h.release))
	}
	return fmt.Sprintf("quorum loss: a consensus grant overlapped an unprotected holder that had not been told: w%d acquire %q (op %d) token %s, "+
		"committed no earlier than %s, answered at %s, while w%d held it unprotected (op %d) since %s (%s)",
		o.Grantee, o.Key, o.GrantSeq, FormatToken(o.Token), sec(o.EarliestCommit), sec(o.GrantReturn),
		o.Holder, o.HolderSeq, sec(o.HoldFrom), end)
}

// checkUsable is (ii): an unprotected lock granted in an outage is still
// usable two keepalive intervals (openTTL/3 each) after its grant, while
// the outage lasts. For each such grant whose due time plus usableMargin
// is before the outage's end, and which its worker did not release itself
// by then, there must be an unprotected-check ok at or after the due time
// and before the end, and no failed check and no lost before the end.
func (res *QuorumResult) checkUsable(holds []*unprotectedHold, outages []history.Fault, openTTL time.Duration) {
	res.CheckedUsablePerOutage = make([]int, len(outages))
	if openTTL <= 0 {
		return
	}
	interval := int64(openTTL / 3)
	for _, h := range holds {
		g := h.grant
		i := slices.IndexFunc(outages, func(f history.Fault) bool { return g.Return >= f.Start && g.Return <= f.End })
		if i < 0 {
			continue
		}
		f := outages[i]
		due := g.Return + 2*interval
		if due+usableMargin >= f.End || (h.released != 0 && h.released < due+usableMargin) {
			continue
		}
		res.CheckedUsable++
		res.CheckedUsablePerOutage[i]++
		where := fmt.Sprintf("w%d's unprotected lock of %q (op %d, granted at %s, in the outage %s–%s)", g.Worker, g.Key, g.Seq, sec(g.Return), sec(f.Start), sec(f.End))
		okLate := false
		var bad string
		for _, c := range h.checks {
			if c.Call >= f.End {
				break
			}
			switch {
			case c.Outcome == history.Fail && bad == "":
				bad = fmt.Sprintf("its check at %s said it was not usable (%s)", sec(c.Call), c.Err)
			case c.Outcome == history.Ok && c.Call >= due:
				okLate = true
			}
		}
		if h.lost != 0 && h.lost < f.End {
			bad = fmt.Sprintf("it was lost at %s, before quorum returned: %s", sec(h.lost), h.why)
		}
		if bad == "" && !okLate {
			bad = fmt.Sprintf("no check at or after %s (2×%s after its grant) said it was still usable before the outage ended", sec(due), openTTL/3)
		}
		if bad != "" {
			res.Details = append(res.Details, "quorum loss: "+where+" did not stay usable: "+bad)
		}
	}
}

// checkMismatches is (iii): an Acquire naming a class that does not own
// the key is refused with CLASS_MISMATCH, with quorum and without. An
// unknown outcome says nothing; a grant, or a refusal for another reason,
// is a violation, except DENIED while a class-reload fault had removed the
// worker's grant (authorization comes first).
func (res *QuorumResult) checkMismatches(ops []history.Op, outages []history.Fault, faults []history.Fault) {
	for _, op := range ops {
		if op.Kind != history.Mismatch || op.Outcome == history.Unknown {
			continue
		}
		in, clear := false, true
		for _, f := range outages {
			if op.Call >= f.Start && op.Return <= f.End {
				in = true
			}
			if op.Return >= f.Start && op.Call <= f.End {
				clear = false
			}
		}
		switch {
		case op.Outcome == history.Ok && in:
			res.MismatchesInside++
		case op.Outcome == history.Ok && clear:
			res.MismatchesOutside++
		case op.Outcome == history.Ok:
		case op.Reason == "DENIED" && grantRemoved(faults, op):
			res.MismatchesExcused++
		default:
			// A refusal always has lockd's reason: without one, it was granted.
			what := fmt.Sprintf("granted token %s: %s", FormatToken(op.Token), op.Err)
			if op.Reason != "" {
				what = fmt.Sprintf("refused with %s (%s)", op.Reason, op.Err)
			}
			when := "with quorum"
			switch {
			case in:
				when = "while two members were stopped"
			case !clear:
				when = "as an outage began or ended"
			}
			res.Details = append(res.Details, fmt.Sprintf("class mismatch: w%d asked for %q naming class %s (op %d, %s) and was %s; want CLASS_MISMATCH",
				op.Worker, op.Key, op.Class, op.Seq, when, what))
		}
	}
}

// grantRemoved reports whether a class-reload fault had removed op's
// worker's grant when op was called (targets are "worker-N").
func grantRemoved(faults []history.Fault, op history.Op) bool {
	for _, f := range faults {
		n, ok := strings.CutPrefix(f.Target, "worker-")
		if f.Kind != "class-reload" || f.Err != "" || !ok {
			continue
		}
		if id, err := strconv.Atoi(n); err == nil && id == op.Worker && op.Call >= f.Start && op.Call <= f.End+reloadSlack {
			return true
		}
	}
	return false
}

// sec renders a CLOCK_MONOTONIC time (the history's and faults.json's) in
// seconds.
func sec(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
