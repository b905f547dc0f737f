// Package renewal measures renewal at the seed's scale: many holds across
// many sessions kept alive through lockd by keepalives alone. It opens the
// sessions, grants the holds, keeps every session alive with one keepalive
// per third of its TTL, and measures a steady window: keepalives sent and
// renewed at etcd, etcd's consensus writes (a renewal must not be one),
// false expiries, and lockd's and etcd's CPU and memory. When the machine
// cannot carry the target it stops growing and says where it broke.
package renewal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Load shape.
const (
	// InFlight bounds the opens and acquires in flight.
	InFlight = 64
	// CloseInFlight bounds the closes in flight. Each close is a lease
	// revoke that deletes the session's holds; etcd applies them slower than
	// it commits them, and every renewal waits for the applied index on
	// etcd's one-at-a-time keepalive stream, so a deep queue of revokes
	// starves the renewals of the sessions not yet closed (at 64 in flight,
	// 40,000 sessions: answers fell to ~100/s and most sessions expired).
	CloseInFlight = 8
	// MaxConns bounds the gRPC connections to lockd; identities share them.
	MaxConns = 8
)

const (
	progressEvery = 5 * time.Second
	callTimeout   = 30 * time.Second
	// holdPrefix is where lockd keeps holds in etcd: "/l/" + the lock key.
	holdPrefix = "/l/"
)

// Config configures a run.
type Config struct {
	// Addr is lockd's gRPC address.
	Addr string
	// EtcdURL is an etcd client URL: its /metrics are read, and the holds
	// are counted there at the end.
	EtcdURL string
	// LockdPID and EtcdPID are the processes to measure; equal when etcd
	// is embedded in lockd.
	LockdPID, EtcdPID int
	// Identities to spread the sessions over (at most the rig's).
	Identities int
	// Sessions and Holds are the targets, e.g. 40,000 and 250,000.
	Sessions, Holds int
	// Steady is how long the loaded holds are kept alive and measured.
	Steady time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Interval is the keepalive period of each session; zero is a third of
	// the class TTL, as the seed sizes it. Longer than the TTL makes every
	// session expire (a control for the false-expiry check).
	Interval time.Duration
	// ProbeFor is how long, after the steady state, a few holders take
	// and release keys of their own while every hold is still renewed
	// (the grant probe); zero is half of Steady.
	ProbeFor time.Duration
	// LoadLimit bounds the time to open the sessions and grant the holds;
	// zero is 10 minutes. Loading stops growing when it is reached.
	LoadLimit time.Duration
}

// ErrConfig: the configuration cannot run.
var ErrConfig = errors.New("renewal: config")

// Why loading stopped early.
var (
	errLoadLimit = errors.New("load limit reached")
	errLost      = errors.New("a session was lost while loading")
)

// run is one Run's state.
type run struct {
	cfg     Config
	log     io.Writer
	clients []lockv1.LockServiceClient
	k       *keeper
	prefix  string // lock key prefix of this run's holds, "bench/r/<run>/"

	mu       sync.Mutex
	sessions []*sessionRef
	notes    []string

	phase   atomic.Value // string
	granted atomic.Int64
}

// sessionRef is an opened session and the identity that owns it.
type sessionRef struct {
	ident int
	s     *session
}

