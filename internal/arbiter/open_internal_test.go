package arbiter

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestOpenPostureDoesNotEndOnAnOldGoodRead: reads that fail fast can open
// the posture while the last good read is still recent; only a read that
// succeeds after the failures ends it, or the posture would flap and end
// every local session on each tick.
func TestOpenPostureDoesNotEndOnAnOldGoodRead(t *testing.T) {
	a := &Arbiter{home: &cell{cellConfig: cellConfig{log: slog.New(slog.DiscardHandler), metrics: NewMetrics(nil, nil), maxEpochAge: 3 * time.Second, monoBase: time.Now()}}, log: slog.New(slog.DiscardHandler), metrics: NewMetrics(nil, nil)}
	a.home.epoch.Store(&epochState{readAt: time.Now()}) // a good read just now
	a.home.open = newOpenState(a, MinOpenAfter, "arbiter", nil, false)
	a.home.open.set(postureOpen)
	a.home.noteEpochRead(errors.New("no leader")) // and a failure since

	a.stepPosture(t.Context())
	if got := a.Posture(); got != "open" {
		t.Fatalf("posture after a failed read, with the last good read recent: %s, want open", got)
	}

	a.home.noteEpochRead(nil) // a read succeeds again
	a.home.epoch.Store(&epochState{readAt: time.Now()})
	a.stepPosture(t.Context())
	if got := a.Posture(); got != "recovering" {
		t.Fatalf("posture after a good read: %s, want recovering", got)
	}
}
