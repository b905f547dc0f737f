// Package pausetest is the pause-test kit behind `lockctl fence-test`. It
// shows whether a resource rejects the write of a lock holder that was
// paused past its lease, which is what a fenced class claims, and writes
// the PauseTestResult that class-lint asks of a fenced class.
//
// The procedure, with three holders of one identity:
//
//  1. Holder C acquires <key>-2 and keeps it: its token is the oldest.
//  2. Holder A, a child process (the kit re-executes its own binary with
//     EnvHolder set; see HolderMain), acquires <key> in its own client and
//     session, writes, and releases: that write must be accepted, which
//     shows the write path works from the holder.
//  3. A acquires <key> again, sees CanStart, prepares a write (the
//     resource's Prepare, or the owner's --check) and says it is ready.
//  4. The kit stops A (SIGSTOP) until lockd shows its hold ended, at most
//     the class TTL plus a margin.
//  5. Holder B (the kit) acquires <key>, with a greater token, and writes:
//     accepted.
//  6. B's token is presented again with another value: it must be rejected
//     (a fence that compares with <= accepts it).
//  7. A is resumed (SIGCONT) and performs its prepared write with its old
//     token: it must be rejected.
//  8. The record must hold B's value.
//  9. C writes its own record with its older token: it must be accepted (a
//     fence kept per table instead of per record rejects it).
//
// A holder writes a record at most once per grant (a fence rejects a token
// equal to the one it holds), so A's first write is made under a grant of
// its own, and the stale write is the first write of A's second grant.
//
// What a PASS proves: this resource, reached this way (URL or commands),
// rejected this stale write under this pause, rejected a replayed token,
// and fenced records independently. What it cannot prove: that every write
// path to the resource presents and compares the token; a path that skips
// the fence is simply not exercised. Tokens appear in reports and results
// because they are the test's own evidence; every hold of the test is
// released when the run ends, so they are no longer capabilities.
package pausetest

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/childproc"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/fence"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// DefaultMargin is how long past the class TTL the kit waits for the
// paused holder's hold to end.
const DefaultMargin = 10 * time.Second

// rpcTimeout bounds one call to lockd; holderSlack is how much longer than
// its acquire wait the kit waits for a line from holder A.
const (
	rpcTimeout  = 10 * time.Second
	holderSlack = 30 * time.Second
	pollEvery   = 100 * time.Millisecond
)

// Config is one run of the pause test.
type Config struct {
	// Context is the lockctl context (lockd's address and the caller's
	// credentials). Every holder uses it; holder A gets a copy on its stdin.
	Context *clientconfig.Context
	// Key is the key holders A and B take; holder C takes Key + "-2". Both
	// name records of the resource, which the test writes: use test keys.
	Key string
	// Class is the class, "name" in the key's namespace or "namespace/name".
	Class string
	// Resource says how to reach the resource.
	Resource Spec
	// ResourceName is the class's spec.resource. Empty takes it from lockd;
	// when both are set they must agree.
	ResourceName string
	// SchemaVersion is the resource's schema version label; the result
	// counts only if it equals the class's spec.resourceSchemaVersion.
	SchemaVersion string
	// Now is the clock for the result's ranAt (time.Now when nil).
	Now func() time.Time
	// Progress, when set, receives one line per step (never a token).
	Progress io.Writer
	// Executable is the binary re-executed as holder A (os.Executable when
	// empty); its main must run HolderMain when IsHolder.
	Executable string
	// Margin is added to the class TTL when waiting for the paused
	// holder's hold to end (DefaultMargin when zero).
	Margin time.Duration

	// holderStarted, when set (by tests), runs after holder A starts and
	// before it is sent its task.
	holderStarted func(*holderProc)
}

func (cfg *Config) validate() error {
	switch {
	case cfg.Context == nil:
		return errors.New("pausetest: no lockctl context")
	case cfg.Key == "":
		return errors.New("pausetest: no key")
	case strings.HasSuffix(cfg.Key, "/"):
		return fmt.Errorf("pausetest: key %q is a prefix: give a key", cfg.Key)
	case cfg.Class == "":
		return errors.New("pausetest: no class")
	}
	return cfg.Resource.Validate()
}

