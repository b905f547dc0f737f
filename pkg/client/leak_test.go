package client_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// crashedHolder takes key for id on a raw session that is never renewed,
// like a process killed with -9 after its grant: the hold lapses with the
// session's TTL (class "fast": 5s). It returns the session id.
func crashedHolder(t *testing.T, env *lockdtest.Env, id, key string) int64 {
	t.Helper()
	lc, _ := env.Raw(t, id)
	s, err := lc.OpenSession(t.Context(), &lockv1.OpenSessionRequest{Ttl: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Acquire(t.Context(), &lockv1.AcquireRequest{SessionId: s.GetSessionId(), Key: key, Class: "fast"}); err != nil {
		t.Fatal(err)
	}
	return s.GetSessionId()
}

// A process that restarts under the same identity before its crashed
// predecessor's session lapsed waits that session out (WaitOutLeak) and
// then holds the key, told once what it waited for.
func TestWaitOutLeakTakesTheKeyOnceTheCrashedSessionLapses(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	crashed := crashedHolder(t, env, lockdtest.Alice, "t/fast/restart")
	c := env.Client(t, lockdtest.Alice)

	// Without the option the refusal is immediate.
	if _, err := c.Acquire(t.Context(), "t/fast/restart", "fast", func(*client.Lock) {}, client.Wait(10*time.Second)); !errors.Is(err, client.ErrLeak) {
		t.Fatalf("acquire without WaitOutLeak: %v; want ErrLeak at once", err)
	}

	var mu sync.Mutex
	var told []client.LeakedHold
	start := time.Now()
	l, err := c.Acquire(t.Context(), "t/fast/restart", "fast", func(*client.Lock) {},
		client.Wait(15*time.Second), client.WaitOutLeak(func(h client.LeakedHold) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, h)
		}))
	if err != nil {
		t.Fatalf("acquire waiting out the crashed session: %v", err)
	}
	defer func() { _ = l.Release(t.Context()) }()
	waited := time.Since(start)
	if !l.CanStart() {
		t.Fatal("granted lock cannot start")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0].Session != crashed || told[0].Key != "t/fast/restart" {
		t.Fatalf("told %+v; want once, session %d", told, crashed)
	}
	if told[0].SessionTTLLeft <= 0 || told[0].SessionTTLLeft > 5*time.Second {
		t.Fatalf("told TTL left %s; want (0, 5s]", told[0].SessionTTLLeft)
	}
	if waited < time.Second || waited > 8*time.Second {
		t.Fatalf("granted after %s; the crashed session (TTL 5s) lapses within that", waited)
	}
}

// With the first holder alive (two processes sharing one identity), the
// wait runs out with an error that is both a wait timeout and a leak.
func TestWaitOutLeakTimesOutWhileTheOtherSessionLives(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	first := env.Client(t, lockdtest.Alice)
	l1, err := first.Acquire(t.Context(), "t/fast/twice", "fast", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l1.Release(t.Context()) }()
	second := env.Client(t, lockdtest.Alice)
	start := time.Now()
	_, err = second.Acquire(t.Context(), "t/fast/twice", "fast", func(*client.Lock) {},
		client.Wait(7*time.Second), client.WaitOutLeak(nil))
	if !errors.Is(err, client.ErrWaitTimeout) || !errors.Is(err, client.ErrLeak) {
		t.Fatalf("second process, same identity, first alive: %v; want ErrWaitTimeout and ErrLeak", err)
	}
	if d := time.Since(start); d < 7*time.Second {
		t.Fatalf("gave up after %s, before the 7s wait (past the first session's 5s TTL: keepalives keep it)", d)
	}
	if !l1.CanStart() {
		t.Fatal("the live first holder lost its lock")
	}
}
