package arbiter_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestAnEpochIsAllocatedToOneClusterOnly: every advance takes its epoch
// from the counter on the coord tier's cluster. An epoch allocated to
// another cluster is never used again: not as a stated target, not as the
// default, and not by a request made before it was allocated.
func TestAnEpochIsAllocatedToOneClusterOnly(t *testing.T) {
	t.Parallel()
	env := lockdtest.Start(t, lockdtest.Options{})
	cli := env.Backend.Client
	_, op := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	allocatedElsewhere := func(n string) {
		t.Helper()
		if _, err := cli.Put(t.Context(), keyspace.AllocatedEpochKey, n); err != nil {
			t.Fatal(err)
		}
	}

	allocatedElsewhere("10") // another cluster was given epochs up to 10
	st, err := op.EpochStatus(t.Context(), &lockv1.EpochStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetEpoch() != 1 || st.GetAllocatedEpoch() != 10 || st.GetCluster() == "" || len(st.GetClusters()) != 1 ||
		st.GetClusters()[0].GetCluster() != st.GetCluster() {
		t.Fatalf("epoch status = %v; want epoch 1, allocated 10, and its one cluster listed", st)
	}

	_, err = op.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: 1, ToEpoch: 5, Reason: "drill"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "allocated to any cluster") {
		t.Fatalf("advance to 5 with 10 allocated: %v; want InvalidArgument naming the allocation", err)
	}
	_, err = op.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{Cluster: "nope", FromEpoch: 1, Reason: "drill"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `cluster: no cluster "nope"`) {
		t.Fatalf("advance of an unknown cluster: %v; want InvalidArgument naming the field", err)
	}

	req, err := op.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: 1, Reason: "drill"})
	if err != nil {
		t.Fatal(err)
	}
	if req.GetToEpoch() != 11 || req.GetCluster() != st.GetCluster() {
		t.Fatalf("default target = epoch %d of %q; want 11, the next one free, of %q", req.GetToEpoch(), req.GetCluster(), st.GetCluster())
	}
	allocatedElsewhere("12") // meanwhile, another cluster's advances took 11 and 12
	if _, err := op2.ApproveEpochAdvance(t.Context(), &lockv1.ApproveEpochAdvanceRequest{Id: req.GetId()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("approving a move to epoch 11, allocated since: %v; want FailedPrecondition", err)
	}
	if st, err := op.EpochStatus(t.Context(), &lockv1.EpochStatusRequest{}); err != nil || st.GetEpoch() != 1 {
		t.Fatalf("after the refused approval: %v, %v; want epoch 1 still", st, err)
	}

	req, err = op.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: 1, Reason: "drill"})
	if err != nil {
		t.Fatal(err)
	}
	adv, err := op2.ApproveEpochAdvance(t.Context(), &lockv1.ApproveEpochAdvanceRequest{Id: req.GetId()})
	if err != nil || adv.GetEpoch() != 13 || adv.GetCluster() != st.GetCluster() {
		t.Fatalf("approve = %v, %v; want epoch 13 of %q", adv, err, st.GetCluster())
	}
	st, err = op.EpochStatus(t.Context(), &lockv1.EpochStatusRequest{Cluster: st.GetCluster()})
	if err != nil || st.GetEpoch() != 13 || st.GetAllocatedEpoch() != 13 || len(st.GetClusters()) != 0 {
		t.Fatalf("epoch status of the cluster = %v, %v; want epoch 13, allocated 13, no list (one cluster asked)", st, err)
	}
}