// Run runs the pause test and returns its report. The error is non-nil
// only when the test could not start (lockd unreachable, no such class,
// the resource cannot be opened) or was interrupted; a resource that fails
// the test gives a report with OutcomeFail and a nil error. Every hold is
// released and holder A killed before Run returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Margin <= 0 {
		cfg.Margin = DefaultMargin
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("pausetest: cannot find this program to run holder A: %w", err)
		}
		cfg.Executable = exe
	}
	ns, name := splitClass(cfg.Key, cfg.Class)
	rep := &Report{
		Key: cfg.Key, OtherKey: cfg.Key + "-2", ResourceSchemaVersion: cfg.SchemaVersion,
		RanAt: cfg.Now().UTC().Truncate(time.Second), Steps: []Step{},
	}

	opts, err := cfg.Context.Options()
	if err != nil {
		return nil, fmt.Errorf("pausetest: %w", err)
	}
	c, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("pausetest: %w", err)
	}
	defer func() { _ = c.Close() }()
	dctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	resp, err := c.LockService().DescribeClass(dctx, &lockv1.DescribeClassRequest{Namespace: ns, Name: name})
	cancel()
	if err != nil {
		return nil, lockdError(err, "class %s/%s", ns, name)
	}
	lc := resp.GetClass()
	if lc.GetOnQuorumLoss() == "open" {
		return nil, fmt.Errorf("%w: class %s/%s is granted without quorum with token 0, which no fence accepts, so it can never be fenced: "+
			"declare onQuorumLoss: closed before testing its fence", ErrOpenClass, ns, name)
	}
	rep.Class = ClassInfo{
		Namespace: lc.GetNamespace(), Name: lc.GetName(), Enforcement: cmp.Or(lc.GetDeclaredEnforcement(), lc.GetEnforcement()),
		Served:     lc.GetEnforcement(),
		TTLSeconds: lc.GetTtl().AsDuration().Seconds(), Resource: lc.GetResource(),
	}
	if rep.Resource, err = resourceName(ns+"/"+name, lc.GetResource(), cfg.ResourceName); err != nil {
		return nil, err
	}
	res, closeRes, err := cfg.Resource.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer closeRes()
	rep.Target = res.Describe()

	r := &run{cfg: cfg, rep: rep, c: c, res: res, ttl: lc.GetTtl().AsDuration(), values: newValues()}
	if err := r.do(ctx); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pausetest: interrupted: %w", err)
	}
	if rep.Outcome != OutcomeFail {
		rep.Outcome = OutcomePass
		rep.Message = fmt.Sprintf("the resource rejected the paused holder's write with its old token %d after holder B wrote with %d, "+
			"rejected holder B's token presented twice, and accepted an older token on another record", rep.Tokens.A, rep.Tokens.B)
	}
	return rep, nil
}

// ErrOpenClass: the class declares onQuorumLoss: open, so it cannot be
// fenced and its fence test would prove nothing about it.
var ErrOpenClass = errors.New("pausetest: the class declares onQuorumLoss: open")

// splitClass returns the class's namespace and name.
func splitClass(key, class string) (ns, name string) {
	if ns, name, ok := strings.Cut(class, "/"); ok {
		return ns, name
	}
	ns, _, _ = strings.Cut(key, "/")
	return ns, class
}

// resourceName is the name the result records: the class's spec.resource.
func resourceName(class, fromClass, given string) (string, error) {
	switch {
	case fromClass == "" && given == "":
		return "", fmt.Errorf("pausetest: class %s names no spec.resource: give the name the class will declare (--resource-name)", class)
	case fromClass != "" && given != "" && fromClass != given:
		return "", fmt.Errorf("pausetest: class %s guards resource %q, not %q: class-lint counts a result only for the class's spec.resource", class, fromClass, given)
	case fromClass != "":
		return fromClass, nil
	}
	return given, nil
}

// values are what the holders write; a random run ID keeps one run's
// values apart from an earlier run's left in the resource.
type values struct{ aFirst, aStale, b, bReplay, c string }

