package arbiter_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestListClustersSaysEachClustersHealthAndItsOutage: lockd in front of a
// real three-member cluster lists it with both tiers, its leader (a member
// by name), revision, epoch and sessions; with two members stopped it says
// the cluster cannot be read, why, and that lockd's posture for it is
// open.
func TestListClustersSaysEachClustersHealthAndItsOutage(t *testing.T) {
	o := startOutage(t, lockdtest.Options{})
	alice, admin := o.env.Raw(t, lockdtest.Alice)
	openSession(t, alice, 15*time.Second)

	resp, err := admin.ListClusters(t.Context(), &lockv1.ListClustersRequest{})
	if err != nil || len(resp.GetClusters()) != 1 {
		t.Fatalf("ListClusters: %v %v; want the one cluster", resp, err)
	}
	c := resp.GetClusters()[0]
	if c.GetName() != "etcd" || !slices.Equal(c.GetTiers(), []string{"coord", "entity"}) || !c.GetReachable() || c.GetError() != "" {
		t.Fatalf("cluster %v; want etcd (lockd dials it by --etcd-endpoints), serving coord and entity, reachable", c)
	}
	if !slices.Contains([]string{"m0", "m1", "m2"}, c.GetLeader()) || c.GetRevision() <= 0 || c.GetEpoch() < 1 ||
		c.GetSealed() || c.GetSessions() < 1 || c.GetClusterId() == 0 || c.GetPosture() != "quorum" {
		t.Fatalf("cluster %v; want a member as leader, a revision, epoch >= 1, not sealed, alice's session, quorum", c)
	}

	o.loseQuorum(t)
	resp, err = admin.ListClusters(t.Context(), &lockv1.ListClustersRequest{})
	if err != nil || len(resp.GetClusters()) != 1 {
		t.Fatalf("ListClusters without quorum: %v %v; want an answer, not an error", resp, err)
	}
	c = resp.GetClusters()[0]
	if c.GetReachable() || c.GetError() == "" || c.GetPosture() != "open" || c.GetName() != "etcd" {
		t.Fatalf("cluster without quorum %v; want not reachable, with why, posture open", c)
	}
}
