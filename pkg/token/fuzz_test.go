package token

import (
	"cmp"
	"errors"
	"strconv"
	"testing"
)

// FuzzTokenPackUnpackRoundTrip: Pack accepts exactly the epochs and
// revisions in range (refusing the rest with ErrOutOfRange), Unpack undoes
// it, a token is positive as an int64, its decimal text form (LOCK_TOKEN,
// the fences' records, lockctl's output) parses back to it, and tokens
// order like their (epoch, revision) pairs. Unpack never panics, and a
// value whose parts are in range packs back to itself.
func FuzzTokenPackUnpackRoundTrip(f *testing.F) {
	f.Add(uint32(1), int64(1), uint32(2), int64(34), uint64(1<<48|1))
	f.Add(uint32(MaxEpoch), int64(MaxRevision), uint32(MaxEpoch+1), int64(0), uint64(1<<64-1))
	f.Fuzz(func(t *testing.T, e1 uint32, r1 int64, e2 uint32, r2 int64, v uint64) {
		inRange := func(e uint32, r int64) bool { return e >= 1 && e <= MaxEpoch && r >= 1 && r <= MaxRevision }
		pack := func(e uint32, r int64) (uint64, bool) {
			tok, err := Pack(e, r)
			switch {
			case inRange(e, r) && err != nil:
				t.Fatalf("Pack(%d, %d) = %v, want a token", e, r, err)
			case !inRange(e, r) && !errors.Is(err, ErrOutOfRange):
				t.Fatalf("Pack(%d, %d) = %d, %v; want ErrOutOfRange", e, r, tok, err)
			case err != nil:
				return 0, false
			}
			if ge, gr := Unpack(tok); ge != e || gr != r {
				t.Fatalf("Unpack(Pack(%d, %d)) = %d, %d", e, r, ge, gr)
			}
			if int64(tok) <= 0 {
				t.Fatalf("Pack(%d, %d) = %d: not positive as an int64", e, r, tok)
			}
			if back, err := strconv.ParseUint(strconv.FormatUint(tok, 10), 10, 64); err != nil || back != tok {
				t.Fatalf("token %d: its decimal form parses to %d, %v", tok, back, err)
			}
			return tok, true
		}
		a, okA := pack(e1, r1)
		b, okB := pack(e2, r2)
		if okA && okB {
			if got, want := cmp.Compare(a, b), cmp.Or(cmp.Compare(e1, e2), cmp.Compare(r1, r2)); got != want {
				t.Fatalf("tokens %d and %d compare %d, their (epoch, revision) pairs (%d, %d) and (%d, %d) compare %d", a, b, got, e1, r1, e2, r2, want)
			}
		}
		e, r := Unpack(v)
		if inRange(e, r) {
			if back, err := Pack(e, r); err != nil || back != v {
				t.Fatalf("Pack(Unpack(%d)) = %d, %v", v, back, err)
			}
		}
	})
}