// Run opens cfg.Sessions sessions and grants cfg.Holds holds through lockd
// at cfg.Addr, keeps them alive for cfg.Steady and returns the figures.
// Falling short of the target is a result (Held false, Notes say where it
// broke), not an error; errors are for a run that could not start, or a
// cancelled ctx (returned with the figures so far).
func Run(ctx context.Context, cfg Config) (*result.Renewal, error) {
	if cfg.Identities < 1 || cfg.Sessions < 1 || cfg.Holds < 0 || cfg.Steady <= 0 || cfg.Addr == "" || cfg.EtcdURL == "" {
		return nil, fmt.Errorf("%w: need Addr, EtcdURL, Identities >= 1, Sessions >= 1, Holds >= 0 and Steady > 0", ErrConfig)
	}
	if cfg.Interval == 0 {
		cfg.Interval = rig.ClassTTL / 3
	}
	if cfg.LoadLimit == 0 {
		cfg.LoadLimit = 10 * time.Minute
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	r := &run{cfg: cfg, log: log, prefix: fmt.Sprintf("%s/r/%x/", rig.Namespace, time.Now().UnixNano()&0xffffffffff)}
	r.phase.Store("loading")

	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range min(cfg.Identities, MaxConns) {
		c, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("renewal: dial lockd %s: %w", cfg.Addr, err)
		}
		conns = append(conns, c)
		r.clients = append(r.clients, lockv1.NewLockServiceClient(c))
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{cfg.EtcdURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("renewal: etcd client %s: %w", cfg.EtcdURL, err)
	}
	defer func() { _ = etcd.Close() }()
	mStart, err := scrape(ctx, cfg.EtcdURL)
	if err != nil {
		return nil, fmt.Errorf("renewal: etcd metrics: %w", err)
	}

	res := &result.Renewal{TargetSessions: cfg.Sessions, TargetHolds: cfg.Holds, TTL: rig.ClassTTL}
	r.k = newKeeper(ctx, conns, cfg.Identities, rig.ClassTTL, cfg.Interval, func() string { return r.phase.Load().(string) })
	keeperStopped := false
	defer func() {
		if !keeperStopped {
			r.k.stop()
		}
	}()
	progressDone := make(chan struct{})
	progressStopped := make(chan struct{})
	go r.progress(progressDone, progressStopped)
	defer func() {
		select {
		case <-progressDone:
		default:
			close(progressDone)
			<-progressStopped
		}
	}()

	// Load: sessions, then holds, renewing every session from its open on.
	loadStart := time.Now()
	fmt.Fprintf(log, "renewal: loading %d sessions over %d identities and %d holds (keys %s…), keepalive every %s, TTL %s\n",
		cfg.Sessions, cfg.Identities, cfg.Holds, r.prefix, cfg.Interval, rig.ClassTTL)
	r.load(ctx)
	res.Load = time.Since(loadStart)
	res.Sessions = len(r.sessions)
	res.Holds = int(r.granted.Load())
	fmt.Fprintf(log, "renewal: loaded %d sessions and %d holds in %s\n", res.Sessions, res.Holds, res.Load.Round(time.Millisecond))

	// Steady state, then grants beside it.
	r.phase.Store("steady")
	r.steady(ctx, res)
	r.probeWindow(ctx, res)

	// Check: every granted hold still there, every session still alive.
	r.phase.Store("checking")
	present, countErr := r.countHolds(ctx, etcd)
	r.k.freeze()
	if countErr != nil {
		r.notef("holds not counted at the end (missing holds not checked): %v", countErr)
	}
	if mEnd, err := scrape(ctx, cfg.EtcdURL); err == nil {
		if d := mEnd[leaseExpired] - mStart[leaseExpired]; d > 0 {
			r.notef("etcd expired %.0f leases during the run (etcd_debugging_server_lease_expired_total)", d)
		}
	}
	missing, missingSessions := 0, 0
	if countErr == nil {
		for i, ref := range r.sessions {
			if r.k.isLost(ref.ident, ref.s) {
				continue
			}
			if d := int(ref.s.granted.Load()) - present[i]; d > 0 {
				missing += d
				missingSessions++
			}
		}
	}
	lost := int(r.k.lost.Load())
	res.FalseExpiries = lost + missing
	if lost > 0 {
		r.notef("%d sessions lost: %d answered expired, %d unanswered for more than the TTL; first: %s",
			lost, r.k.expiredAnswers.Load(), r.k.unanswered.Load(), r.k.firstLoss().reason)
	}
	if missing > 0 {
		r.notef("%d holds missing at the end on %d sessions never answered expired", missing, missingSessions)
	}
	if gap := time.Duration(r.k.maxGap.Load()); gap > cfg.Interval+time.Second {
		r.notef("the load generator sent late: longest gap between two keepalives of one session %s (interval %s)",
			gap.Round(time.Millisecond), cfg.Interval)
	}
	res.Held = res.Sessions == cfg.Sessions && res.Holds == cfg.Holds && res.FalseExpiries == 0
	fmt.Fprintf(log, "renewal: %d false expiries (%d sessions lost, %d holds missing); held: %v\n", res.FalseExpiries, lost, missing, res.Held)

	// Close the sessions, kinder to the next run than 40,000 expiries.
	r.phase.Store("closing")
	r.closeAll(ctx)
	close(progressDone)
	<-progressStopped
	r.k.stop()
	keeperStopped = true
	res.Notes = append(res.Notes, r.notes...)
	res.Notes = append(res.Notes, r.k.notes()...)
	return res, ctx.Err()
}

// load opens the sessions, then grants the holds, and stops growing on the
// first call that fails after retries, the first session lost, or the load
// limit.
func (r *run) load(ctx context.Context) {
	cfg := r.cfg
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := time.AfterFunc(cfg.LoadLimit, func() { cancel(errLoadLimit) })
	defer limit.Stop()
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watchDone:
				return
			case <-t.C:
				if r.k.lost.Load() > 0 {
					cancel(errLost)
					return
				}
			}
		}
	}()
	stopped := func(what string, done, target int, err error) bool {
		if err == nil && context.Cause(lctx) == nil {
			return false
		}
		if ctx.Err() != nil {
			r.notef("cancelled while %s at %d of %d", what, done, target)
			return true
		}
		switch cause := context.Cause(lctx); {
		case errors.Is(cause, errLoadLimit):
			r.notef("loading took longer than %s: stopped %s at %d of %d", cfg.LoadLimit, what, done, target)
		case errors.Is(cause, errLost):
			r.notef("keepalives fell behind while %s: stopped at %d of %d (%d sessions, %d holds); first loss: %s",
				what, done, target, len(r.sessions), r.granted.Load(), r.k.firstLoss().reason)
		default:
			r.notef("%s stalled at %d of %d: lockd answered %s", what, done, target, describe(err))
		}
		return true
	}

	// Sessions.
	var attempt atomic.Int64
	opened, err := parallel(lctx, cfg.Sessions, InFlight, func(ctx context.Context) error {
		ident := int(attempt.Add(1)-1) % cfg.Identities
		id, err := r.openSession(ctx, ident)
		if err != nil {
			return err
		}
		r.mu.Lock()
		s := &session{idx: len(r.sessions), id: id}
		r.sessions = append(r.sessions, &sessionRef{ident: ident, s: s})
		r.mu.Unlock()
		r.k.add(ident, s)
		return nil
	})
	if stopped("opening sessions", opened, cfg.Sessions, err) {
		return
	}

	// Holds, spread evenly over the sessions: hold h goes to session
	// h mod n as its (h div n)-th key.
	n := len(r.sessions)
	if n == 0 {
		return
	}
	var next atomic.Int64
	_, err = parallel(lctx, cfg.Holds, InFlight, func(ctx context.Context) error {
		h := int(next.Add(1) - 1)
		ref := r.sessions[h%n]
		key := r.prefix + strconv.Itoa(ref.s.idx) + "/" + strconv.Itoa(h/n)
		err := retry(ctx, func(ctx context.Context) error {
			_, err := r.client(ref.ident).Acquire(r.as(ctx, ref.ident), &lockv1.AcquireRequest{
				SessionId: ref.s.id, Key: key, Class: rig.Class})
			return err
		})
		if err != nil {
			return err
		}
		ref.s.granted.Add(1)
		r.granted.Add(1)
		return nil
	})
	stopped("granting holds", int(r.granted.Load()), cfg.Holds, err)
}

