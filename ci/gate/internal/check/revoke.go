package check

import (
	"fmt"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// RevokeResult is the check of force-releases that also revoked the
// holder's session: the revoke ends the session on every cluster before
// the approval answers, so none of the session's other holds is still
// there for its holder to release afterwards. (The audit check separately
// wants each recorded as forced, not expired.)
type RevokeResult struct {
	// Revokes counts the approved revoking force-releases; Others the other
	// holds their sessions had when the key was picked, of which
	// OtherCluster were on another cluster than the forced hold.
	Revokes      int      `json:"revokes"`
	Others       int      `json:"others"`
	OtherCluster int      `json:"other_cluster"`
	Details      []string `json:"details,omitempty"`
}

// checkRevokes finds, for each approved revoking Force in ops, a release
// of one of its Others that found the hold still there (outcome ok) though
// it was called after the approval returned. clusterOf may be nil (one
// cluster).
func checkRevokes(ops []history.Op, clusterOf ClusterOf) RevokeResult {
	var res RevokeResult
	released := map[HoldID][]history.Op{} // releases that found the hold
	for _, op := range ops {
		if op.Kind == history.Release && op.Outcome == history.Ok {
			id := HoldOf(op.Key, op.Token)
			released[id] = append(released[id], op)
		}
	}
	for _, f := range ops {
		if f.Kind != history.Force || !f.Revoke || f.Outcome != history.Ok {
			continue
		}
		res.Revokes++
		for _, o := range f.Others {
			res.Others++
			if clusterOf != nil && clusterOf(o.Key, o.Token) != clusterOf(f.Key, f.Token) {
				res.OtherCluster++
			}
			for _, r := range released[HoldOf(o.Key, o.Token)] {
				if r.Call > f.Return {
					res.Details = append(res.Details, fmt.Sprintf(
						"revoke: the force-release of %q revoked session %d, which also held %q (token %s); w%d released that hold %.3fs after the approval answered and found it still there (op %d)",
						f.Key, f.Session, o.Key, FormatToken(o.Token), r.Worker, float64(r.Call-f.Return)/1e9, r.Seq))
				}
			}
		}
	}
	return res
}
