package clusters

import (
	"testing"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestPrintClusters(t *testing.T) {
	golden.AssertPrinted(t, "clusters", NewView(&lockv1.ListClustersResponse{Clusters: []*lockv1.Cluster{
		{
			Name: "eu-west-coord", Tiers: []string{"coord"}, Reachable: true, Leader: "coord-2", Revision: 48213,
			Epoch: 3, Sessions: 12, ClusterId: 0x8e9e05c52164694d, Posture: "quorum",
		},
		{
			Name: "eu-west-entity-1", Tiers: []string{"entity"}, Error: "arbiter: etcd unavailable: context deadline exceeded",
			Epoch: 4, Sessions: 0, ClusterId: 0x5a1c0ffee0ddba11, Posture: "open",
		},
		{
			Name: "eu-west-entity-2", Tiers: []string{"entity"}, Reachable: true, Leader: "entity-2-0", Revision: 1207,
			Epoch: 5, Sealed: true, SealedReason: "the store's cluster ID 1234 differs from the epoch record's 5678 (a restore): lockctl epoch advance --from 5 --to 6",
			Sessions: 3, ClusterId: 0x1234, Posture: "quorum",
		},
	}}))
	golden.AssertPrinted(t, "clusters-empty", NewView(&lockv1.ListClustersResponse{}))
}
