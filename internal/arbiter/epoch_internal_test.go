package arbiter

import (
	"log/slog"
	"testing"
	"time"
)

// TestEpochStateNeverGoesBackAndStaysSealed walks nextEpoch through
// sequences of reads: the epoch never goes down, and once sealed only a
// read of a higher epoch bound to the answering cluster unseals. The
// first case is what -race found: sealed at start by the restored copy's
// answer, then a read from the original at the same epoch.
func TestEpochStateNeverGoesBackAndStaysSealed(t *testing.T) {
	const a, b = 0xa, 0xb // two cluster IDs
	rec := func(epoch uint32, cluster, store uint64) observation {
		return observation{found: true, epoch: epoch, cluster: cluster, modRev: int64(epoch), store: store, rev: 100}
	}
	missing := func(store uint64) observation { return observation{store: store, rev: 3} }
	tests := []struct {
		name   string
		floor  watermark
		reads  []observation
		sealed bool
		epoch  uint32
	}{
		{"sealed at start by a copy, then the original at the same epoch", watermark{}, []observation{rec(1, a, b), rec(1, a, a)}, true, 1},
		{"a mixed list flapping", watermark{}, []observation{rec(1, a, a), rec(1, a, b), rec(1, a, a), rec(1, a, b), rec(1, a, a)}, true, 1},
		{"a higher epoch bound to the answering cluster unseals", watermark{}, []observation{rec(1, a, a), rec(1, a, b), rec(2, b, b)}, false, 2},
		{"a higher epoch bound to another cluster does not", watermark{}, []observation{rec(1, a, b), rec(2, a, b)}, true, 2},
		{"a lower epoch never lowers the state", watermark{}, []observation{rec(3, a, a), rec(2, a, a)}, true, 3},
		{"then the old epoch again stays sealed", watermark{}, []observation{rec(3, a, a), rec(2, a, a), rec(3, a, a)}, true, 3},
		{"no record seals", watermark{}, []observation{rec(2, a, a), missing(a)}, true, 2},
		{"no record at start seals", watermark{}, []observation{missing(a)}, true, 0},
		{"behind the state file's epoch", watermark{Epoch: 4, ClusterID: a}, []observation{rec(3, a, a)}, true, 4},
		{"behind the state file's revision", watermark{Epoch: 3, ClusterID: a, Revision: 500}, []observation{rec(3, a, a)}, true, 3},
		{"at the state file's epoch and revision", watermark{Epoch: 3, ClusterID: a, Revision: 100}, []observation{rec(3, a, a)}, false, 3},
		{"the same epoch rewritten", watermark{}, []observation{rec(1, a, a), {found: true, epoch: 1, cluster: a, modRev: 9, store: a, rev: 100}}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st *epochState
			var prev uint32
			for i, o := range tt.reads {
				o.readAt = time.Unix(int64(i), 0)
				st = nextEpoch(st, o, tt.floor)
				if st.epoch < prev {
					t.Fatalf("read %d: epoch went back from %d to %d", i, prev, st.epoch)
				}
				prev = st.epoch
			}
			if st.sealed != tt.sealed || st.epoch != tt.epoch {
				t.Fatalf("after %d reads: sealed %v epoch %d (%s); want sealed %v epoch %d", len(tt.reads), st.sealed, st.epoch, st.why, tt.sealed, tt.epoch)
			}
		})
	}
}

// TestResponseWithoutHeaderFailsClosed: a response with no header can
// neither grant nor confirm anything.
func TestResponseWithoutHeaderFailsClosed(t *testing.T) {
	a := &Arbiter{home: &cell{cellConfig: cellConfig{metrics: NewMetrics(nil, nil), log: slog.New(slog.DiscardHandler)}}, metrics: NewMetrics(nil, nil)}
	a.home.epoch.Store(&epochState{epoch: 1, clusterID: 0xa, store: 0xa})
	if _, err := a.home.checkHeader(nil); err == nil {
		t.Fatal("checkHeader(nil) passed")
	}
	if _, err := observe(nil, nil, time.Now()); err == nil {
		t.Fatal("an epoch read without a header was accepted")
	}
}
