package proc

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestWaitReadyEndsWhenTheProcessExits: a lockd that exits before it is
// ready (a port taken between FreePorts and its bind) ends the wait at
// once with ErrExited, and its log's last lines are still there to say
// why.
func TestWaitReadyEndsWhenTheProcessExits(t *testing.T) {
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	l := &Lockd{Metrics: "127.0.0.1:" + strconv.Itoa(ports[0])}
	l.Name, l.Bin, l.Log = "lockd", "/bin/sh", filepath.Join(t.TempDir(), "lockd.log")
	l.Args = []string{"-c", "echo starting >&2; echo 'listen tcp: address already in use' >&2; exit 1"}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = l.WaitReady(context.Background(), time.Minute)
	if !errors.Is(err, ErrExited) {
		t.Fatalf("WaitReady = %v, want ErrExited", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("WaitReady took %s after the process exited", d)
	}
	if got, want := l.LogTail(1), "listen tcp: address already in use"; got != want {
		t.Errorf("LogTail(1) = %q, want %q", got, want)
	}
}
