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
}