// steady keeps the holds alive for cfg.Steady and measures the window.
func (r *run) steady(ctx context.Context, res *result.Renewal) {
	cfg := r.cfg
	m0, err0 := scrape(ctx, cfg.EtcdURL)
	l0, le0 := rig.ReadUsage(cfg.LockdPID)
	e0, ee0 := rig.ReadUsage(cfg.EtcdPID)
	me0, _ := rig.ReadUsage(os.Getpid())
	sent0, ans0, lat0 := r.k.sent.Load(), r.k.answered.Load(), r.k.lat.snapshot()
	t0 := time.Now()
	fmt.Fprintf(r.log, "renewal: steady state for %s\n", cfg.Steady)
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Steady):
	}
	res.Steady = time.Since(t0)
	secs := res.Steady.Seconds()
	sent1, ans1, lat1 := r.k.sent.Load(), r.k.answered.Load(), r.k.lat.snapshot()
	m1, err1 := scrape(ctx, cfg.EtcdURL)
	l1, le1 := rig.ReadUsage(cfg.LockdPID)
	e1, ee1 := rig.ReadUsage(cfg.EtcdPID)
	me1, _ := rig.ReadUsage(os.Getpid())
	if ctx.Err() != nil {
		r.notef("steady state cut short by cancellation after %s", res.Steady.Round(time.Second))
	}

	res.KeepalivesSent = float64(sent1-sent0) / secs
	q := quantiles(lat1, lat0, 0.5, 0.99, 1)
	r.notef("steady: %.0f keepalives/s sent, %.0f/s answered; answer latency p50 %s, p99 %s, max %s",
		res.KeepalivesSent, float64(ans1-ans0)/secs, q[0], q[1], q[2])
	if err0 != nil || err1 != nil {
		r.notef("etcd metrics not read: %v", errors.Join(err0, err1))
	} else {
		if _, ok := m1[leaseRenewed]; ok {
			res.KeepalivesAtEtcd = (m1[leaseRenewed] - m0[leaseRenewed]) / secs
		} else {
			r.notef("etcd exposes no %s: keepalives at etcd not measured", leaseRenewed)
		}
		res.EtcdWritesPerSec = (m1[proposalsCommitted] - m0[proposalsCommitted]) / secs
		r.notef("steady: etcd puts %.1f/s, txns %.1f/s (MVCC)", (m1[putTotal]-m0[putTotal])/secs, (m1[txnTotal]-m0[txnTotal])/secs)
	}
	if le0 == nil && le1 == nil {
		res.LockdCPU = (l1.CPU - l0.CPU).Seconds() / secs
		res.LockdRSS = l1.RSS
	} else {
		r.notef("lockd usage not read: %v", errors.Join(le0, le1))
	}
	switch {
	case cfg.EtcdPID == cfg.LockdPID:
		r.notef("embedded: etcd runs inside lockd, whose CPU and RSS include etcd's")
	case ee0 == nil && ee1 == nil:
		res.EtcdCPU = (e1.CPU - e0.CPU).Seconds() / secs
		res.EtcdRSS = e1.RSS
	default:
		r.notef("etcd usage not read: %v", errors.Join(ee0, ee1))
	}
	r.notef("steady: the load generator used %.2f cores", (me1.CPU-me0.CPU).Seconds()/secs)
	fmt.Fprintf(r.log, "renewal: steady %s: keepalives %.0f/s sent, %.0f/s at etcd; etcd writes %.2f/s; CPU lockd %.2f etcd %.2f; RSS lockd %d MiB etcd %d MiB\n",
		res.Steady.Round(time.Millisecond), res.KeepalivesSent, res.KeepalivesAtEtcd, res.EtcdWritesPerSec,
		res.LockdCPU, res.EtcdCPU, res.LockdRSS>>20, res.EtcdRSS>>20)
}

