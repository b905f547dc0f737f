package keyspace

import (
	"sort"
	"testing"
)

// TestOrderKeysSortBySequenceThenSession: order keys sort as their
// sequences, whatever their width, then sessions; OrderSeq reads the
// sequence back and is 0 for any other key.
func TestOrderKeysSortBySequenceThenSession(t *testing.T) {
	want := []string{
		QueueOrderKey("a/b", 0xf, 9),
		QueueOrderKey("a/b", 0x10, 2),
		QueueOrderKey("a/b", 0x10, 3),
		QueueOrderKey("a/b", 1<<40, -1), // a negative session ID sorts as its unsigned form
	}
	got := append([]string(nil), want...)
	sort.Sort(sort.Reverse(sort.StringSlice(got)))
	sort.Strings(got)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sorted %q, want %q", got, want)
		}
	}
	for _, tc := range []struct {
		k    string
		want uint64
	}{
		{want[0], 0xf}, {want[3], 1 << 40},
		{QueueKey("a/b", 7), 0}, {"/q/a/b!zz", 0}, {"", 0},
	} {
		if got := OrderSeq(tc.k); got != tc.want {
			t.Errorf("OrderSeq(%q) = %d, want %d", tc.k, got, tc.want)
		}
	}
	// The ranges of a key and of a key extending it never overlap.
	if r := QueueOrderRange("a/b"); QueueOrderKey("a/b/c", 1, 1)[:len(r)] == r {
		t.Errorf("a/b/c's order key is in a/b's order range")
	}
}
