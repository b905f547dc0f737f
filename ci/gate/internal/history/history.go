// Package history records what the gate's workers did: every operation with
// its call and return times on the machine-wide monotonic clock, and its
// outcome. A timeout is an unknown outcome, never a failure.
//
// The files hold fencing tokens of the gate's throwaway cluster; they are
// the data the checker needs and are kept only as gate artifacts.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// Kind is what an operation did.
type Kind string

// Operation kinds.
const (
	// Acquire asks lockd for a key. Ok: granted with Token. Fail: definitely
	// not granted (wait expired, refused).
	Acquire Kind = "acquire"
	// Check is the holder's CanStart() before a unit of work. Ok: true, the
	// holder believes it still holds Token. Fail: false.
	Check Kind = "check"
	// Read reads the fenced store of Key. Ok: Fence and Value hold what
	// was read.
	Read Kind = "read"
	// Write writes Value to the fenced store of Key presenting Token. Ok:
	// accepted. Fail: rejected (stale token).
	Write Kind = "write"
	// Release releases Token's hold. Ok: lockd released it. Fail: the hold
	// was no longer this token's (stale) or was already lost on the client.
	Release Kind = "release"
	// Reenter is an Acquire of a key the worker already held, from a second
	// goroutine, that returned the held Token (a re-entrant hold). Ok: the
	// client said the hold is still its own, as a Check does.
	Reenter Kind = "reenter"
	// Unhold releases one Lock of a re-entrant hold; whether it was the last
	// one is not known, so it says nothing about the hold.
	Unhold Kind = "unhold"
	// Force is the gate's two operators releasing Token's hold by force.
	// Ok: the approval committed.
	Force Kind = "force"
	// Lost is a worker's lock of Token ending (onFence ran); Err says why.
	// After it the worker must not act as the holder.
	Lost Kind = "lost"
	// Gone is the unit of work of Token's hold, run as a supervised child
	// process, having stopped: the child's own last record before it exits,
	// or the supervisor's SIGKILL.
	Gone Kind = "gone"
	// Unprotected is an Acquire that lockd answered with an unprotected
	// grant (made without quorum, token 0), grant SpoolSeq of Arbiter. It is
	// in neither model: such a grant excludes nobody, and the worker writes
	// nothing under it (CanStart is false). The worker holds it until it
	// ends (its Lost, with the reason) or releases it itself
	// (UnprotectedRelease), checking meanwhile that it is still usable
	// (UnprotectedCheck).
	Unprotected Kind = "unprotected"
	// UnprotectedCheck is a holder of an unprotected lock asking whether it
	// may still use it: State() == Safe and no Err. Ok: usable. Fail: not
	// (Err says the state and why).
	UnprotectedCheck Kind = "unprotected-check"
	// UnprotectedRelease is a worker releasing its unprotected lock of Key.
	// Its call ends the hold: the worker no longer acts as a holder. Ok:
	// released; Fail: the lock had ended already (Err says why).
	UnprotectedRelease Kind = "unprotected-release"
	// Mismatch is an Acquire of Key naming Class, a class that does not own
	// the key. Ok: lockd refused it with CLASS_MISMATCH. Fail: lockd
	// refused it for another reason (Reason), or, with no Reason, granted
	// it (Token; the worker releases it at once). Unknown: no answer.
	Mismatch Kind = "mismatch"
	// RetryRelease is a release of an earlier grant sent again after the
	// same session holds the key anew (Token is the earlier grant's): ok
	// when lockd refused it, failed when it freed the newer grant.
	RetryRelease Kind = "retry-release"
)

// Kinds lists every operation kind.
var Kinds = []Kind{Acquire, Check, Read, Write, Release, Reenter, Unhold, Force, Lost, Gone,
	Unprotected, UnprotectedCheck, UnprotectedRelease, Mismatch, RetryRelease}

// Instant records an operation that happens at one moment (Call = Return).
func (r *Recorder) Instant(kind Kind, key string, tok uint64, note string) {
	op := r.Begin(kind, key, tok, 0)
	op.Err = note
	op.Outcome, op.Return = Ok, op.Call
	r.mu.Lock()
	defer r.mu.Unlock()
	r.write(record{Op: op, Done: true})
}

// Outcome is how an operation ended.
type Outcome string

// Outcomes.
const (
	Ok      Outcome = "ok"
	Fail    Outcome = "fail"
	Unknown Outcome = "unknown"
)

