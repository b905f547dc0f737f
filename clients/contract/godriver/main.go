// Command godriver is the client contract suite's driver for the Go client
// (pkg/client): it reads steps as JSON lines on stdin and writes results
// and events as JSON lines on stdout (the protocol is in package contract's
// doc). Each step runs on its own goroutine, so a waiting acquire does not
// hold up the steps after it.
//
// -late-fence D is the suite's control: it reports every loss D after the
// library reported it, as a library with the old grace would fence. The
// suite's deadline case must fail against it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/client"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, in io.Reader, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("godriver", flag.ContinueOnError)
	fs.SetOutput(errOut)
	late := fs.Duration("late-fence", 0, "CONTROL: report each loss this long after the library did (the old grace)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	d := &driver{out: json.NewEncoder(out), late: *late, start: time.Now(),
		clients: map[string]*client.Client{}, locks: map[string]*client.Lock{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var steps sync.WaitGroup
	for sc.Scan() {
		var s step
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			fmt.Fprintf(errOut, "godriver: bad step %q: %v\n", sc.Text(), err)
			return 2
		}
		if s.Op == "quit" {
			break
		}
		steps.Add(1)
		go func() { defer steps.Done(); d.reply(s.ID, d.do(s)) }()
	}
	steps.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.clients {
		_ = c.Close()
	}
	return 0
}

// step is one request of the suite.
type step struct {
	ID       int64   `json:"id"`
	Op       string  `json:"op"`
	Client   string  `json:"client"`
	Identity string  `json:"identity"`
	Addr     string  `json:"addr"`
	Lock     string  `json:"lock"`
	Key      string  `json:"key"`
	Class    string  `json:"class"`
	Wait     float64 `json:"wait"`
	Reason   string  `json:"reason"`
	Code     string  `json:"code"`
	Message  string  `json:"message"`
}

type driver struct {
	late  time.Duration
	start time.Time

	outMu sync.Mutex
	out   *json.Encoder

	mu      sync.Mutex
	clients map[string]*client.Client
	locks   map[string]*client.Lock
}

// mono is the driver's monotonic clock, in seconds from its start.
func (d *driver) mono() float64 { return time.Since(d.start).Seconds() }

// monoOf is t (a reading with a monotonic clock) on the driver's clock.
func (d *driver) monoOf(t time.Time) float64 { return t.Sub(d.start).Seconds() }

func (d *driver) emit(v any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	_ = d.out.Encode(v)
}

type outcome struct {
	result map[string]any
	err    map[string]any
}

func (d *driver) reply(id int64, o outcome) {
	if o.err != nil {
		d.emit(map[string]any{"id": id, "ok": false, "error": o.err})
		return
	}
	d.emit(map[string]any{"id": id, "ok": true, "result": o.result})
}

func ok(r map[string]any) outcome { return outcome{result: r} }

func failed(err error) outcome { return outcome{err: describe(err)} }

func bad(format string, args ...any) outcome {
	return outcome{err: map[string]any{"type": "DriverError", "message": fmt.Sprintf(format, args...)}}
}

func (d *driver) client(name string) *client.Client {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.clients[name]
}

func (d *driver) lock(name string) *client.Lock {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.locks[name]
}

func (d *driver) do(s step) outcome {
	switch s.Op {
	case "clock":
		return ok(map[string]any{"mono": d.mono()})
	case "open":
		c, err := client.New(client.WithTarget(s.Addr), client.WithInsecureIdentity(s.Identity))
		if err != nil {
			return failed(err)
		}
		d.mu.Lock()
		d.clients[s.Client] = c
		d.mu.Unlock()
		return ok(nil)
	case "close":
		c := d.client(s.Client)
		if c == nil {
			return bad("no client %q", s.Client)
		}
		return errOr(c.Close(), nil)
	case "acquire":
		return d.acquire(s)
	case "decode":
		return ok(map[string]any{"error": describe(decodeReason(s.Reason, s.Code, s.Message))})
	}
	l := d.lock(s.Lock)
	if l == nil {
		return bad("no lock %q for %s", s.Lock, s.Op)
	}
	switch s.Op {
	case "release":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		held, err := l.ReleaseHeld(ctx)
		return errOr(err, map[string]any{"held": held})
	case "can_start":
		return ok(map[string]any{"value": l.CanStart()})
	case "remaining_ttl":
		return ok(map[string]any{"seconds": l.RemainingTTL().Seconds()})
	case "token":
		return ok(map[string]any{"token": strconv.FormatUint(l.Token(), 10), "epoch": l.Epoch()})
	case "deadline":
		return ok(map[string]any{"mono": d.monoOf(l.Deadline())})
	case "state":
		r := map[string]any{"state": l.State().String()}
		if err := l.Err(); err != nil {
			r["lost"] = lost(err)
		}
		return ok(r)
	}
	return bad("unknown op %q", s.Op)
}

func errOr(err error, r map[string]any) outcome {
	if err != nil {
		return failed(err)
	}
	return ok(r)
}