// countHolds counts this run's holds in etcd per session index.
func (r *run) countHolds(ctx context.Context, etcd *clientv3.Client) ([]int, error) {
	counts := make([]int, len(r.sessions))
	base := holdPrefix + r.prefix
	end := clientv3.GetPrefixRangeEnd(base)
	key := base
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := etcd.Get(cctx, key, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(10000),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		cancel()
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			rest := strings.TrimPrefix(string(kv.Key), base)
			idx, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '/'), 0)])
			if err == nil && idx >= 0 && idx < len(counts) {
				counts[idx]++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return counts, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// closeAll closes every session not already gone.
func (r *run) closeAll(ctx context.Context) {
	limit := 3 * time.Minute
	if ctx.Err() != nil {
		limit = 20 * time.Second
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	start := time.Now()
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Value
	_, _ = parallel(cctx, len(r.sessions), CloseInFlight, func(ctx context.Context) error {
		ref := r.sessions[next.Add(1)-1]
		r.k.close(ref.ident, ref.s)
		err := retry(ctx, func(ctx context.Context) error {
			_, err := r.client(ref.ident).CloseSession(r.as(ctx, ref.ident), &lockv1.CloseSessionRequest{SessionId: ref.s.id})
			return err
		})
		if err != nil && !errors.Is(client.Decode(err), client.ErrSessionNotFound) {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, describe(err))
		}
		return nil // keep closing the others
	})
	if n := failed.Load(); n > 0 {
		r.notef("%d sessions not closed (left to expire): %s", n, firstErr.Load())
	}
	if cctx.Err() != nil {
		r.notef("closing sessions stopped after %s (the rest expire)", limit)
	}
	took := time.Since(start)
	r.notef("closed %d sessions in %s, %d in flight (%.0f/s)", len(r.sessions), took.Round(time.Millisecond), CloseInFlight,
		float64(len(r.sessions))/took.Seconds())
	if n := r.k.lostClosing.Load(); n > 0 {
		r.notef("while closing, %d sessions not yet closed were lost (answered expired or unanswered for the TTL): the revokes starved their renewals", n)
	}
	fmt.Fprintf(r.log, "renewal: closed %d sessions in %s\n", len(r.sessions), took.Round(time.Millisecond))
}

// progress logs a line every few seconds until done closes.
func (r *run) progress(done <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	start := time.Now()
	var lastSent, lastAns, lastGranted int64
	lastSessions := 0
	last := start
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			secs := now.Sub(last).Seconds()
			sent, ans, granted := r.k.sent.Load(), r.k.answered.Load(), r.granted.Load()
			r.mu.Lock()
			sessions := len(r.sessions)
			r.mu.Unlock()
			fmt.Fprintf(r.log, "renewal: %s %s: %d/%d sessions (%.0f/s), %d/%d holds (%.0f/s); keepalives %.0f/s sent, %.0f/s answered, oldest unanswered %s; lost %d\n",
				r.phase.Load(), now.Sub(start).Round(time.Second),
				sessions, r.cfg.Sessions, float64(sessions-lastSessions)/secs,
				granted, r.cfg.Holds, float64(granted-lastGranted)/secs,
				float64(sent-lastSent)/secs, float64(ans-lastAns)/secs,
				r.k.oldestPending().Round(time.Millisecond), r.k.lost.Load())
			lastSent, lastAns, lastGranted, lastSessions, last = sent, ans, granted, sessions, now
		}
	}
}