// Op is one operation of one worker.
type Op struct {
	Worker  int     `json:"worker"`
	Seq     int64   `json:"seq"`
	Kind    Kind    `json:"kind"`
	Key     string  `json:"key"`
	Token   uint64  `json:"token,omitempty"`
	Value   int64   `json:"value,omitempty"`
	Fence   uint64  `json:"fence,omitempty"`
	Outcome Outcome `json:"outcome"`
	// Call and Return are CLOCK_MONOTONIC nanoseconds, comparable between
	// processes on one machine. Return is 0 for an unknown outcome that never
	// returned.
	Call   int64  `json:"call"`
	Return int64  `json:"return,omitempty"`
	Err    string `json:"err,omitempty"`
	// Arbiter and SpoolSeq name an unprotected grant.
	Arbiter  string `json:"arbiter,omitempty"`
	SpoolSeq uint64 `json:"spoolSeq,omitempty"`
	// Class is the class an Acquire or a Mismatch named; empty when the
	// worker left the class to lockd (the key's own).
	Class string `json:"class,omitempty"`
	// Reason is lockd's reason for a refusal (client.Reason: "HELD",
	// "CLASS_MISMATCH", ...); empty when it gave none.
	Reason string `json:"reason,omitempty"`
	// Session is the holder's session of a Force; Revoke says the
	// force-release also revoked that session, ending its other holds.
	Session int64 `json:"session,omitempty"`
	Revoke  bool  `json:"revoke,omitempty"`
	// Others are, for a Force that revoked the session, the session's other
	// holds when the key was picked, on any cluster: the revoke must end
	// them before the approval answers.
	Others []Held `json:"others,omitempty"`
}

// Held is one hold: its key and token.
type Held struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

// Fault is one injected fault, for the report's timeline.
type Fault struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// Cluster is the etcd cluster a cluster-targeted fault hit (a member
	// kill, an isolation, a restore, ...); empty for the others, and in a
	// run with one cluster.
	Cluster string `json:"cluster,omitempty"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Note    string `json:"note,omitempty"`
	// GrantsClosedUntil, when set, ends the window [Start, GrantsClosedUntil]
	// in which no grant can be made by design: the store is sealed until
	// the epoch advances, and grants then wait out the advance's grace.
	GrantsClosedUntil int64 `json:"grantsClosedUntil,omitempty"`
	// HistoryBehind: before this restore or rebuild destroyed the store's
	// log, no audit tailer had caught up with it (none elected in time), so
	// changes from before it may be lost with the store.
	HistoryBehind bool `json:"historyBehind,omitempty"`
	// Epoch is the epoch a restore or a rebuild ended with (the operators'
	// advance); the history must hold that advance.
	Epoch uint32 `json:"epoch,omitempty"`
	// Err is why the injection failed; a failed fault is not counted.
	Err string `json:"err,omitempty"`
}

// Now reads CLOCK_MONOTONIC: unlike time.Now's monotonic reading, it is the
// same clock in every process on the machine and does not stop while a
// process is stopped.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// record is one line of a history file: an invocation (no outcome yet) or
// its completion.
type record struct {
	Op
	Done bool `json:"done"`
}

// Recorder appends a worker's operations to a file, one JSON line per
// invocation and one per completion, so an operation cut short by a crash
// is still known to have been invoked.
type Recorder struct {
	mu     sync.Mutex
	w      *bufio.Writer
	f      *os.File
	worker int
	seq    int64
}

// Create opens path for a worker's history.
func Create(path string, worker int) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Recorder{f: f, w: bufio.NewWriter(f), worker: worker}, nil
}

// Begin records the invocation of an operation and returns it, with its
// call time set.
func (r *Recorder) Begin(kind Kind, key string, tok uint64, value int64) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	op := Op{Worker: r.worker, Seq: r.seq, Kind: kind, Key: key, Token: tok, Value: value, Call: Now()}
	r.write(record{Op: op})
	return op
}

// End records op's completion with outcome; the return time is now.
func (r *Recorder) End(op Op, outcome Outcome) {
	op.Outcome = outcome
	if outcome != Unknown {
		op.Return = Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.write(record{Op: op, Done: true})
}

func (r *Recorder) write(rec record) {
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	_, _ = r.w.Write(append(b, '\n'))
	_ = r.w.Flush()
}

// Close flushes and closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil {
		return err
	}
	return r.f.Close()
}

// Parse parses one history file. An invocation without a completion becomes
// an Unknown operation.
func Parse(rd io.Reader) ([]Op, error) {
	open := map[int64]Op{}
	var done []Op
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		var rec record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			// A torn last line from a killed process is an open invocation.
			if errors.Is(err, io.ErrUnexpectedEOF) || isSyntax(err) {
				continue
			}
			return nil, fmt.Errorf("history: line %d: %w", line, err)
		}
		if rec.Done {
			delete(open, rec.Seq)
			done = append(done, rec.Op)
			continue
		}
		open[rec.Seq] = rec.Op
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	for _, op := range open {
		op.Outcome = Unknown
		op.Return = 0
		done = append(done, op)
	}
	sort.Slice(done, func(i, j int) bool { return done[i].Call < done[j].Call })
	return done, nil
}

func isSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// ParseFiles reads and merges several workers' files, ordered by call time.
func ParseFiles(paths []string) ([]Op, error) {
	var all []Op
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		ops, err := Parse(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, ops...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Call < all[j].Call })
	return all, nil
}
