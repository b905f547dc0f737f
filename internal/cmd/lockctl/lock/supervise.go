package lock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/lockd-dev/lockd/pkg/client"
)

// pollEvery is how often the supervisor looks at the lock's health.
const pollEvery = 50 * time.Millisecond

// Supervision runs a started command under a lock, and makes sure the
// command is dead by the lock's local deadline, which passes before the
// store can expire the session:
//
//   - at the first failed keepalive (CanStart false) it schedules SIGTERM
//     Grace before the deadline (at once when less time is left) and
//     SIGKILL at the deadline; a keepalive that recovers before the SIGTERM
//     is sent cancels both;
//   - when lockd says the hold is gone (expired, released by force, epoch
//     advanced) or the deadline passes, it sends SIGKILL at once: another
//     holder may already have the key.
//
// Nothing can stop a command whose own machine is paused past the
// deadline; only a fenced resource rejects its late writes.
type Supervision struct {
	Lock *client.Lock
	// Fenced receives a value when the lock's onFence runs.
	Fenced <-chan struct{}
	// Cmd has been started.
	Cmd *exec.Cmd
	// Group: signal the command's whole process group.
	Group bool
	// Grace is how long before the deadline SIGTERM is sent.
	Grace time.Duration
	// Signals received by lockctl, forwarded to the command.
	Signals <-chan os.Signal
	// Stderr receives one line per decision.
	Stderr io.Writer
	// OnKill, when set, is told when SIGKILL is sent (the gate records it).
	OnKill func(time.Time)
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
		term, kill       *time.Timer
		termC, killC     <-chan time.Time
		termSent, killed bool
		lostC            = s.Lock.Done()
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
	killNow := func() {
		if killed {
			return
		}
		killed = true
		_ = signal(s.Cmd.Process, sigKill, s.Group)
		if s.OnKill != nil {
			s.OnKill(time.Now())
		}
	}
	onLoss := func() {
		if lost != nil {
			return
		}
		err := s.Lock.Err()
		if err == nil || errors.Is(err, client.ErrReleased) {
			return // we release only after the command exits: not a loss
		}
		lost = err
		killNow()
		stopTimers()
		fmt.Fprintf(s.Stderr, "lockctl: lock %s lost while the command ran (%s): killed pid %d\n",
			s.Lock.Key(), lostReason(err), s.Cmd.Process.Pid)
	}
	for {
		select {
		case err := <-done:
			return lost, err
		case <-s.Fenced:
			onLoss()
		case <-lostC:
			lostC = nil
			onLoss()
		case <-tick.C:
			if lost != nil || killed {
				continue
			}
			switch healthy := s.Lock.CanStart(); {
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
			killC = nil
			killNow()
		case sig := <-s.Signals:
			_ = signal(s.Cmd.Process, sig, s.Group)
		}
	}
}

// runLate is the behaviour before the fix, kept only for the release
// gate's control (build tag gate_late_fence): SIGTERM when the lock is
// lost, SIGKILL Grace later, so the command outlives the lease.
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
			_ = signal(s.Cmd.Process, sigKill, s.Group)
			if s.OnKill != nil {
				s.OnKill(time.Now())
			}
		case sig := <-s.Signals:
			_ = signal(s.Cmd.Process, sig, s.Group)
		}
	}
}
