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

// TestFreePortsAreBelowTheEphemeralRange: a port from the kernel's
// ephemeral range can be taken by any outgoing connection before the
// process binds it (the gate saw a lockd exit "address already in use"
// that way); FreePorts picks below the range, where only a bind takes one.
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low <= minPort {
		t.Fatalf("ephemeral range starts at %d; this test needs /proc/sys/net/ipv4/ip_local_port_range above %d", low, minPort)
	}
	ports, err := FreePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < minPort || p >= low || seen[p] {
			t.Fatalf("port %d: want distinct ports in [%d, %d)", p, minPort, low)
		}
		seen[p] = true
	}
}
