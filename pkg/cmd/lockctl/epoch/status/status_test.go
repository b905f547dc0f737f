package status

import (
	"testing"

	"github.com/lockd-dev/lockd/pkg/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestPrintStatus(t *testing.T) {
	golden.AssertPrinted(t, "ok", NewView(&lockv1.EpochStatusResponse{
		Epoch: 1, RecordClusterId: 0xdc65b64e471a5785, StoreClusterId: 0xdc65b64e471a5785, Revision: 12,
	}))
	golden.AssertPrinted(t, "sealed", NewView(&lockv1.EpochStatusResponse{
		Epoch: 3, RecordClusterId: 0xdc65b64e471a5785, StoreClusterId: 0x8e9e05c52164694d, Sealed: true, Revision: 40210,
	}))
}