func (r *run) notef(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// client is the connection identity ident's calls use.
func (r *run) client(ident int) lockv1.LockServiceClient { return r.clients[ident%len(r.clients)] }

// openSession opens a session of the class TTL as identity ident, with
// retries.
func (r *run) openSession(ctx context.Context, ident int) (int64, error) {
	var id int64
	err := retry(ctx, func(ctx context.Context) error {
		resp, err := r.client(ident).OpenSession(r.as(ctx, ident), &lockv1.OpenSessionRequest{Ttl: durationpb.New(rig.ClassTTL)})
		if err == nil {
			id = resp.GetSessionId()
		}
		return err
	})
	return id, err
}

// as makes ctx's calls come from identity ident (lockd's insecure loopback
// header).
func (r *run) as(ctx context.Context, ident int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, identity.InsecureIdentityHeader, rig.Identity(ident))
}

// parallel calls do n times, inflight at a time, until ctx ends or a call
// fails; it returns how many succeeded and the first error.
func parallel(ctx context.Context, n, inflight int, do func(context.Context) error) (int, error) {
	var started, done atomic.Int64
	var first atomic.Value
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range min(inflight, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && started.Add(1) <= int64(n) {
				if err := do(ctx); err != nil {
					if ctx.Err() == nil {
						first.CompareAndSwap(nil, err)
						cancel()
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	err, _ := first.Load().(error)
	return int(done.Load()), err
}

// retry calls f until it succeeds, fails with a code a retry cannot help,
// or fails four times.
func retry(ctx context.Context, f func(context.Context) error) error {
	var err error
	for attempt := range 4 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(100 * time.Millisecond << attempt):
			}
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err = f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !retryable(err) {
			return err
		}
	}
	return err
}

// retryable: the outcome is unknown (a timeout, lockd's store did not
// answer) or lockd refused for now (quota, rate limit, contention).
func retryable(err error) bool {
	d := client.Decode(err)
	if !client.Definite(d) {
		return true
	}
	for _, s := range []error{client.ErrQuota, client.ErrRateLimited, client.ErrSuperseded, client.ErrHeld} {
		if errors.Is(d, s) {
			return true
		}
	}
	return false
}

// describe renders a gRPC error as "Code: message".
func describe(err error) string {
	if err == nil {
		return "nothing"
	}
	if s, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", s.Code(), s.Message())
	}
	return err.Error()
}