func (d *driver) acquire(s step) outcome {
	c := d.client(s.Client)
	if c == nil {
		return bad("no client %q", s.Client)
	}
	wait := time.Duration(s.Wait * float64(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), wait+30*time.Second)
	defer cancel()
	name := s.Lock
	l, err := c.Acquire(ctx, s.Key, s.Class, func(l *client.Lock) { d.fenced(name, l) }, client.Wait(wait))
	if err != nil {
		return failed(err)
	}
	d.mu.Lock()
	d.locks[name] = l
	d.mu.Unlock()
	return ok(map[string]any{
		"token": strconv.FormatUint(l.Token(), 10), "epoch": l.Epoch(), "class": l.Class(),
		"unprotected": l.Unprotected(), "can_start": l.CanStart(), "remaining_ttl": l.RemainingTTL().Seconds(),
	})
}

// fenced is every lock's onFence: it reports the loss, with the time the
// holder was told on the driver's clock. Under -late-fence it first waits.
func (d *driver) fenced(name string, l *client.Lock) {
	deadline := d.monoOf(l.Deadline())
	if d.late > 0 {
		time.Sleep(d.late)
		deadline += d.late.Seconds()
	}
	d.emit(map[string]any{"event": "fenced", "lock": name, "mono": d.mono(), "deadline": deadline,
		"can_start": l.CanStart(), "lost": lost(l.Err())})
}

// decodeReason is what the client makes of an error lockd answers with
// reason (none when empty) and code.
func decodeReason(reason, code, msg string) error {
	c := codes.Unknown
	if code != "" {
		if err := c.UnmarshalJSON([]byte(strconv.Quote(code))); err != nil {
			return err
		}
	}
	st := status.New(c, msg)
	if reason != "" {
		var err error
		if st, err = st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "lockd.dev"}); err != nil {
			return err
		}
	}
	return client.Decode(st.Err())
}

// sentinels are the client's errors for lockd's reasons, most specific
// first (ErrWaitTimeout also matches ErrHeld).
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrWaitTimeout", client.ErrWaitTimeout}, {"ErrHeld", client.ErrHeld}, {"ErrLeak", client.ErrLeak},
	{"ErrSealed", client.ErrSealed}, {"ErrEpochGrace", client.ErrEpochGrace}, {"ErrSessionTTL", client.ErrSessionTTL},
	{"ErrSessionNotFound", client.ErrSessionNotFound}, {"ErrStaleToken", client.ErrStaleToken}, {"ErrDenied", client.ErrDenied},
	{"ErrInvalid", client.ErrInvalid}, {"ErrUnavailable", client.ErrUnavailable}, {"ErrQuota", client.ErrQuota},
	{"ErrRateLimited", client.ErrRateLimited}, {"ErrSuperseded", client.ErrSuperseded}, {"ErrNotOperator", client.ErrNotOperator},
	{"ErrSamePerson", client.ErrSamePerson}, {"ErrHoldChanged", client.ErrHoldChanged}, {"ErrEpochMoved", client.ErrEpochMoved},
	{"ErrEpochExhausted", client.ErrEpochExhausted}, {"ErrNotHeld", client.ErrNotHeld}, {"ErrRequestNotFound", client.ErrRequestNotFound},
	{"ErrInternal", client.ErrInternal}, {"ErrHistoryOff", client.ErrHistoryOff}, {"ErrNoQuorumSession", client.ErrNoQuorumSession},
	{"ErrClassMismatch", client.ErrClassMismatch}, {"ErrNoClass", client.ErrNoClass}, {"ErrOpenGrace", client.ErrOpenGrace},
	{"ErrWrongRegion", client.ErrWrongRegion}, {"ErrMoving", client.ErrMoving}, {"ErrPlanState", client.ErrPlanState},
}

// describe is an error as the protocol reports it. Its message is the
// library's, which never holds a token.
func describe(err error) map[string]any {
	var kinds []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			kinds = append(kinds, s.name)
		}
	}
	typ := "Error"
	switch {
	case len(kinds) > 0:
		typ = kinds[0]
	case errors.Is(err, context.DeadlineExceeded):
		typ = "context.DeadlineExceeded"
	}
	return map[string]any{"type": typ, "kinds": kinds, "reason": client.Reason(err), "definite": client.Definite(err),
		"message": err.Error()}
}

// lost is why a lock ended, as the protocol names it.
func lost(err error) map[string]any {
	kinds := []struct {
		kind string
		err  error
	}{
		{"deadline", client.ErrDeadline}, {"expired", client.ErrExpired}, {"forced", client.ErrForced},
		{"epoch", client.ErrEpoch}, {"session_ended", client.ErrSessionEnded}, {"lease_given_up", client.ErrLeaseGivenUp},
		{"unprotected_ended", client.ErrUnprotectedEnded}, {"released", client.ErrReleased}, {"closed", client.ErrClosed},
	}
	r := map[string]any{"kind": "unknown", "message": err.Error()}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			r["kind"] = k.kind
			break
		}
	}
	var fe *client.ForcedError
	if errors.As(err, &fe) {
		r["requester"], r["approver"], r["why"] = fe.Requester, fe.Approver, fe.Reason
	}
	return r
}
