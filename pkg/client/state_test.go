package client_test

import (
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// waitState polls l.State() until it is want or within runs out, and
// returns what it last saw.
func waitState(l *client.Lock, want client.State, within time.Duration) client.State {
	end := time.Now().Add(within)
	for {
		got := l.State()
		if got == want || time.Now().After(end) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLockInJeopardyIsVisibleAndRecovers: a keepalive that goes unanswered
// puts the lock in Jeopardy (CanStart false, Err nil, the deadline still
// ahead) rather than leaving it Safe or calling it lost; an answered
// keepalive makes it Safe again; past the deadline it is Ended with
// ErrDeadline.
func TestLockInJeopardyIsVisibleAndRecovers(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy := proxyTo(t, env.Addr)
	c := lockdtest.ClientAt(t, proxy.Addr(), lockdtest.Alice)
	fenced := make(chan struct{})
	l, err := c.Acquire(t.Context(), "t/fast/jeopardy", "fast", func(*client.Lock) { close(fenced) }) // TTL 5s
	if err != nil {
		t.Fatal(err)
	}
	if s := l.State(); s != client.Safe || !l.CanStart() {
		t.Fatalf("a new lock is %v (CanStart %v), want safe", s, l.CanStart())
	}

	proxy.Stall(tcpproxy.Both) // keepalives go unanswered
	if s := waitState(l, client.Jeopardy, 4*time.Second); s != client.Jeopardy {
		t.Fatalf("with keepalives unanswered the lock is %v, want jeopardy", s)
	}
	if l.CanStart() || l.Err() != nil || l.RemainingTTL() <= 0 {
		t.Fatalf("in jeopardy: CanStart %v, Err %v, RemainingTTL %v; want false, nil, > 0", l.CanStart(), l.Err(), l.RemainingTTL())
	}

	proxy.Resume()
	if s := waitState(l, client.Safe, 4*time.Second); s != client.Safe {
		t.Fatalf("after keepalives were answered again the lock is %v, want safe (Err %v)", s, l.Err())
	}

	proxy.Stall(tcpproxy.Both)
	if s := waitState(l, client.Jeopardy, 4*time.Second); s != client.Jeopardy {
		t.Fatalf("second stall: the lock is %v, want jeopardy first", s)
	}
	if s := waitState(l, client.Ended, 10*time.Second); s != client.Ended {
		t.Fatalf("past the deadline the lock is %v, want ended", s)
	}
	if l.Err() != client.ErrDeadline {
		t.Fatalf("ended with %v, want ErrDeadline", l.Err())
	}
	<-fenced
	proxy.Resume()
}

func TestStateString(t *testing.T) {
	for s, want := range map[client.State]string{client.Safe: "safe", client.Jeopardy: "jeopardy", client.Ended: "ended", 0: "State(0)"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(s), got, want)
		}
	}
}
