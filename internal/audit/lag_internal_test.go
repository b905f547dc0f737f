package audit

import (
	"testing"
	"time"
)

// TestLagCountsARestoredStoreAsUnread: a probe that finds the store under a
// new cluster ID (restored from a snapshot, so its revisions are below the
// history's) reports all of it as unread, under its own cluster ID, until
// the tailer has read it. The lag gauges once compared the restored
// store's revision with the old store's stored one and said 0 (under the
// old store's cluster ID), and the release gate, waiting for the history
// to catch up before its next restore, went on while nothing of the
// restored store had been read.
func TestLagCountsARestoredStoreAsUnread(t *testing.T) {
	const old, restored = 0xa, 0xb
	tl := &Tailer{}
	tl.setStored(old, 500)
	at := time.Unix(1000, 0)
	type lag struct {
		rev  int64
		for_ time.Duration
	}
	probe := func(cluster uint64, head int64, after time.Duration) lag {
		r, f := tl.lag(cluster, head, at.Add(after))
		return lag{r, f}
	}
	steps := []struct {
		name    string
		cluster uint64
		head    int64
		after   time.Duration
		want    lag
	}{
		{"the old store, all read", old, 500, 0, lag{0, 0}},
		{"restored: nothing of it read", restored, 40, time.Second, lag{40, 0}},
		{"still unread a second later", restored, 41, 2 * time.Second, lag{41, time.Second}},
	}
	for _, s := range steps {
		if got := probe(s.cluster, s.head, s.after); got != s.want {
			t.Fatalf("%s: lag %+v; want %+v", s.name, got, s.want)
		}
	}
	tl.setStored(restored, 41)
	if got := probe(restored, 41, 3*time.Second); got != (lag{0, 0}) {
		t.Fatalf("the restored store read: lag %+v; want none", got)
	}
	if _, cluster, _, _ := tl.probed(); cluster != restored {
		t.Fatalf("probed cluster %x; want the restored store's %x", cluster, restored)
	}
}
