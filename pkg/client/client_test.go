package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// stallProxy forwards TCP to target until Stall is called; then it keeps
// the connections open but forwards nothing, like a black-holed path.
type stallProxy struct {
	l       net.Listener
	target  string
	stalled atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{l: l, target: target}
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
	return p
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.stalled.Load() {
			time.Sleep(10 * time.Millisecond) // hold the bytes: forward nothing
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

func (p *stallProxy) Addr() string { return p.l.Addr().String() }

// TestStalledKeepAlivePathFencesBeforeServerExpiry: when the path to lockd
// stops forwarding, CanStart turns false at the first unanswered keepalive,
// onFence runs at the local deadline, and both happen before etcd expires
// the session's lease (observed as the hold key's deletion).
func TestStalledKeepAlivePathFencesBeforeServerExpiry(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy := newStallProxy(t, env.Addr)
	c := lockdtest.ClientAt(t, proxy.Addr(), lockdtest.Alice)

	fenced := make(chan time.Time, 1)
	l, err := c.Acquire(t.Context(), "t/fast/stall", "fast", func(*client.Lock) { fenced <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	if !l.CanStart() || l.RemainingTTL() <= 0 || l.Token() == 0 {
		t.Fatalf("fresh lock: CanStart %v remaining %s", l.CanStart(), l.RemainingTTL())
	}
	time.Sleep(3 * time.Second) // keepalives flow; the lock outlives one TTL/3
	if !l.CanStart() {
		t.Fatal("CanStart false while keepalives flow")
	}

	// Watch the hold from the server side, not through the proxy.
	expired := make(chan time.Time, 1)
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wch := env.Backend.Client.Watch(wctx, "/l/t/fast/stall", clientv3.WithFilterPut())
	go func() {
		for resp := range wch {
			if len(resp.Events) > 0 {
				expired <- time.Now()
				return
			}
		}
	}()

	stalledAt := time.Now()
	proxy.stalled.Store(true)
	var cantStart time.Time
	for cantStart.IsZero() {
		if !l.CanStart() {
			cantStart = time.Now()
		}
		if time.Since(stalledAt) > 10*time.Second {
			t.Fatal("CanStart never turned false")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var fenceAt, expiryAt time.Time
	select {
	case fenceAt = <-fenced:
	case <-time.After(15 * time.Second):
		t.Fatal("onFence never ran")
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after onFence")
	}
	select {
	case expiryAt = <-expired:
	case <-time.After(15 * time.Second):
		t.Fatal("the server never expired the hold")
	}
	t.Logf("after the stall: CanStart false at +%s, onFence at +%s, server expiry at +%s",
		cantStart.Sub(stalledAt).Round(time.Millisecond), fenceAt.Sub(stalledAt).Round(time.Millisecond),
		expiryAt.Sub(stalledAt).Round(time.Millisecond))
	if !cantStart.Before(fenceAt) || !fenceAt.Before(expiryAt) {
		t.Fatalf("order broken: CanStart false %s, onFence %s, expiry %s", cantStart, fenceAt, expiryAt)
	}
	if l.Err() != client.ErrDeadline {
		t.Fatalf("lost reason %v, want ErrDeadline", l.Err())
	}
}

func TestReentrantAcquireCountsLocally(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice)
	nofence := func(*client.Lock) {}
	l1, err := c.Acquire(t.Context(), "t/re", "std", nofence)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(t.Context(), "t/re", "std", nofence)
	if err != nil || l2.Token() != l1.Token() {
		t.Fatalf("nested acquire: %v (same hold %v)", err, err == nil && l2.Token() == l1.Token())
	}
	if err := l2.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, _ := env.Backend.Client.Get(t.Context(), "/l/t/re"); len(got.Kvs) != 1 {
		t.Fatal("inner release reached lockd")
	}
	// Each acquirer has its own Lock: the released one has ended, the
	// other still holds.
	if l2.CanStart() || l2.Err() != client.ErrReleased || !l1.CanStart() || l1.Err() != nil {
		t.Fatalf("after the inner release: inner CanStart %v Err %v, outer CanStart %v Err %v",
			l2.CanStart(), l2.Err(), l1.CanStart(), l1.Err())
	}
	if err := l1.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, _ := env.Backend.Client.Get(t.Context(), "/l/t/re"); len(got.Kvs) != 0 {
		t.Fatal("outer release did not reach lockd")
	}
	if _, err := c.Acquire(t.Context(), "t/re", "std", nil); err != client.ErrNoFence {
		t.Fatalf("acquire without onFence: %v", err)
	}
	// Holds of one TTL share one session.
	a, _ := c.Acquire(t.Context(), "t/share-a", "std", nofence)
	b, _ := c.Acquire(t.Context(), "t/share-b", "std", nofence)
	ra, _ := env.Backend.Client.Get(t.Context(), "/l/t/share-a")
	rb, _ := env.Backend.Client.Get(t.Context(), "/l/t/share-b")
	if a == nil || b == nil || ra.Kvs[0].Lease != rb.Kvs[0].Lease {
		t.Fatal("holds of one TTL are not on one session lease")
	}
}

// TestEpochAdvanceLosesOldHolds: an epoch advance deletes every hold while
// the sessions live on; the holder learns it from its next keepalive answer
// (ErrEpoch, onFence runs), and ReleaseHeld says the hold was not held.
func TestEpochAdvanceLosesOldHolds(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice)
	fenced := make(chan error, 1)
	l, err := c.Acquire(t.Context(), "t/fast/epoch", "fast", func(l *client.Lock) { fenced <- l.Err() })
	if err != nil {
		t.Fatal(err)
	}
	env.AdvanceEpoch(t, l.Epoch(), "test")
	select {
	case err := <-fenced:
		if !errors.Is(err, client.ErrEpoch) {
			t.Fatalf("lost with %v, want ErrEpoch", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder never learned that the epoch advanced")
	}
	if l.CanStart() {
		t.Fatal("CanStart after the epoch advanced")
	}
	if held, err := l.ReleaseHeld(t.Context()); held || !errors.Is(err, client.ErrEpoch) {
		t.Fatalf("ReleaseHeld = %v, %v; want false, ErrEpoch", held, err)
	}
}

// reset drops every proxied connection and forwards again.
func (p *stallProxy) reset() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.stalled.Store(false)
}

// TestKeepAliveRecoversAfterTheStreamBreaks: a keepalive left unanswered on
// a stream that then breaks must not keep CanStart false once keepalives
// on a new stream are answered again (found by the release gate: after a
// restore, sessions stayed degraded and every new lock was unusable).
func TestKeepAliveRecoversAfterTheStreamBreaks(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	proxy := newStallProxy(t, env.Addr)
	c := lockdtest.ClientAt(t, proxy.Addr(), lockdtest.Alice)
	l, err := c.Acquire(t.Context(), "t/fast/recover", "fast", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	proxy.stalled.Store(true)
	lockdtest.WaitFor(t, 5*time.Second, "CanStart false while stalled", func() bool { return !l.CanStart() })
	proxy.reset()
	lockdtest.WaitFor(t, 5*time.Second, "CanStart true once keepalives are answered again", l.CanStart)
	if l.Err() != nil {
		t.Fatalf("lock lost: %v", l.Err())
	}
}

// TestClockStepForwardFencesAtOnce covers clock faults the release gate
// cannot inject (Go reads the monotonic clock through the vDSO, so
// libfaketime cannot move it): through the injected clock, a forward step
// past the deadline turns CanStart false at once, and onFence runs by the
// next keepalive tick (TTL/3). A step cannot extend a lock: the deadline
// only moves with answered keepalives.
func TestClockStepForwardFencesAtOnce(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	var step atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
	c := env.Client(t, lockdtest.Alice, client.WithClock(clock))
	fenced := make(chan error, 1)
	l, err := c.Acquire(t.Context(), "t/clock", "std", func(l *client.Lock) { fenced <- l.Err() })
	if err != nil {
		t.Fatal(err)
	}
	if !l.CanStart() {
		t.Fatal("CanStart false right after the grant")
	}
	step.Store(int64(15 * time.Second)) // the class TTL
	if l.CanStart() {
		t.Fatal("CanStart still true after the clock stepped past the deadline")
	}
	select {
	case err := <-fenced:
		if !errors.Is(err, client.ErrDeadline) {
			t.Fatalf("fenced with %v, want ErrDeadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("onFence did not run after the clock stepped past the deadline")
	}
}

// TestReentrantAcquireNamingAnotherClassIsRefused: re-entering a held key
// shares its hold, which has the class lockd granted it under; naming
// another class is refused as lockd refuses it (CLASS_MISMATCH, definite),
// also for a class of the same TTL, whose session the hold is on.
func TestReentrantAcquireNamingAnotherClassIsRefused(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	c := env.Client(t, lockdtest.Alice)
	l, err := c.Acquire(t.Context(), "t/fast/re", "", func(*client.Lock) {})
	if err != nil || l.Class() != "t/fast" {
		t.Fatalf("acquire: %v (class %v)", err, l)
	}
	for _, class := range []string{"fifo", "std"} { // fifo: 5s like fast; std: 15s
		_, err := c.Acquire(t.Context(), "t/fast/re", class, func(*client.Lock) {})
		if !errors.Is(err, client.ErrClassMismatch) || client.Reason(err) != "CLASS_MISMATCH" || !client.Definite(err) {
			t.Errorf("re-entry naming %s: %v; want a definite CLASS_MISMATCH", class, err)
		}
	}
	for _, class := range []string{"", "fast", "t/fast"} {
		again, err := c.Acquire(t.Context(), "t/fast/re", class, func(*client.Lock) {})
		if err != nil || again.Token() != l.Token() {
			t.Errorf("re-entry naming %q: %v; want the same hold", class, err)
			continue
		}
		_ = again.Release(t.Context())
	}
}
