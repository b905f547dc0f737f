// Package worker is one gate worker process: it loops over a small key
// space, acquires a key from lockd (waiting in line), reads and writes the
// key's fenced store with the lock's token, and releases; sometimes it
// holds long, sometimes it releases early. Every operation is recorded with
// its call and return times and its outcome; a timeout is unknown, never
// failed.
//
// A child-mode worker runs each hold's unit of work (the read and the
// write) in a child process supervised exactly as `lockctl lock` does
// (lock.Supervision), so the gate can check that the child is gone before
// the next holder writes. A re-entrant worker sometimes acquires the key it
// holds again from a second goroutine, racing its own release. An
// in-process worker sometimes holds a second key through its round, so
// that a force-release revoking its session ends more than the forced
// hold.
//
// An unprotected lock (granted without quorum) is held until it ends or
// for at most unprotectedCap, with a check every unprotectedEvery that it
// is still usable. Some rounds (mismatchOdds) ask for a key naming a class
// that does not own it, which lockd must refuse with CLASS_MISMATCH. Most
// acquires name the key's class; one in four leaves it to lockd ("").
package worker

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/fencedstore"
	"github.com/lockd-dev/lockd/ci/gate/internal/history"
	"github.com/lockd-dev/lockd/internal/childproc"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/lock"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Announcements on stdout. AboutToWrite comes just after a holder's
// CanStart() returned true and before its read-modify-write: the gate pauses
// a worker there, the window no client-side check can cover. ChildStarted,
// with the key and how long the unit will run, comes when a child-mode
// worker's unit of work starts: the gate stops that worker's lockd during
// a long one.
const (
	Announcement = "about-to-write"
	ChildStarted = "child-started"
)

