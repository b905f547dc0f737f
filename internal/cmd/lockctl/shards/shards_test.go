package shards

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func plan(state string) *lockv1.ShardPlan {
	return &lockv1.ShardPlan{
		Id: "20261205-180501-a1b2c3", FromVersion: 2, State: state, Requester: "spiffe://lockd.local/ops/ann", Reason: "entity-1 at 80% (CAP-12)",
		MapJson:       `{"version":3,"shards":[{"name":"entity-1"},{"name":"entity-2"},{"name":"entity-3"}]}`,
		Moves:         []*lockv1.RangeMove{{Range: "payments/ledger/", From: "entity-1", To: "entity-3", Live: 2}},
		ExpectedDrain: durationpb.New(15 * time.Second), UpdatedAt: timestamppb.New(golden.Now.Add(-5 * time.Second)),
	}
}

func TestPrintShards(t *testing.T) {
	golden.AssertPrinted(t, "plan-proposed", NewPlanView(plan("proposed")))
	draining := plan("draining")
	draining.Approver, draining.Remaining = "spiffe://lockd.local/ops/bob", 1
	draining.Stragglers = []*lockv1.RangeMove{{Range: "orders/eu/", From: "entity-2", To: "entity-3", Live: 1}}
	golden.AssertPrinted(t, "plan-draining", NewPlanView(draining))
	blocked := plan("flipping")
	blocked.Moves, blocked.Blocked = nil, "shard entity-1 may receive ranges, but its epoch 2 is not above shard entity-2's 3: advance entity-1's epoch"
	golden.AssertPrinted(t, "status", NewStatusView(&lockv1.ShardStatusResponse{
		Version: 2, MapJson: `{"version":2,"shards":[{"name":"entity-1"},{"name":"entity-2"}]}`,
		Shards: []*lockv1.ShardLoad{
			{Name: "entity-1", Weight: 1, Epoch: 2, Sessions: 14, Holds: 230, GrantsPerSecond: 41.5},
			{Name: "entity-2", Weight: 1, Epoch: 3, Sessions: 9, Holds: 112, GrantsPerSecond: 17.25},
			{Name: "entity-3", Epoch: 7, Error: "arbiter: store unavailable: context deadline exceeded"},
		},
		Plans: []*lockv1.ShardPlan{blocked},
	}))
}

func TestPlanRequestNamesTheBadFlag(t *testing.T) {
	for _, tc := range []struct {
		opts PlanOptions
		want string
	}{
		{PlanOptions{Add: []string{"entity-3=heavy"}}, "--add entity-3=heavy: the weight must be a positive number"},
		{PlanOptions{Add: []string{"entity-3=0"}}, "--add entity-3=0: the weight must be a positive number"},
		{PlanOptions{Pin: []string{"payments/"}}, "--pin payments/: must be PREFIX=SHARD"},
	} {
		_, err := tc.opts.request()
		var usage *cli.UsageError
		require.ErrorAs(t, err, &usage)
		require.ErrorContains(t, err, tc.want)
	}
	req, err := (&PlanOptions{Add: []string{"entity-3", "entity-4=2"}, Pin: []string{"payments/=entity-3"}, Reason: "r"}).request()
	require.NoError(t, err)
	require.Equal(t, "entity-4", req.GetAdd()[1].GetName())
	require.Equal(t, 2.0, req.GetAdd()[1].GetWeight())
	require.Equal(t, "payments/", req.GetPin()[0].GetPrefix())
}
