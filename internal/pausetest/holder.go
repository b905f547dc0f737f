package pausetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/fence"
)

// EnvHolder marks a process started by the kit as holder A. A program that
// embeds the kit (lockctl, and the tests of packages that run it) checks
// IsHolder first thing in main and runs HolderMain instead of itself.
const EnvHolder = "LOCKCTL_PAUSETEST_HOLDER"

// IsHolder reports whether this process is the kit's holder A.
func IsHolder() bool { return os.Getenv(EnvHolder) == "1" }

// holderTask is what the kit sends holder A, one JSON line on its stdin.
type holderTask struct {
	// Context is the lockctl context: A uses the kit's identity, in its own
	// client and session.
	Context  clientconfig.Context `json:"context"`
	Key      string               `json:"key"`
	Class    string               `json:"class"`
	Resource Spec                 `json:"resource"`
	// Wait bounds A's acquires.
	Wait time.Duration `json:"wait"`
	// FirstValue is written under A's first grant, SecondValue under the
	// second, after the kit says "go".
	FirstValue  string `json:"first_value"`
	SecondValue string `json:"second_value"`
}

// goLine is what the kit sends holder A, after resuming it, to make it
// perform its prepared write.
const goLine = "go"

// Events holder A reports, one JSON line each on its stdout.
const (
	eventFirst = "first" // the first write's outcome, with the first grant's token
	eventReady = "ready" // the second write is prepared, with the second grant's token
	eventWrote = "wrote" // the prepared write's outcome
	eventError = "error" // A could not go on; Detail says why
)

// Write outcomes.
const (
	writeAccepted = "accepted"
	writeRejected = "rejected"
	writeError    = "error"
)

// holderEvent is one line from holder A.
type holderEvent struct {
	Event   string `json:"event"`
	Token   uint64 `json:"token,string,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// HolderMain runs holder A: it reads its task from stdin, acquires the key,
// writes under that grant and releases it, acquires the key again, checks
// CanStart, prepares a write, says "ready" on stdout and waits for "go" on
// stdin, then performs the prepared write with the token it had before it
// was paused, whatever the lock says by then: that is the stale write the
// fence must reject. It returns the process exit code.
func HolderMain() int {
	return holderMain(os.Stdin, os.Stdout)
}

func holderMain(stdin io.Reader, stdout io.Writer) int {
	in := bufio.NewReader(stdin)
	enc := json.NewEncoder(stdout)
	say := func(e holderEvent) bool { return enc.Encode(e) == nil }
	fail := func(format string, args ...any) int {
		say(holderEvent{Event: eventError, Detail: fmt.Sprintf(format, args...)})
		return 1
	}

	line, err := in.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return fail("pausetest: holder: no task on stdin: %v", err)
	}
	var task holderTask
	if err := json.Unmarshal(line, &task); err != nil {
		return fail("pausetest: holder: bad task: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*task.Wait+2*time.Minute)
	defer cancel()

	res, closeRes, err := task.Resource.Open(ctx)
	if err != nil {
		return fail("%v", err)
	}
	defer closeRes()
	opts, err := task.Context.Options()
	if err != nil {
		return fail("pausetest: holder: %v", err)
	}
	c, err := client.New(opts...)
	if err != nil {
		return fail("pausetest: holder: %v", err)
	}
	defer func() { _ = c.Close() }()
	acquire := func() (*client.Lock, error) {
		// onFence does nothing on purpose: A is the holder that does not
		// notice it was paused.
		return c.Acquire(ctx, task.Key, task.Class, func(*client.Lock) {}, client.Wait(task.Wait))
	}

	// The first grant: a write that must be accepted, which shows the
	// holder's write path works from this process.
	l, err := acquire()
	if err != nil {
		return fail("pausetest: holder A cannot acquire %s: %s", task.Key, errText(err))
	}
	outcome, detail := classify(writeOnce(ctx, res, task.Key, l.Token(), task.FirstValue))
	if !say(holderEvent{Event: eventFirst, Token: l.Token(), Outcome: outcome, Detail: detail}) {
		return 1
	}
	if err := l.Release(ctx); err != nil {
		return fail("pausetest: holder A cannot release %s: %s", task.Key, errText(err))
	}
	if outcome != writeAccepted {
		return 0
	}

	// The second grant: decide to write, then wait, paused, for "go".
	l, err = acquire()
	if err != nil {
		return fail("pausetest: holder A cannot acquire %s again: %s", task.Key, errText(err))
	}
	if !l.CanStart() {
		return fail("pausetest: holder A: CanStart is false right after acquiring %s", task.Key)
	}
	w, err := res.Prepare(ctx, task.Key, l.Token())
	if err != nil {
		return fail("its write could not be prepared while it held the lock: %v", err)
	}
	if !say(holderEvent{Event: eventReady, Token: l.Token()}) {
		return 1
	}
	line, err = in.ReadBytes('\n')
	if strings.TrimSpace(string(line)) != goLine {
		return fail("pausetest: holder A: expected %q on stdin, got %q (%v)", goLine, line, err)
	}
	outcome, detail = classify(w(ctx, task.SecondValue))
	if !say(holderEvent{Event: eventWrote, Outcome: outcome, Detail: detail}) {
		return 1
	}
	return 0
}

// writeOnce prepares and performs one write. A Prepare that fails is the
// write's failure (a check that refuses is a rejection).
func writeOnce(ctx context.Context, res fence.Resource, key string, token uint64, value string) error {
	w, err := res.Prepare(ctx, key, token)
	if err != nil {
		return err
	}
	return w(ctx, value)
}

// classify sorts a write's error: nil is accepted, fence.ErrStale is
// rejected, anything else is an error that says nothing about the fence.
func classify(err error) (outcome, detail string) {
	switch {
	case err == nil:
		return writeAccepted, ""
	case errors.Is(err, fence.ErrStale):
		return writeRejected, err.Error()
	default:
		return writeError, err.Error()
	}
}
