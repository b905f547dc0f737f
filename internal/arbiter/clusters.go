package arbiter

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
)

// ClusterStatus is one etcd cluster the arbiter fronts, as it sees it now.
type ClusterStatus struct {
	// Name is the cluster's (Config.Cluster), Tiers the tiers whose keys
	// live on it.
	Name  string
	Tiers []class.Tier
	// Err is why the cluster could not be read just now; then only Name,
	// Tiers, Posture and the seal Epoch carries are known.
	Err error
	// Leader is the leader member's name; empty when unknown.
	Leader string
	// Epoch is the cluster's epoch status, read now (Revision among it).
	Epoch EpochStatus
	// Sessions counts the sessions with a lease on the cluster.
	Sessions int64
	// Posture is the arbiter's posture for the cluster: "quorum", "open"
	// or "recovering".
	Posture string
}

// Clusters reports every cluster the arbiter fronts: one per cell.
func (a *Arbiter) Clusters(ctx context.Context) []ClusterStatus {
	out := make([]ClusterStatus, 0, len(a.cells))
	for _, c := range a.cells {
		out = append(out, c.status(ctx))
	}
	return out
}

// status reads the cell's cluster: its epoch record (linearizably), its
// sessions and its leader.
func (c *cell) status(ctx context.Context) ClusterStatus {
	cs := ClusterStatus{Name: c.name, Tiers: c.tiers, Posture: c.posture()}
	rev, err := c.reloadEpoch(ctx)
	cs.Epoch = c.epochStatus(rev)
	if err != nil {
		cs.Err = err
		return cs
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(cctx, sessionPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		cs.Err = storeErr(ctx, err)
		return cs
	}
	cs.Sessions = resp.Count
	cs.Leader = c.leader(cctx)
	return cs
}

// leader is the name of the cluster's leader, asked of its endpoints in
// turn ("" when none answers). An in-process client has no endpoints and
// answers for its own member.
func (c *cell) leader(ctx context.Context) string {
	eps := c.cli.Endpoints()
	if len(eps) == 0 {
		eps = []string{""}
	}
	members, err := c.cli.MemberList(ctx)
	if err != nil {
		return ""
	}
	for _, ep := range eps {
		st, err := c.cli.Status(ctx, ep)
		if err != nil || st.Leader == 0 {
			continue
		}
		for _, m := range members.Members {
			if m.ID == st.Leader {
				return m.Name
			}
		}
	}
	return ""
}
