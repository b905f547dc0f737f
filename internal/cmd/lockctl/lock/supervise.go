package lock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/lockd-dev/lockd/pkg/client"
)

// pollEvery is how often the supervisor looks at the lock's health.
const pollEvery = 50 * time.Millisecond

// ErrFencedBeforeStart: the lock was fenced before its command could
// start; the command was not run.
var ErrFencedBeforeStart = errors.New("lock: the lock was lost before the command started")

// Fence is the lock's onFence for a command run under it. Pass OnFence to
// Acquire, then start the command with Start: when the client fences the
// lock (at the local deadline, or when lockd says the hold is gone) OnFence
// SIGKILLs the command at once, from the client's own fence timer, whatever
// else lockctl is doing; another holder may already have the key. A lock
// fenced before Start never runs the command.
type Fence struct {
	mu     sync.Mutex
	proc   *os.Process
	group  bool
	fenced bool
	killed bool
	onKill func(time.Time)
	done   chan struct{}
}

// NewFence returns a Fence; onKill, when set, is told when SIGKILL is sent
// (the release gate records it).
func NewFence(onKill func(time.Time)) *Fence {
	return &Fence{onKill: onKill, done: make(chan struct{})}
}

// OnFence is the onFence callback for client.Acquire.
func (f *Fence) OnFence(*client.Lock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenced {
		return
	}
	f.fenced = true
	close(f.done)
	if lateFence {
		return // the release gate's broken-on-purpose control kills late
	}
	f.killLocked()
}

// Start starts cmd unless the lock has been fenced already
// (ErrFencedBeforeStart). group signals the command's process group.
func (f *Fence) Start(cmd *exec.Cmd, group bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenced {
		return ErrFencedBeforeStart
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	f.proc, f.group = cmd.Process, group
	return nil
}

// fired reports whether OnFence has run.
func (f *Fence) fired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fenced
}

// Done is closed when OnFence has run.
func (f *Fence) Done() <-chan struct{} { return f.done }

// Kill sends SIGKILL to the command now (once).
func (f *Fence) Kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killLocked()
}

func (f *Fence) killLocked() {
	if f.proc == nil || f.killed {
		return
	}
	f.killed = true
	_ = signal(f.proc, sigKill, f.group)
	if f.onKill != nil {
		f.onKill(time.Now())
	}
}

// Supervision runs a command started under a lock (Fence.Start), and makes
// sure the command is dead by the lock's local deadline, which passes
// before the store can expire the session:
//
//   - at the first failed keepalive (the lock in Jeopardy) it schedules SIGTERM
//     Grace before the deadline (at once when less time is left) and
//     SIGKILL at the deadline; a keepalive that recovers before the SIGTERM
//     is sent cancels both;
//   - when the lock is fenced (lockd says the hold is gone: expired,
//     released by force, epoch advanced; or the deadline passed), the
//     Fence has already sent SIGKILL from the lock's onFence: another
//     holder may already have the key.
//
// Nothing can stop a command whose own machine is paused past the
// deadline; only a fenced resource rejects its late writes.
type Supervision struct {
	Lock *client.Lock
	// Fence is the lock's onFence; it started Cmd.
	Fence *Fence
	// Cmd has been started by Fence.Start.
	Cmd *exec.Cmd
	// Group: signal the command's whole process group.
	Group bool
	// Grace is how long before the deadline SIGTERM is sent.
	Grace time.Duration
	// Signals received by lockctl, forwarded to the command.
	Signals <-chan os.Signal
	// Stderr receives one line per decision.
	Stderr io.Writer
}

// Run supervises until the command exits. It returns why the lock was lost
// while the command ran (nil if it was not) and the command's Wait error.
func (s *Supervision) Run() (lost error, waitErr error) {
	done := make(chan error, 1)
	go func() { done <- s.Cmd.Wait() }()
	if lateFence {
		return s.runLate(done)
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var (
		term, kill   *time.Timer
		termC, killC <-chan time.Time
		termSent     bool
	)
	stopTimers := func() {
		for _, t := range []*time.Timer{term, kill} {
			if t != nil {
				t.Stop()
			}
		}
		term, kill, termC, killC = nil, nil, nil, nil
	}
	defer stopTimers()
	fenced := s.Fence.Done()
	// lose records why the lock was lost (once) and says that the command
	// was killed.
	lose := func(why error) {
		fenced = nil
		if lost != nil {
			return
		}
		lost = why
		stopTimers()
		fmt.Fprintf(s.Stderr, "lockctl: lock %s lost while the command ran (%s): killed pid %d\n",
			s.Lock.Key(), lostReason(lost), s.Cmd.Process.Pid)
	}
	// The Fence has already killed the command when it fired.
	onFenced := func() { lose(s.Lock.Err()) }
	for {
		select {
		case err := <-done:
			if fenced != nil && s.Fence.fired() {
				onFenced() // the kill can reach Wait before the fence's channel reaches us
			}
			return lost, err
		case <-fenced:
			onFenced()
		case <-tick.C:
			if lost != nil {
				continue
			}
			// The lock's own state, not CanStart: CanStart is always false
			// for an unprotected lock (granted without quorum), which is
			// nonetheless held until its deadline or until lockd ends it.
			switch healthy := s.Lock.State() == client.Safe; {
			case !healthy && kill == nil:
				dl := s.Lock.Deadline()
				untilKill := max(time.Until(dl), 0)
				untilTerm := max(untilKill-s.Grace, 0)
				term, kill = time.NewTimer(untilTerm), time.NewTimer(untilKill)
				termC, killC = term.C, kill.C
				fmt.Fprintf(s.Stderr, "lockctl: keepalives for %s are failing: SIGTERM to pid %d in %s, SIGKILL at the lock's deadline in %s, unless they recover first\n",
					s.Lock.Key(), s.Cmd.Process.Pid, untilTerm.Round(time.Millisecond), untilKill.Round(time.Millisecond))
			case healthy && kill != nil && !termSent:
				stopTimers()
				fmt.Fprintf(s.Stderr, "lockctl: keepalives for %s recovered: the command goes on\n", s.Lock.Key())
			}
		case <-termC:
			termC, termSent = nil, true
			_ = signal(s.Cmd.Process, sigTerm, s.Group)
		case <-killC:
			// The lock's local deadline passed with keepalives still failing:
			// the lock is lost now, whether or not the client's own fence
			// timer (due at the same instant) has run yet.
			killC = nil
			s.Fence.Kill()
			why := s.Lock.Err()
			if why == nil {
				why = client.ErrDeadline
			}
			lose(why)
		case sig := <-s.Signals:
			_ = signal(s.Cmd.Process, sig, s.Group)
		}
	}
}

// runLate is the behaviour before the fix, kept only for the release
// gate's control (build tag gate_late_fence, which also keeps the Fence
// from killing): SIGTERM when the lock is lost, SIGKILL Grace later, so the
// command outlives the lease.
func (s *Supervision) runLate(done <-chan error) (lost error, waitErr error) {
	var kill <-chan time.Time
	lostC := s.Lock.Done()
	for {
		select {
		case err := <-done:
			return lost, err
		case <-lostC:
			lostC = nil
			if err := s.Lock.Err(); err != nil && !errors.Is(err, client.ErrReleased) {
				lost = err
				_ = signal(s.Cmd.Process, sigTerm, s.Group)
				kill = time.After(s.Grace)
			}
		case <-kill:
			kill = nil
			s.Fence.Kill()
		case sig := <-s.Signals:
			_ = signal(s.Cmd.Process, sig, s.Group)
		}
	}
}
