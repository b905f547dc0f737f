package check

import (
	"fmt"
	"slices"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// KindQuorumLoss is the fault kind whose windows checkQuorumLoss reads: two
// of three members stopped, from Start to End.
const KindQuorumLoss = "quorum-loss"

// recoveryWindow is how long after an outage ends an arbiter may still be
// in its open posture: until its next successful epoch read (every second,
// each bounded by the request timeout) and the shipping of its spool.
const recoveryWindow = int64(20e9)

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
// Every unprotected grant must also be in the history with
// unprotected=true; the audit check checks that.
type QuorumResult struct {
	// Outages counts the quorum-loss faults; Inside the grants called and
	// answered inside one, of which Unprotected were unprotected.
	Outages     int `json:"outages"`
	Inside      int `json:"inside"`
	Unprotected int `json:"unprotected"`
	// Details has one line per violation.
	Details []string `json:"details,omitempty"`
}

func checkQuorumLoss(ops []history.Op, faults []history.Fault, openKeys []string) QuorumResult {
	var res QuorumResult
	var outages []history.Fault
	for _, f := range faults {
		if f.Kind == KindQuorumLoss && f.Err == "" {
			outages = append(outages, f)
		}
	}
	res.Outages = len(outages)
	inside := func(op history.Op) bool {
		for _, f := range outages {
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
		open := slices.Contains(openKeys, op.Key)
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
	return res
}
