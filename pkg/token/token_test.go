package token

import (
	"errors"
	"math"
	"testing"
)

func TestPackUnpack(t *testing.T) {
	tests := []struct {
		name     string
		epoch    uint32
		revision int64
		want     uint64
		wantErr  bool
	}{
		{name: "first", epoch: 1, revision: 1, want: 1<<48 | 1},
		{name: "max", epoch: MaxEpoch, revision: MaxRevision, want: math.MaxInt64},
		{name: "epoch zero", epoch: 0, revision: 5, wantErr: true},
		{name: "epoch too large", epoch: MaxEpoch + 1, revision: 5, wantErr: true},
		{name: "revision zero", epoch: 1, revision: 0, wantErr: true},
		{name: "revision too large", epoch: 1, revision: MaxRevision + 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Pack(tt.epoch, tt.revision)
			if tt.wantErr {
				if !errors.Is(err, ErrOutOfRange) {
					t.Fatalf("Pack(%d, %d) error = %v, want ErrOutOfRange", tt.epoch, tt.revision, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Pack(%d, %d) = %d, %v; want %d", tt.epoch, tt.revision, got, err, tt.want)
			}
			if int64(got) < 0 {
				t.Fatalf("token %d is negative as int64", got)
			}
			e, r := Unpack(got)
			if e != tt.epoch || r != tt.revision {
				t.Fatalf("Unpack(%d) = %d, %d", got, e, r)
			}
		})
	}
}

func TestEpochDominatesRevision(t *testing.T) {
	low, _ := Pack(2, 1)
	high, _ := Pack(1, MaxRevision)
	if low <= high {
		t.Fatalf("epoch 2 rev 1 (%d) must exceed epoch 1 max rev (%d)", low, high)
	}
}

func BenchmarkPack(b *testing.B) {
	b.ReportAllocs()
	var sink uint64
	for i := 0; b.Loop(); i++ {
		v, _ := Pack(3, int64(i+1))
		sink ^= v
	}
	_ = sink
}