// Options configure a worker.
type Options struct {
	ID       int
	Target   string
	Identity string
	Keys     []string
	Class    string
	// DurableKeys are taken under DurableClass (fairness durable) instead.
	DurableKeys []string
	// OpenKeys are taken under OpenClass (onQuorumLoss: open): without a
	// quorum lockd grants them unprotected, and the worker then writes
	// nothing (CanStart is false) and releases.
	OpenKeys     []string
	OpenClass    string
	DurableClass string
	History      string
	Store        string // a postgres:// URL or the gate's http:// store
	Seed         uint64
	Wait         time.Duration
	Child        bool // run each unit of work as a supervised child process
	Reentrant    bool // sometimes re-acquire the held key from a second goroutine
	// RetryRelease: after taking a key again on the session that released
	// it, sometimes send that earlier release again, as a client would
	// whose release's answer was lost (etcd#22082's shape). lockd must
	// refuse it: it must never free the newer grant.
	RetryRelease bool
	// Straddle takes a second key every in-process round and holds both
	// for straddleRounds rounds or more: with the tiers split, a durable key and a
	// fenced one are on two clusters, and a fault of one must fence only
	// the hold there.
	Straddle bool
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
	durableKeys := fs.String("durable-keys", "", "comma-separated keys taken under --durable-class")
	fs.StringVar(&o.DurableClass, "durable-class", "", "lock class with durable fairness")
	openKeys := fs.String("open-keys", "", "comma-separated keys taken under --open-class")
	fs.StringVar(&o.OpenClass, "open-class", "", "lock class with onQuorumLoss: open")
	fs.StringVar(&o.History, "history", "", "history file")
	fs.StringVar(&o.Store, "store", "", "store URL")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed")
	fs.DurationVar(&o.Wait, "wait", 3*time.Second, "acquire wait")
	fs.BoolVar(&o.Child, "child", false, "run each unit of work as a supervised child")
	fs.BoolVar(&o.Reentrant, "reentrant", false, "sometimes re-acquire the held key from a second goroutine")
	fs.BoolVar(&o.RetryRelease, "retry-release", false, "after taking a key again on the same session, sometimes send its earlier release again")
	fs.BoolVar(&o.Straddle, "straddle", false, "take a second key every round and hold both long (keys on two clusters when the tiers are split)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Keys = strings.Split(*keys, ",")
	if *durableKeys != "" {
		o.DurableKeys = strings.Split(*durableKeys, ",")
	}
	if *openKeys != "" {
		o.OpenKeys = strings.Split(*openKeys, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return o.run(ctx)
}

// classOf is the class key is taken under.
func (o Options) classOf(key string) string {
	switch {
	case slices.Contains(o.DurableKeys, key):
		return o.DurableClass
	case slices.Contains(o.OpenKeys, key):
		return o.OpenClass
	}
	return o.Class
}

// mismatchClass is a class that does not own key, for a mismatch round:
// for an open key the fenced class; for a closed key the open class (the
// hole a caller would use to get a closed key granted without quorum), or,
// without open keys, the other closed class (the fenced class owns a
// shorter prefix of a durable key, the durable class none of a fenced
// key's). "" when there is none.
func (o Options) mismatchClass(key string) string {
	switch {
	case slices.Contains(o.OpenKeys, key):
		return o.Class
	case len(o.OpenKeys) > 0:
		return o.OpenClass
	case slices.Contains(o.DurableKeys, key):
		return o.Class
	}
	return o.DurableClass
}

// Round choices. One round in mismatchOdds is a mismatch round; after an
// acquire whose outcome was unknown (lockd or its store unreachable, as in
// a quorum loss) one in suspectOdds, so that refusals without quorum are
// exercised too, and the key is an open one two times in three (else one
// in three with two open keys of six), so that an outage's unprotected
// grants come early enough in it to be checked two keepalive intervals
// later. One acquire in leaveClassOdds leaves the class to lockd. One
// in-process round in pairOdds holds a second key, and holds long.
const (
	mismatchOdds   = 15
	suspectOdds    = 3
	leaveClassOdds = 4
	pairOdds       = 5
	// straddleRounds is the fewest rounds of work (100 to 600 ms each) a
	// straddling worker does under a pair: about the gate's TTL.
	straddleRounds = 16
)

// An unprotected lock is checked every unprotectedEvery while it is held,
// and released after unprotectedCap if it has not ended by then.
const (
	unprotectedEvery = 500 * time.Millisecond
	unprotectedCap   = 60 * time.Second
)

type worker struct {
	o   Options
	rnd *rand.Rand
	rec *history.Recorder
	reg fencedstore.Store
	out *bufio.Writer
	cli *client.Client
	exe string
	n   int64 // values written
	// children counts child processes, for their history files.
	children int
	// suspect: the last acquire's outcome was unknown.
	suspect bool
	// openAfter: lockd answered OPEN_GRACE (quorum has just returned, or
	// lockd has just started, and open keys wait until every unprotected
	// holder's deadline may have passed); the worker takes only closed keys
	// until then, or until an outcome is unknown again (quorum may be lost
	// again: open keys are then what the gate wants asked for).
	openAfter time.Time
	// released is the last release each key had on this worker's
	// session, for RetryRelease; lastKey the key released last.
	released map[string]releasedHold
	lastKey  string
}

// releasedHold is one hold the worker released: its session and token.
type releasedHold struct {
	session int64
	token   uint64
}

// retryOdds: with RetryRelease, one round in retryOdds takes again the key
// released last (so that the same session holds it again), and one grant in
// retryOdds of a key the session released before sends that release again.
const retryOdds = 2

// openBackoff is how long a worker leaves open keys alone after lockd
// answered OPEN_GRACE: the grace lasts the open class's TTL, and every
// acquire of an open key meanwhile waits out its whole wait.
const openBackoff = 10 * time.Second

func (o Options) run(ctx context.Context) error {
	rec, err := history.Create(o.History, o.ID)
	if err != nil {
		return err
	}
	defer rec.Close()
	var reg fencedstore.Store
	if strings.HasPrefix(o.Store, "postgres") {
		reg, err = fencedstore.OpenPostgres(ctx, o.Store)
		if err != nil {
			return err
		}
	} else {
		reg = fencedstore.OpenHTTP(o.Store)
	}
	defer reg.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	w := &worker{o: o, rnd: rand.New(rand.NewPCG(o.Seed, uint64(o.ID))), rec: rec, reg: reg, out: bufio.NewWriter(os.Stdout), exe: exe,
		released: map[string]releasedHold{}}
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

// shutdownFor bounds how long an old client keeps asking lockd to end its
// sessions: longer than a quorum loss's outage and the TTL after it.
const shutdownFor = 90 * time.Second

func (w *worker) recycle() {
	if w.cli == nil {
		return
	}
	c := w.cli
	w.cli = nil
	// Shut the old client down in the background: it keeps asking lockd to
	// end its sessions while the store is unavailable, as a careful holder
	// does, so a hold whose release was lost in an outage is freed when the
	// store is back rather than a TTL later (etcd renews every lease when it
	// elects a leader).
	done := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownFor)
		defer cancel()
		_ = c.Shutdown(ctx)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

// onFence records that the lock of tok ended: from here on the worker must
// not act as its holder.
func (w *worker) onFence(key string) func(*client.Lock) {
	return func(l *client.Lock) {
		w.rec.Instant(history.Lost, key, l.Token(), fmt.Sprint(l.Err()))
	}
}

// acquire records and runs one Acquire. It names the key's class, or
// sometimes leaves it to lockd.
func (w *worker) acquire(ctx context.Context, cli *client.Client, key string, onFence func(*client.Lock)) (*client.Lock, error) {
	class := w.o.classOf(key)
	if w.rnd.IntN(leaveClassOdds) == 0 {
		class = ""
	}
	op := w.rec.Begin(history.Acquire, key, 0, 0)
	op.Class = class
	actx, cancel := context.WithTimeout(ctx, w.o.Wait+3*time.Second)
	l, err := cli.Acquire(actx, key, class, onFence, client.Wait(w.o.Wait))
	cancel()
	if err != nil {
		op.Err, op.Reason = err.Error(), client.Reason(err)
		outcome := acquireOutcome(err)
		w.rec.End(op, outcome)
		w.suspect = w.suspect || outcome == history.Unknown
		switch {
		case errors.Is(err, client.ErrOpenGrace):
			w.openAfter = time.Now().Add(openBackoff)
		case outcome == history.Unknown:
			w.openAfter = time.Time{}
		}
		return nil, err
	}
	op.Token = l.Token()
	if l.Unprotected() {
		op.Kind = history.Unprotected
		op.Arbiter, op.SpoolSeq = l.Spooled()
	}
	w.rec.End(op, history.Ok)
	return l, nil
}

func (w *worker) round(ctx context.Context) error {
	cli, err := w.client()
	if err != nil {
		return err
	}
	key := w.o.Keys[w.rnd.IntN(len(w.o.Keys))]
	if w.o.RetryRelease && w.lastKey != "" && w.rnd.IntN(retryOdds) == 0 {
		key = w.lastKey
	}
	n := len(w.o.OpenKeys)
	pickOpen := w.rnd.IntN(len(w.o.Keys)+n) < n // every key alike
	odds := mismatchOdds
	if w.suspect {
		// Maybe no quorum: ask for what the open posture serves (an open
		// key, two rounds in three) and for a class mismatch more often.
		pickOpen, odds = w.rnd.IntN(3) < 2, suspectOdds
	}
	w.suspect = false
	if n > 0 && pickOpen && time.Now().After(w.openAfter) {
		key = w.o.OpenKeys[w.rnd.IntN(n)]
	}
	if class := w.o.mismatchClass(key); class != "" && w.rnd.IntN(odds) == 0 {
		w.mismatch(ctx, cli, key, class)
		return nil
	}
	// lost is closed once the lock's end is recorded: an unprotected
	// holder waits for it, so its own release is recorded after its lost.
	lost := make(chan struct{})
	told := w.onFence(key)
	onFence := func(l *client.Lock) { told(l); close(lost) }
	var fence *lock.Fence
	var heldTok uint64 // set before fence.Start, read under the Fence's lock after it
	if w.o.Child {
		// lockctl lock's wiring: the Fence kills the child from onFence.
		fence = lock.NewFence(func(time.Time) { w.rec.Instant(history.Gone, key, heldTok, "killed by the supervisor") })
		record := onFence
		onFence = func(l *client.Lock) { fence.OnFence(l); record(l) }
	}
	l, err := w.acquire(ctx, cli, key, onFence)
	if err != nil {
		if acquireOutcome(err) == history.Unknown {
			w.recycle()
		}
		if ctx.Err() == nil {
			time.Sleep(time.Duration(50+w.rnd.IntN(200)) * time.Millisecond)
		}
		return nil
	}
	tok := l.Token()
	heldTok = tok
	if l.Unprotected() {
		w.holdUnprotected(ctx, l, key, lost)
		return nil
	}

	if w.o.Child {
		w.childUnit(ctx, l, key, fence)
		w.release(l, key, history.Release)
		return nil
	}
	if prev, ok := w.released[key]; ok && w.o.RetryRelease && prev.session == l.Session() && prev.token != tok && w.rnd.IntN(retryOdds) == 0 {
		w.retryRelease(cli, key, prev, tok)
	}
	var second sync.WaitGroup
	releaseKind := history.Release
	open := slices.Contains(w.o.OpenKeys, key)
	if w.o.Reentrant && !open && w.rnd.IntN(10) < 4 {
		releaseKind = history.Unhold // which release is the last is not known
		second.Add(1)
		delay := time.Duration(w.rnd.IntN(400)) * time.Millisecond
		go func() { defer second.Done(); w.reenter(ctx, cli, key, tok, delay) }()
	}
	var pair *client.Lock
	var pairKey string
	if releaseKind == history.Release && !open && (w.o.Straddle || w.rnd.IntN(pairOdds) == 0) {
		pairKey, pair = w.pair(ctx, cli, key)
	}
	rounds := 1
	switch {
	case w.o.Straddle && pair != nil:
		rounds = straddleRounds + w.rnd.IntN(straddleRounds) // past the TTL, so a fault of one cluster fences the hold there
	case w.rnd.IntN(10) < 3 || pair != nil:
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
	w.release(l, key, releaseKind)
	second.Wait()
	if pair != nil {
		w.release(pair, pairKey, history.Release)
	}
	if w.suspect {
		w.recycle() // the pair's acquire left an outcome unknown
	}
	return nil
}

// pair takes a second closed key, after key in key order (so two pairs
// never wait for each other), on the same client and so on the same
// session when the classes' TTLs agree. Nothing is done under it: it is
// acquired and released, and ends with its session if a force-release
// revokes it.
func (w *worker) pair(ctx context.Context, cli *client.Client, key string) (string, *client.Lock) {
	var after []string
	for _, k := range w.o.Keys {
		if k > key {
			after = append(after, k)
		}
	}
	if len(after) == 0 {
		return "", nil
	}
	k := after[w.rnd.IntN(len(after))]
	l, err := w.acquire(ctx, cli, k, w.onFence(k))
	if err != nil {
		return "", nil
	}
	return k, l
}

// holdUnprotected holds an unprotected lock until it ends (lockd tells the
// holder once quorum is back, or its deadline passes: its Lost, recorded
// before lost is closed) or for unprotectedCap, checking every
// unprotectedEvery that it is still usable (State() == Safe, no Err), then
// releases it. Nothing is done under it: CanStart is false for it. The
// checks, the release and the Lost are in neither model.
func (w *worker) holdUnprotected(ctx context.Context, l *client.Lock, key string, lost <-chan struct{}) {
	limit := time.NewTimer(unprotectedCap)
	defer limit.Stop()
	tick := time.NewTicker(unprotectedEvery)
	defer tick.Stop()
hold:
	for {
		select {
		case <-lost:
			break hold
		case <-ctx.Done():
			break hold
		case <-limit.C:
			break hold
		case <-tick.C:
		}
		op := w.rec.Begin(history.UnprotectedCheck, key, 0, 0)
		if st, err := l.State(), l.Err(); st != client.Safe || err != nil {
			op.Err = fmt.Sprintf("state %s, err %v", st, err)
			w.rec.End(op, history.Fail)
			continue
		}
		w.rec.End(op, history.Ok)
	}
	op := w.rec.Begin(history.UnprotectedRelease, key, 0, 0)
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := l.Release(rctx)
	cancel()
	switch {
	case err == nil:
		w.rec.End(op, history.Ok)
	case errors.Is(err, client.ErrUnprotectedEnded), errors.Is(err, client.ErrDeadline), errors.Is(err, client.ErrExpired),
		errors.Is(err, client.ErrClosed), errors.Is(err, client.ErrSessionEnded), client.Definite(err):
		op.Err, op.Reason = err.Error(), client.Reason(err)
		w.rec.End(op, history.Fail)
	default:
		op.Err = err.Error()
		w.rec.End(op, history.Unknown)
		w.recycle()
	}
}

// mismatch asks for key naming class, a class that does not own it. lockd
// must refuse it with CLASS_MISMATCH, with quorum or without; a grant is
// released at once.
func (w *worker) mismatch(ctx context.Context, cli *client.Client, key, class string) {
	op := w.rec.Begin(history.Mismatch, key, 0, 0)
	op.Class = class
	actx, cancel := context.WithTimeout(ctx, w.o.Wait+3*time.Second)
	l, err := cli.Acquire(actx, key, class, func(*client.Lock) {}, client.Wait(w.o.Wait))
	cancel()
	switch {
	case err == nil:
		op.Token = l.Token()
		op.Err = fmt.Sprintf("granted under class %s (unprotected %v)", l.Class(), l.Unprotected())
		w.rec.End(op, history.Fail)
		rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = l.Release(rctx)
		cancel()
	case errors.Is(err, client.ErrClassMismatch):
		op.Err, op.Reason = err.Error(), client.Reason(err)
		w.rec.End(op, history.Ok)
	case client.Definite(err):
		op.Err, op.Reason = err.Error(), client.Reason(err)
		w.rec.End(op, history.Fail)
	default:
		op.Err = err.Error()
		w.rec.End(op, history.Unknown)
		w.suspect = true
		w.recycle()
	}
	if ctx.Err() == nil {
		time.Sleep(time.Duration(50+w.rnd.IntN(200)) * time.Millisecond)
	}
}

// reenter is the second goroutine of a re-entrant round: after delay it
// acquires the key again (re-entering the hold, or, if the first goroutine
// has released it meanwhile, as a new grant), checks once, and releases.
func (w *worker) reenter(ctx context.Context, cli *client.Client, key string, held uint64, delay time.Duration) {
	time.Sleep(delay)
	op := w.rec.Begin(history.Acquire, key, 0, 0)
	actx, cancel := context.WithTimeout(ctx, w.o.Wait+3*time.Second)
	l, err := cli.Acquire(actx, key, w.o.classOf(key), w.onFence(key), client.Wait(w.o.Wait))
	cancel()
	if err != nil {
		op.Err = err.Error()
		w.rec.End(op, acquireOutcome(err))
		return
	}
	op.Token = l.Token()
	kind := history.Release
	if l.Token() == held {
		op.Kind, kind = history.Reenter, history.Unhold
	}
	w.rec.End(op, history.Ok)
	c := w.rec.Begin(history.Check, key, l.Token(), 0)
	if l.CanStart() {
		w.rec.End(c, history.Ok)
	} else {
		w.rec.End(c, history.Fail)
	}
	time.Sleep(time.Duration(w.rnd.IntN(150)) * time.Millisecond)
	w.release(l, key, kind)
}

// retryRelease sends again the release of prev, an earlier grant of key on
// the session that now holds key with token now, as a client whose
// release's answer was lost would. lockd must refuse it (a stale token):
// the op fails, a violation, if lockd says it released anything.
func (w *worker) retryRelease(cli *client.Client, key string, prev releasedHold, now uint64) {
	op := w.rec.Begin(history.RetryRelease, key, prev.token, 0)
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	resp, err := cli.LockService().Release(rctx, &lockv1.ReleaseRequest{SessionId: prev.session, Key: key, Token: prev.token})
	cancel()
	err = client.Decode(err)
	switch {
	case err == nil && resp.GetReleased():
		op.Err = fmt.Sprintf("the retried release of token %d freed the session's newer grant (token %d)", prev.token, now)
		w.rec.End(op, history.Fail)
	case err == nil, client.Definite(err):
		if err != nil {
			op.Err, op.Reason = err.Error(), client.Reason(err)
		}
		w.rec.End(op, history.Ok)
	default:
		op.Err = err.Error()
		w.rec.End(op, history.Unknown)
	}
}

// release records and runs one release of l.
func (w *worker) release(l *client.Lock, key string, kind history.Kind) {
	op := w.rec.Begin(kind, key, l.Token(), 0)
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	held, err := l.ReleaseHeld(rctx)
	cancel()
	switch {
	case kind == history.Unhold:
		if err != nil {
			op.Err = err.Error()
		}
		w.rec.End(op, history.Ok)
	case err == nil && held:
		if kind == history.Release {
			w.released[key], w.lastKey = releasedHold{session: l.Session(), token: l.Token()}, key
		}
		w.rec.End(op, history.Ok)
	case err == nil, client.Definite(err), errors.Is(err, client.ErrExpired), errors.Is(err, client.ErrDeadline),
		errors.Is(err, client.ErrClosed), errors.Is(err, client.ErrEpoch), errors.Is(err, client.ErrForced),
		errors.Is(err, client.ErrSessionEnded), errors.Is(err, client.ErrLeaseGivenUp):
		if err != nil {
			op.Err = err.Error()
		}
		w.rec.End(op, history.Fail)
	default:
		op.Err = err.Error()
		w.rec.End(op, history.Unknown)
		w.recycle()
	}
}

// work is one unit of work under the lock: check, then read; the last unit
// also writes. The store accepts one write per token (fence < token), so
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
	if !w.readStore(w.rec, key) {
		return false
	}
	if !last {
		time.Sleep(time.Duration(100+w.rnd.IntN(500)) * time.Millisecond)
		return true
	}
	w.n++
	return w.writeStore(w.rec, key, tok, int64(w.o.ID+1)<<32|w.n)
}

func (w *worker) readStore(rec *history.Recorder, key string) bool {
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	op := rec.Begin(history.Read, key, 0, 0)
	fence, value, err := w.reg.Read(rctx, key)
	cancel()
	if err != nil {
		op.Err = err.Error()
		rec.End(op, history.Unknown)
		return false
	}
	op.Fence, op.Value = fence, value
	rec.End(op, history.Ok)
	return true
}

func (w *worker) writeStore(rec *history.Recorder, key string, tok uint64, v int64) bool {
	wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	op := rec.Begin(history.Write, key, tok, v)
	accepted, err := w.reg.Write(wctx, key, tok, v)
	cancel()
	switch {
	case err != nil:
		// Unknown even when the store says it was not sent: a write
		// recorded as rejected must have been compared and refused.
		op.Err = err.Error()
		rec.End(op, history.Unknown)
		return false
	case !accepted:
		rec.End(op, history.Fail)
		return false
	}
	rec.End(op, history.Ok)
	return true
}

// childUnit runs the hold's unit of work as a child process under
// lock.Supervision, the code `lockctl lock` runs: the child reads and
// writes the store with the token from its environment, then goes on
// working for a while, ignoring SIGTERM. The supervisor's SIGKILL is
// recorded as the child being gone.
func (w *worker) childUnit(ctx context.Context, l *client.Lock, key string, fence *lock.Fence) {
	w.children++
	id := (w.o.ID+1)*1_000_000 + w.children
	// Most units are short; some run for longer than one TTL, as real work
	// does while keepalives keep the lock.
	think := time.Duration(200+w.rnd.IntN(2300)) * time.Millisecond
	if w.rnd.IntN(3) == 0 {
		think = time.Duration(6000+w.rnd.IntN(4000)) * time.Millisecond
	}
	cmd := exec.Command(w.exe, "child", "--key", key, "--store", w.o.Store, "--id", strconv.Itoa(id),
		"--history", strings.TrimSuffix(w.o.History, ".jsonl")+fmt.Sprintf("-child-%d.jsonl", w.children),
		"--think", think.String(), "--value", strconv.FormatInt(int64(w.o.ID+1)<<32|int64(w.children)<<16, 10))
	cmd.Env = append(os.Environ(), "LOCK_TOKEN="+strconv.FormatUint(l.Token(), 10))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	childproc.DieWithParent(cmd)
	if err := fence.Start(cmd, false); err != nil {
		fmt.Fprintf(os.Stderr, "child: %v\n", err)
		return
	}
	w.say(fmt.Sprintf("%s %s %s", ChildStarted, key, think))
	signals := make(chan os.Signal, 1)
	stop := context.AfterFunc(ctx, func() { signals <- syscall.SIGKILL }) // the worker is stopping
	defer stop()
	sup := &lock.Supervision{Lock: l, Fence: fence, Cmd: cmd, Grace: 10 * time.Second, Signals: signals, Stderr: os.Stderr}
	_, _ = sup.Run()
}

// RunChild is the body of a child process (`gate child`): one unit of work
// with the token in LOCK_TOKEN, recorded in its own history file.
func RunChild(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	key := fs.String("key", "", "key")
	reg := fs.String("store", "", "store URL")
	id := fs.Int("id", 0, "history worker id")
	path := fs.String("history", "", "history file")
	think := fs.Duration("think", time.Second, "how long the unit goes on after its write")
	value := fs.Int64("value", 0, "value to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	signal.Ignore(syscall.SIGTERM) // a unit that takes its time to stop
	tok, err := strconv.ParseUint(os.Getenv("LOCK_TOKEN"), 10, 64)
	if err != nil {
		return fmt.Errorf("child: LOCK_TOKEN: %w", err)
	}
	rec, err := history.Create(*path, *id)
	if err != nil {
		return err
	}
	defer rec.Close()
	var r fencedstore.Store
	if strings.HasPrefix(*reg, "postgres") {
		if r, err = fencedstore.OpenPostgres(context.Background(), *reg); err != nil {
			return err
		}
	} else {
		r = fencedstore.OpenHTTP(*reg)
	}
	defer r.Close()
	w := &worker{reg: r}
	if w.readStore(rec, *key) {
		w.writeStore(rec, *key, tok, *value)
	}
	time.Sleep(*think)
	rec.Instant(history.Gone, *key, tok, "exited")
	return nil
}

// acquireOutcome classifies an Acquire error: lockd's definite refusals
// are Fail, everything else (timeouts, lockd or etcd unreachable) is
// Unknown.
func acquireOutcome(err error) history.Outcome {
	if errors.Is(err, client.ErrClosed) || client.Definite(err) {
		return history.Fail
	}
	return history.Unknown
}