func newValues() values {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	p := "ft-" + hex.EncodeToString(id) + "-"
	return values{aFirst: p + "a1", aStale: p + "a2", b: p + "b", bReplay: p + "b-replay", c: p + "c"}
}

// run is the state of one Run.
type run struct {
	cfg    Config
	rep    *Report
	c      *client.Client
	res    fence.Resource
	ttl    time.Duration
	values values
}

func (r *run) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "fence-test: "+format+"\n", args...)
	}
}

func noFence(*client.Lock) {}

// do runs the steps; every failure is recorded in the report. The error
// is for what stops the test before it reaches the resource: holder C
// cannot lock, or holder A cannot start.
func (r *run) do(ctx context.Context) error {
	rep, key, other := r.rep, r.cfg.Key, r.rep.OtherKey
	wait := r.ttl + r.cfg.Margin

	// 1. Holder C: the oldest token, on another record.
	r.progress("holder C acquiring %s", other)
	lc, err := r.c.Acquire(ctx, other, r.cfg.Class, noFence, client.Wait(wait))
	if err != nil {
		return lockdError(err, "holder C cannot lock %s", other)
	}
	defer release(lc)
	rep.Tokens.C = lc.Token()
	rep.step(StepOtherKey, StatusOK, fmt.Sprintf("holder C acquired %s with token %d and keeps it: the oldest token of the test", other, lc.Token()))

	// 2. Holder A, in a child process: a first write that must land.
	r.progress("starting holder A (a child process) on %s", key)
	h, err := startHolder(r.cfg.Executable)
	if err != nil {
		return err
	}
	defer h.kill()
	// A child that exits before reading its task (it is not hooked) is a
	// failed holder, reported as one, not a setup error.
	if r.cfg.holderStarted != nil {
		r.cfg.holderStarted(h)
	}
	var ev holderEvent
	err = h.send(holderTask{
		Context: *r.cfg.Context, Key: key, Class: r.cfg.Class, Resource: r.cfg.Resource, Wait: wait,
		FirstValue: r.values.aFirst, SecondValue: r.values.aStale,
	})
	if err == nil {
		ev, err = h.next(ctx, eventFirst, wait+holderSlack)
	}
	switch {
	case err != nil:
		rep.step(StepFirstWrite, StatusFailed, fmt.Sprintf("holder A failed before its first write: %v", err))
	case ev.Outcome == writeRejected:
		rep.step(StepFirstWrite, StatusFailed, fmt.Sprintf("the resource rejected the first holder's write (token %d, the newest for %s): "+
			"the write path does not work from the holder, so a rejection later would prove nothing (%s)", ev.Token, key, ev.Detail))
	case ev.Outcome != writeAccepted:
		rep.step(StepFirstWrite, StatusFailed, fmt.Sprintf("the first holder's write failed with an error, not a rejection: %s", ev.Detail))
	default:
		rep.Tokens.AFirst = ev.Token
		rep.step(StepFirstWrite, StatusOK, fmt.Sprintf("holder A (pid %d, its own client and session) acquired %s with token %d, wrote %q: accepted; released",
			h.cmd.Process.Pid, key, ev.Token, r.values.aFirst))
	}
	if rep.Outcome == OutcomeFail {
		rep.skip("holder A's first write did not land", StepPrepare, StepPause, StepNextHolder, StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}

	// 3. A acquires again and prepares its write.
	ev, err = h.next(ctx, eventReady, wait+holderSlack)
	if err != nil {
		rep.step(StepPrepare, StatusFailed, fmt.Sprintf("holder A did not get ready to write: %v", err))
		rep.skip("holder A is not ready", StepPause, StepNextHolder, StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}
	rep.Tokens.A = ev.Token
	held, aSession, err := r.inspect(ctx)
	if err == nil && !held {
		err = errors.New("lockd shows the key free")
	}
	if err != nil {
		rep.step(StepPrepare, StatusFailed, fmt.Sprintf("cannot see holder A's hold of %s: %s", key, errText(err)))
		rep.skip("holder A's hold is not visible", StepPause, StepNextHolder, StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}
	how := "prepared its write"
	if r.cfg.Resource.Check != "" {
		how = "ran --check, which passed"
	}
	rep.step(StepPrepare, StatusOK, fmt.Sprintf("holder A acquired %s again with token %d, CanStart was true, and it %s", key, ev.Token, how))

	// 4. Pause A past its lease.
	r.progress("holder A is ready: stopping it (SIGSTOP) until its hold ends (class TTL %s)", r.ttl)
	if err := stop(h.cmd.Process); err != nil {
		rep.step(StepPause, StatusFailed, fmt.Sprintf("cannot stop holder A: %v", err))
		rep.skip("holder A was not paused", StepNextHolder, StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}
	took, err := r.waitHoldEnds(ctx, aSession, wait)
	if err != nil {
		rep.step(StepPause, StatusFailed, err.Error())
		rep.skip("holder A's hold did not end", StepNextHolder, StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}
	rep.step(StepPause, StatusOK, fmt.Sprintf("holder A was stopped (SIGSTOP); lockd showed its hold ended after %s (class TTL %s)", took.Round(100*time.Millisecond), r.ttl))

	// 5. Holder B: a newer token, whose write must land.
	r.progress("holder B acquiring %s", key)
	lb, err := r.c.Acquire(ctx, key, r.cfg.Class, noFence, client.Wait(wait))
	if err != nil {
		rep.step(StepNextHolder, StatusFailed, fmt.Sprintf("holder B could not acquire %s after holder A's hold ended: %s", key, errText(err)))
		rep.skip("holder B has no lock", StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}
	defer release(lb)
	rep.Tokens.B = lb.Token()
	if lb.Token() <= rep.Tokens.A {
		rep.step(StepNextHolder, StatusFailed, fmt.Sprintf("lockd granted holder B token %d, not greater than holder A's %d", lb.Token(), rep.Tokens.A))
		rep.skip("the tokens are out of order", StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}
	expect := r.values.b
	switch outcome, detail := classify(writeOnce(ctx, r.res, key, lb.Token(), r.values.b)); outcome {
	case writeAccepted:
		rep.step(StepNextHolder, StatusOK, fmt.Sprintf("holder B acquired %s with token %d, greater than A's %d, and wrote %q: accepted", key, lb.Token(), rep.Tokens.A, r.values.b))
	case writeRejected:
		rep.step(StepNextHolder, StatusFailed, fmt.Sprintf("the resource rejected holder B's write with token %d, the newest for %s: a fence must accept a token greater than every one before it (%s)", lb.Token(), key, detail))
	default:
		rep.step(StepNextHolder, StatusFailed, fmt.Sprintf("holder B's write failed with an error, not a rejection: %s", detail))
	}
	if rep.Outcome == OutcomeFail {
		rep.skip("holder B's write did not land", StepReplay, StepStaleWrite, StepReadBack, StepOtherRecord)
		return nil
	}

	// 6. B's token again: a replayed or duplicated write.
	switch outcome, detail := classify(writeOnce(ctx, r.res, key, lb.Token(), r.values.bReplay)); outcome {
	case writeRejected:
		rep.step(StepReplay, StatusOK, fmt.Sprintf("holder B's token %d presented again with %q: rejected", lb.Token(), r.values.bReplay))
	case writeAccepted:
		expect = r.values.bReplay
		rep.step(StepReplay, StatusFailed, fmt.Sprintf("the resource accepted a second write with holder B's token %d: the fence compares with <= instead of <, so a replayed or duplicated write lands twice", lb.Token()))
	default:
		rep.step(StepReplay, StatusFailed, fmt.Sprintf("the replayed write failed with an error, not a rejection, so the test cannot tell whether the fence refuses an equal token: %s", detail))
	}

	// 7. Resume A: its prepared write carries its old token.
	r.progress("resuming holder A (SIGCONT): it writes with its old token")
	ev, err = r.staleWrite(ctx, h)
	switch {
	case err != nil:
		rep.step(StepStaleWrite, StatusFailed, fmt.Sprintf("holder A failed after it was resumed: %v", err))
	case ev.Outcome == writeRejected:
		rep.step(StepStaleWrite, StatusOK, fmt.Sprintf("holder A resumed and wrote %q with its old token %d: rejected (%s)", r.values.aStale, rep.Tokens.A, ev.Detail))
	case ev.Outcome == writeAccepted:
		msg := fmt.Sprintf("the resource accepted the paused holder's write with its old token %d after holder B wrote with %d: the fence does not compare tokens in the same statement as the write",
			rep.Tokens.A, rep.Tokens.B)
		if r.cfg.Resource.Check != "" {
			msg += " (--check passed before the pause; the write itself must compare the token)"
		}
		rep.step(StepStaleWrite, StatusFailed, msg)
	default:
		rep.step(StepStaleWrite, StatusFailed, fmt.Sprintf("the paused holder's write failed with an error that is not a fence rejection, so the test cannot tell whether the fence works: %s", ev.Detail))
	}

	// 8. The record must hold B's value.
	v, err := r.res.Read(ctx, key)
	switch {
	case err != nil:
		rep.step(StepReadBack, StatusFailed, fmt.Sprintf("cannot read %s back: %v", key, err))
	case v == expect:
		rep.step(StepReadBack, StatusOK, fmt.Sprintf("%s holds holder B's value %q", key, v))
	case v == r.values.aStale:
		rep.step(StepReadBack, StatusFailed, fmt.Sprintf("%s holds the paused holder's value %q, not holder B's %q: the stale write overwrote the newer holder's", key, v, expect))
	default:
		rep.step(StepReadBack, StatusFailed, fmt.Sprintf("%s holds %q, not holder B's value %q", key, v, expect))
	}

	// 9. C's older token on its own record.
	switch outcome, detail := classify(writeOnce(ctx, r.res, other, lc.Token(), r.values.c)); outcome {
	case writeAccepted:
		rep.step(StepOtherRecord, StatusOK, fmt.Sprintf("holder C wrote its own record %s with token %d, older than B's %d: accepted", other, lc.Token(), rep.Tokens.B))
	case writeRejected:
		rep.step(StepOtherRecord, StatusFailed, fmt.Sprintf("the resource rejected holder C's write to its own record %s with token %d, older than holder B's %d on another record: "+
			"the fence is kept per table instead of per record, so holders of different keys fence each other out (%s)", other, lc.Token(), rep.Tokens.B, detail))
	default:
		rep.step(StepOtherRecord, StatusFailed, fmt.Sprintf("holder C's write failed with an error, not a rejection: %s", detail))
	}
	return nil
}

// inspect returns whether the key is held and by which session.
func (r *run) inspect(ctx context.Context) (held bool, session int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := r.c.LockService().Inspect(ctx, &lockv1.InspectRequest{Key: r.cfg.Key})
	if err != nil {
		return false, 0, err
	}
	return resp.GetHeld(), resp.GetHold().GetSessionId(), nil
}

// waitHoldEnds polls lockd until the key is free or held by a session
// other than aSession, for at most bound, and returns how long it took.
func (r *run) waitHoldEnds(ctx context.Context, aSession int64, bound time.Duration) (time.Duration, error) {
	start := time.Now()
	var lastErr error
	for {
		held, s, err := r.inspect(ctx)
		if err == nil && (!held || s != aSession) {
			return time.Since(start), nil
		}
		lastErr = err
		if time.Since(start) >= bound {
			msg := fmt.Sprintf("the hold of %s did not end within %s of pausing holder A (class TTL %s): lockd kept the paused holder's session alive", r.cfg.Key, bound, r.ttl)
			if lastErr != nil {
				msg = fmt.Sprintf("cannot see whether the hold of %s ended within %s of pausing holder A: %s", r.cfg.Key, bound, errText(lastErr))
			}
			return 0, errors.New(msg)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// staleWrite resumes holder A, tells it to write and returns its report.
func (r *run) staleWrite(ctx context.Context, h *holderProc) (holderEvent, error) {
	if err := resume(h.cmd.Process); err != nil {
		return holderEvent{}, fmt.Errorf("cannot resume holder A: %w", err)
	}
	if _, err := io.WriteString(h.stdin, goLine+"\n"); err != nil {
		return holderEvent{}, fmt.Errorf("cannot tell holder A to write: %w", h.exited(err))
	}
	return h.next(ctx, eventWrote, holderSlack)
}

// lockdError wraps an error from lockd: it reads as "pausetest: <what>:
// <status message>" rather than "rpc error: code = …", and keeps the gRPC
// status for status.Code and lockctl's exit codes.
func lockdError(err error, format string, args ...any) error {
	what := fmt.Sprintf("pausetest: "+format, args...)
	if _, ok := status.FromError(err); !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	return &wrappedError{msg: what + ": " + errText(err), err: err}
}

// errText is err's gRPC status message, or err's text.
func errText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// wrappedError is an error with its own text that still unwraps to err.
type wrappedError struct {
	msg string
	err error
}

func (e *wrappedError) Error() string { return e.msg }
func (e *wrappedError) Unwrap() error { return e.err }

// release ends a hold of the kit, whatever the run's context says.
func release(l *client.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	_ = l.Release(ctx)
}

// holderProc is holder A, running.
type holderProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan holderEvent // closed when A's stdout ends
	stderr tailBuffer
	exitCh chan struct{} // closed when A has exited
	err    error         // A's exit status, once exitCh is closed
}

// startHolder starts exe as holder A; send gives it its task.
func startHolder(exe string) (*holderProc, error) {
	h := &holderProc{events: make(chan holderEvent, 4), exitCh: make(chan struct{})}
	h.cmd = exec.Command(exe)
	h.cmd.Env = append(commandEnv(), EnvHolder+"=1")
	h.cmd.Stderr = &h.stderr
	childproc.DieWithParent(h.cmd)
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("pausetest: %w", err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("pausetest: %w", err)
	}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pausetest: start %s: %w", exe, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e holderEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e = holderEvent{Event: eventError, Detail: fmt.Sprintf("holder A printed %q, not an event: does %s run pausetest.HolderMain when %s=1?", sc.Text(), exe, EnvHolder)}
			}
			h.events <- e
		}
		close(h.events)
		h.err = h.cmd.Wait()
		close(h.exitCh)
	}()
	return h, nil
}

// send writes A's task to its stdin. It fails if A has already exited.
func (h *holderProc) send(task holderTask) error {
	b, _ := json.Marshal(task)
	if _, err := h.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("pausetest: send holder A its task: %w", h.exited(err))
	}
	return nil
}

// next waits up to timeout for A's next event, which must be want.
func (h *holderProc) next(ctx context.Context, want string, timeout time.Duration) (holderEvent, error) {
	select {
	case e, ok := <-h.events:
		switch {
		case !ok:
			return holderEvent{}, h.exited(errors.New("holder A exited"))
		case e.Event == eventError:
			return holderEvent{}, errors.New(e.Detail)
		case e.Event != want:
			return holderEvent{}, fmt.Errorf("holder A said %q, expected %q", e.Event, want)
		}
		return e, nil
	case <-time.After(timeout):
		return holderEvent{}, fmt.Errorf("holder A said nothing for %s", timeout)
	case <-ctx.Done():
		return holderEvent{}, ctx.Err()
	}
}

// exited adds A's exit status and the end of its stderr to err, if A has
// exited.
func (h *holderProc) exited(err error) error {
	select {
	case <-h.exitCh:
	case <-time.After(time.Second):
		return err
	}
	msg := err.Error()
	if h.err != nil {
		msg += " (" + h.err.Error() + ")"
	}
	if tail := stderrTail(h.stderr.Bytes()); tail != "" {
		msg += ": stderr: " + tail
	}
	return errors.New(msg)
}

// kill ends holder A if it is still running, stopped or not, and waits.
func (h *holderProc) kill() {
	_ = h.stdin.Close()
	select {
	case <-h.exitCh:
		return
	default:
	}
	_ = h.cmd.Process.Kill()
	for range h.events { // drain, so the reader reaches Wait
	}
	<-h.exitCh
}

// tailBuffer keeps the last bytes written to it; it is safe for
// concurrent use.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4*stderrLimit {
		t.b = append([]byte(nil), t.b[len(t.b)-4*stderrLimit:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what the buffer holds.
func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}
