package status

import (
	"testing"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestPrintStatus(t *testing.T) {
	golden.AssertPrinted(t, "ok", NewView(&lockv1.EpochStatusResponse{
		Epoch: 1, RecordClusterId: 0xdc65b64e471a5785, StoreClusterId: 0xdc65b64e471a5785, Revision: 12, HighestEpoch: 1,
	}))
	golden.AssertPrinted(t, "sealed", NewView(&lockv1.EpochStatusResponse{
		Epoch: 3, RecordClusterId: 0xdc65b64e471a5785, StoreClusterId: 0x8e9e05c52164694d, Sealed: true, Revision: 40210, HighestEpoch: 3,
		SealedReason: "the store's cluster ID 8e9e05c52164694d differs from the epoch record's dc65b64e471a5785 (a restore): two operators advance it: lockctl epoch advance request --from 3 --to 4",
	}))
	golden.AssertPrinted(t, "missing", NewView(&lockv1.EpochStatusResponse{
		StoreClusterId: 0x8e9e05c52164694d, Sealed: true, RecordMissing: true, Revision: 3, HighestEpoch: 3,
		SealedReason: "the store has no epoch record (a store rebuilt empty, or restored from before lockd first ran): two operators initialise it above every epoch issued before: lockctl epoch advance request --from 0 --to <N> (N > 3; docs/operating.md says where to find the last one)",
	}))
	golden.AssertPrinted(t, "clusters", NewView(&lockv1.EpochStatusResponse{
		Cluster: "eu-west-coord", Epoch: 4, RecordClusterId: 0xdc65b64e471a5785, StoreClusterId: 0xdc65b64e471a5785, Revision: 812, HighestEpoch: 4, AllocatedEpoch: 6,
		Clusters: []*lockv1.EpochStatusResponse{
			{Cluster: "eu-west-coord", Epoch: 4, RecordClusterId: 0xdc65b64e471a5785, StoreClusterId: 0xdc65b64e471a5785, Revision: 812, HighestEpoch: 4, AllocatedEpoch: 6},
			{Cluster: "eu-west-entity", Epoch: 6, RecordClusterId: 0x5b1e2a7f00c3d914, StoreClusterId: 0x77aa10c2e9b3f001, Sealed: true, Revision: 90211, HighestEpoch: 6, AllocatedEpoch: 6,
				SealedReason: "the store's cluster ID 77aa10c2e9b3f001 differs from the epoch record's 5b1e2a7f00c3d914 (a restore): two operators advance it"},
		},
	}))
}
