// Package worker is one gate worker process: it loops over a small key
// space, acquires a key from lockd (waiting in line), reads and writes the
// key's fenced register with the lock's token, and releases; sometimes it
// holds long, sometimes it releases early. Every operation is recorded with
// its call and return times and its outcome; a timeout is unknown, never
// failed.
package worker

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/ci/gate/internal/register"
	"github.com/lockd-dev/lockd/pkg/client"
)

// Announcement written on stdout just after a holder's CanStart() returned
// true and before its read-modify-write: the gate pauses a worker here, the
// window no client-side check can cover.
const Announcement = "about-to-write"

// Options configure a worker.
type Options struct {
	ID       int
	Target   string
	Identity string
	Keys     []string
	Class    string
	History  string
	Register string // a postgres:// URL or the gate's http:// register
	Seed     uint64
	Wait     time.Duration
}

// Run is the worker process's main: it runs until SIGTERM.
func Run(args []string) error {
	var o Options
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.IntVar(&o.ID, "id", 0, "worker number")
	fs.StringVar(&o.Target, "target", "", "lockd address")
	fs.StringVar(&o.Identity, "identity", "", "SPIFFE ID (insecure loopback header)")
	keys := fs.String("keys", "", "comma-separated keys")
	fs.StringVar(&o.Class, "class", "", "lock class")
	fs.StringVar(&o.History, "history", "", "history file")
	fs.StringVar(&o.Register, "register", "", "register URL")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed")
	fs.DurationVar(&o.Wait, "wait", 3*time.Second, "acquire wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Keys = strings.Split(*keys, ",")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return o.run(ctx)
}

type worker struct {
	o   Options
	rnd *rand.Rand
	rec *history.Recorder
	reg register.Register
	out *bufio.Writer
	cli *client.Client
	n   int64 // values written
}

func (o Options) run(ctx context.Context) error {
	rec, err := history.Create(o.History, o.ID)
	if err != nil {
		return err
	}
	defer rec.Close()
	var reg register.Register
	if strings.HasPrefix(o.Register, "postgres") {
		reg, err = register.OpenPostgres(ctx, o.Register)
		if err != nil {
			return err
		}
	} else {
		reg = register.OpenHTTP(o.Register)
	}
	defer reg.Close()
	w := &worker{o: o, rnd: rand.New(rand.NewPCG(o.Seed, uint64(o.ID))), rec: rec, reg: reg, out: bufio.NewWriter(os.Stdout)}
	defer func() {
		if w.cli != nil {
			_ = w.cli.Close()
		}
	}()
	for ctx.Err() == nil {
		if err := w.round(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (w *worker) say(s string) {
	fmt.Fprintln(w.out, s)
	_ = w.out.Flush()
}

// client returns the worker's lockd client. After any unknown outcome the
// worker starts a new client (so a new session): a lost-response grant on
// the old session can then never be handed back as if it were new.
func (w *worker) client() (*client.Client, error) {
	if w.cli != nil {
		return w.cli, nil
	}
	c, err := client.New(client.WithTarget(w.o.Target), client.WithInsecureIdentity(w.o.Identity))
	if err != nil {
		return nil, err
	}
	w.cli = c
	return c, nil
}

func (w *worker) recycle() {
	if w.cli == nil {
		return
	}
	c := w.cli
	w.cli = nil
	done := make(chan struct{})
	go func() { _ = c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

func (w *worker) round(ctx context.Context) error {
	cli, err := w.client()
	if err != nil {
		return err
	}
	key := w.o.Keys[w.rnd.IntN(len(w.o.Keys))]
	op := w.rec.Begin(history.Acquire, key, 0, 0)
	actx, cancel := context.WithTimeout(ctx, w.o.Wait+3*time.Second)
	l, err := cli.Acquire(actx, key, w.o.Class, func(*client.Lock) {}, client.Wait(w.o.Wait))
	cancel()
	if err != nil {
		out := acquireOutcome(err)
		op.Err = status.Code(err).String()
		w.rec.End(op, out)
		if out == history.Unknown {
			w.recycle()
		}
		if ctx.Err() == nil {
			time.Sleep(time.Duration(50+w.rnd.IntN(200)) * time.Millisecond)
		}
		return nil
	}
	tok := l.Token()
	op.Token = tok
	w.rec.End(op, history.Ok)

	rounds := 1
	if w.rnd.IntN(10) < 3 {
		rounds = 3 + w.rnd.IntN(4) // hold long
	}
	for i := 0; i < rounds && ctx.Err() == nil; i++ {
		if !w.work(l, key, tok, i == rounds-1) {
			break
		}
	}
	if w.rnd.IntN(10) == 0 {
		// Release early sometimes: before the work's last pause.
		time.Sleep(time.Duration(w.rnd.IntN(20)) * time.Millisecond)
	}
	op = w.rec.Begin(history.Release, key, tok, 0)
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	held, err := l.ReleaseHeld(rctx)
	cancel()
	switch {
	case err == nil && held:
		w.rec.End(op, history.Ok)
	case err == nil, errors.Is(err, client.ErrExpired), errors.Is(err, client.ErrDeadline), errors.Is(err, client.ErrClosed),
		errors.Is(err, client.ErrEpoch):
		w.rec.End(op, history.Fail)
	case status.Code(err) == codes.FailedPrecondition, status.Code(err) == codes.NotFound:
		op.Err = status.Code(err).String()
		w.rec.End(op, history.Fail)
	default:
		op.Err = status.Code(err).String()
		w.rec.End(op, history.Unknown)
		w.recycle()
	}
	return nil
}

// work is one unit of work under the lock: check, then read; the last unit
// also writes. The register accepts one write per token (fence < token), so
// a holder writes once, at the end of its hold. It reports whether the
// holder may go on.
func (w *worker) work(l *client.Lock, key string, tok uint64, last bool) bool {
	op := w.rec.Begin(history.Check, key, tok, 0)
	ok := l.CanStart()
	if !ok {
		w.rec.End(op, history.Fail)
		return false
	}
	w.rec.End(op, history.Ok)
	if last {
		w.say(Announcement + " " + key)
		// Think: the gate's pause lands here, after the check and before
		// the write.
		time.Sleep(time.Duration(30+w.rnd.IntN(40)) * time.Millisecond)
	}

	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	op = w.rec.Begin(history.Read, key, 0, 0)
	fence, value, err := w.reg.Read(rctx, key)
	cancel()
	if err != nil {
		op.Err = err.Error()
		w.rec.End(op, history.Unknown)
		return false
	}
	op.Fence, op.Value = fence, value
	w.rec.End(op, history.Ok)
	if !last {
		time.Sleep(time.Duration(100+w.rnd.IntN(500)) * time.Millisecond)
		return true
	}

	w.n++
	v := int64(w.o.ID+1)<<32 | w.n
	wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	op = w.rec.Begin(history.Write, key, tok, v)
	accepted, err := w.reg.Write(wctx, key, tok, v)
	cancel()
	switch {
	case err != nil:
		// Unknown even when the register says it was not sent: a write
		// recorded as rejected must have been compared and refused.
		op.Err = err.Error()
		w.rec.End(op, history.Unknown)
		return false
	case !accepted:
		w.rec.End(op, history.Fail)
		return false
	}
	w.rec.End(op, history.Ok)
	return true
}

// acquireOutcome classifies an Acquire error: definite refusals are Fail,
// everything else (timeouts, lockd or etcd unreachable) is Unknown.
func acquireOutcome(err error) history.Outcome {
	if errors.Is(err, client.ErrClosed) {
		return history.Fail
	}
	st, ok := status.FromError(err)
	if !ok {
		return history.Unknown
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		if strings.Contains(st.Message(), "held by another session") {
			return history.Fail
		}
	case codes.FailedPrecondition, codes.PermissionDenied, codes.InvalidArgument, codes.AlreadyExists, codes.NotFound:
		return history.Fail
	}
	return history.Unknown
}
