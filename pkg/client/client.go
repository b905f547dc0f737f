// Package client is the Go client for lockd.
//
// A Client opens one session per TTL on demand and shares it among all the
// holds of that TTL, renewing it with one keepalive every TTL/3. A *Lock
// tells its holder what it may still do:
//
//   - CanStart turns false at the first failed keepalive: finish the unit of
//     work in flight, start no new one.
//   - At the local deadline (the monotonic send time of the last successful
//     keepalive + TTL − 1s) the lock is lost: onFence runs and Done closes.
//     Because the deadline counts from the send time, it passes before the
//     store can expire the session for that keepalive. The deadline has its
//     own timer: no RPC in flight, hung or not, can delay it.
//   - When lockd says the hold is gone before the deadline — the session
//     expired, operators released it by force, or the epoch advanced after a
//     restore — onFence runs as soon as the answer arrives (Err says which).
//
// Neither stage can stop a holder that is paused (GC, SIGSTOP, a VM freeze)
// past its deadline: only a resource that compares Token on its write — a
// fenced class — rejects such a late write. For an advisory class the token
// orders grants and nothing more.
//
// Every Acquire returns its own *Lock, even for a key the client already
// holds on the same session (a re-entrant acquire, counted locally); each is
// released on its own, and each acquirer still holding is told of a loss.
// A release or an acquire whose outcome is unknown (a timeout, a broken
// connection) is resolved by the client in the background with its own
// bounded context; if it cannot learn the outcome it ends the session
// rather than renew a hold nobody knows about.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/pkg/locktrace"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

type options struct {
	target     string
	tls        *tls.Config
	insecureID string
	opToken    string
	log        *slog.Logger
	now        func() time.Time
	dial       []grpc.DialOption
	tp         trace.TracerProvider
}

// Option configures a Client.
type Option func(*options) error

// WithTarget sets lockd's address: host:port for one lockd; several
// lockds as "host1:port,host2:port,…" or "dns:///name:port" (every address
// the name resolves to). With several, every call about a key goes to the
// lockd the key hashes to (a ring hash on the key, RouteHeader), so the
// waiters for a key queue in one lockd's line, in arrival order; when that
// lockd is down its keys' calls go to the next lockd on the ring.
func WithTarget(addr string) Option {
	return func(o *options) error { o.target = addr; return nil }
}

// WithTLS sets the mTLS configuration (the caller's SVID and lockd's CA).
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) error { o.tls = cfg; return nil }
}

// WithInsecureIdentity talks plaintext to a lockd started with
// --insecure-loopback and claims spiffeID. For tests only.
func WithInsecureIdentity(spiffeID string) Option {
	return func(o *options) error { o.insecureID = spiffeID; return nil }
}

// WithOperatorToken sends an OIDC operator access token with every call
// ("authorization: Bearer …"), for the admin calls that need one. The
// token is a credential: it is never logged.
func WithOperatorToken(raw string) Option {
	return func(o *options) error { o.opToken = raw; return nil }
}

// bearer is per-call credentials with an OIDC access token.
type bearer struct {
	raw    string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.raw}, nil
}

// RequireTransportSecurity keeps the token off plaintext connections,
// except to a lockd started with --insecure-loopback (tests).
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// WithLogger sets the logger. Tokens are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithClock sets the clock. It must return monotonic readings (time.Now
// does); deadlines are computed from it.
func WithClock(now func() time.Time) Option {
	return func(o *options) error { o.now = now; return nil }
}

// WithDialOptions adds gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.dial = append(o.dial, opts...); return nil }
}

// WithTracerProvider traces the client's calls with tp instead of the
// global OpenTelemetry provider (otel.GetTracerProvider, which records
// nothing unless the program sets one). Each Acquire is a span, with the
// RPCs it makes as children, and so is the final Release of a hold; lockd
// continues the trace, sampled or not as the client decided. Spans carry
// the key's namespace, the class, the wait and the outcome's reason: never
// the key or a token. Background calls (keepalives, resolving an unknown
// outcome) start no trace.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error { o.tp = tp; return nil }
}

// Client talks to lockd. It is safe for concurrent use.
type Client struct {
	conn   *grpc.ClientConn
	lock   lockv1.LockServiceClient
	admin  lockv1.AdminServiceClient
	log    *slog.Logger
	now    func() time.Time
	ka     *keepalives
	tracer trace.Tracer
	// routed: calls go to one of several lockds, by the key they name
	// (route.go).
	routed bool

	// ctx ends when the client is closed; background work uses it.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup

	// mu guards the fields below. It is never held across an RPC.
	mu       sync.Mutex
	sessions map[slot]*session        // by TTL, and whether opened for unprotected grants
	classTTL map[string]time.Duration // "ns/name" -> TTL
	// nsClasses are the classes of a namespace as lockd listed them, for
	// the TTL of a key acquired without a class (lockd decides the class).
	nsClasses map[string][]*lockv1.LockClass
	closed    bool
}

// New connects to lockd. Nothing is sent until the first call.
func New(opts ...Option) (*Client, error) {
	o := options{log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.target == "" {
		return nil, fmt.Errorf("%w: no lockd address: use WithTarget or a config context", ErrConfig)
	}
	tp := o.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	dial := append([]grpc.DialOption{locktrace.ClientHandler(tp)}, o.dial...)
	switch {
	case o.insecureID != "":
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(InsecureIdentity(o.insecureID)))
	case o.tls != nil:
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(o.tls)))
	default:
		return nil, fmt.Errorf("%w: no credentials: use WithTLS, a config context, or WithInsecureIdentity for tests", ErrConfig)
	}
	if o.opToken != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{raw: o.opToken, secure: o.insecureID == ""}))
	}
	target, routeOpts, routed, err := dialTarget(o.target)
	if err != nil {
		return nil, err
	}
	dial = append(dial, routeOpts...)
	dial = append(dial, grpc.WithChainUnaryInterceptor(routeUnary))
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", o.target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		conn: conn, lock: lockv1.NewLockServiceClient(conn), admin: lockv1.NewAdminServiceClient(conn),
		log: o.log, now: o.now, ctx: ctx, cancel: cancel, tracer: tp.Tracer(tracerName),
		sessions: map[slot]*session{}, classTTL: map[string]time.Duration{}, nsClasses: map[string][]*lockv1.LockClass{},
		routed: routed,
	}
	c.ka = newKeepalives(c)
	return c, nil
}

// LockService returns the raw lock.v1 client (for inspection tools).
func (c *Client) LockService() lockv1.LockServiceClient { return c.lock }

// AdminService returns the raw lock.v1 admin client.
func (c *Client) AdminService() lockv1.AdminServiceClient { return c.admin }

// tracerName names the client's spans' instrumentation scope.
const tracerName = "github.com/lockd-dev/lockd/pkg/client"

// closeTimeout bounds Close.
const closeTimeout = 5 * time.Second

// Close closes every session (releasing its holds at lockd) and the
// connection, within closeTimeout: Shutdown with that deadline. Locks still
// held end with ErrClosed; their onFence does not run.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown closes every session (releasing its holds at lockd) and the
// connection. While lockd or its store is unavailable it keeps asking
// lockd to end each session, and each session the client gave up earlier,
// until they are ended or ctx is done: a holder that shuts down in an
// etcd outage then frees its keys as soon as the store is back, rather
// than when its sessions expire (etcd renews every lease when it elects a
// leader, so that is a TTL after the outage). Locks still held end with
// ErrClosed; their onFence does not run.
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	sessions := make([]*session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	var ending sync.WaitGroup
	for _, s := range sessions {
		s.lose(ErrClosed, false)
		ending.Go(func() { c.endSession(s.id, s.slot.route) })
	}
	ended := make(chan struct{})
	go func() { ending.Wait(); c.bg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-ctx.Done():
	}
	c.cancel()
	c.ka.close()
	ending.Wait()
	c.bg.Wait()
	return c.conn.Close()
}

// AcquireOption configures one Acquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	wait     time.Duration
	leak     bool
	onLeaked func(LeakedHold)
}

// Wait waits up to d in line for the key (default: try once).
func Wait(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.wait = d } }

// WaitOutLeak makes an Acquire with a Wait also wait, within that wait,
// for a hold of the key by this same identity under another session to
// lapse, instead of failing at once with ErrLeak: the case of a process that
// crashed and restarts under the same SPIFFE ID (a StatefulSet pod) before
// its predecessor's session has expired. onLeaked, when set, is called once,
// with what it waits for. If the hold is still there when the wait runs
// out, Acquire fails with an error that matches both ErrWaitTimeout and
// ErrLeak.
//
// The hold it waits for is only ever ended by lockd (its session lapses, or
// it is released): nothing is taken from its holder. If the other session is
// alive — two live processes sharing one identity — the wait never clears;
// give each process its own SPIFFE ID.
func WaitOutLeak(onLeaked func(LeakedHold)) AcquireOption {
	return func(o *acquireOptions) { o.leak, o.onLeaked = true, onLeaked }
}

// LeakedHold is a hold of the key by the caller's own identity under
// another session, as lockd's Inspect shows it.
type LeakedHold struct {
	Key string
	// Session is the holding session; 0 when Inspect could not tell.
	Session int64
	// SessionTTLLeft is how long that session has left by the store's
	// clock, if it is not renewed; 0 when unknown.
	SessionTTLLeft time.Duration
}

// leakPoll is how often an Acquire waiting out a leaked hold asks again.
const leakPoll = time.Second

// acquireSlack is how much longer than the wait an Acquire RPC may take
// when the caller's context has no earlier deadline: every call is bounded.
const acquireSlack = 10 * time.Second

// Acquire takes key. Its class is the key's own, decided in review (the
// class of the key's namespace owning the longest prefix of it): pass ""
// for class, or name that class ("name" or "namespace/name") to have lockd
// refuse with ErrClassMismatch if the key belongs to another. Lock.Class
// says which class the key was granted under. onFence is required: it runs
// (once, on its own goroutine) when the lock is lost by expiry,
// force-release, an epoch advance or at the local deadline, and the holder
// must stop acting on the guarded resource.
//
// Acquiring a key this client already holds in the same session returns a
// new *Lock for the same hold without calling lockd; the hold ends at lockd
// when the last of its Locks is released. An Acquire of a key whose release
// (or whose earlier unknown acquire) is still being settled waits for that,
// then asks lockd for a new grant. ctx bounds the whole call.
//
// When the outcome is unknown (an error for which Definite is false), the
// hold may exist at lockd: the client finds out and releases it in the
// background, and a later Acquire of the key waits for that.
func (c *Client) Acquire(ctx context.Context, key, class string, onFence func(*Lock), opts ...AcquireOption) (_ *Lock, err error) {
	if onFence == nil {
		return nil, ErrNoFence
	}
	var ao acquireOptions
	for _, o := range opts {
		o(&ao)
	}
	start := time.Now()
	ctx, span := c.tracer.Start(ctx, "lockd.client/Acquire", trace.WithAttributes(
		locktrace.Namespace(key), locktrace.AttrClass.String(class), locktrace.Seconds(locktrace.AttrWaitRequested, ao.wait)))
	defer func() {
		span.SetAttributes(locktrace.Seconds(locktrace.AttrWaited, time.Since(start)))
		locktrace.End(span, err, Reason(err))
	}()
	if !ao.leak || ao.wait <= 0 {
		return c.acquire(ctx, key, class, onFence, ao.wait)
	}
	return c.acquireWaitingOutLeak(ctx, key, class, onFence, ao)
}

// acquireWaitingOutLeak is Acquire with WaitOutLeak: on ErrLeak it asks
// again every leakPoll, with what is left of the wait, until the leaked
// hold lapses or the wait runs out.
func (c *Client) acquireWaitingOutLeak(ctx context.Context, key, class string, onFence func(*Lock), ao acquireOptions) (*Lock, error) {
	deadline := time.Now().Add(ao.wait)
	told := false
	for {
		l, err := c.acquire(ctx, key, class, onFence, max(time.Until(deadline), 0))
		if !errors.Is(err, ErrLeak) {
			return l, err
		}
		if !told && ao.onLeaked != nil {
			ao.onLeaked(c.leakedHold(ctx, key))
		}
		told = true
		left := time.Until(deadline)
		if left <= 0 {
			return nil, &leakTimeoutError{wait: ao.wait, err: err}
		}
		t := time.NewTimer(min(leakPoll, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-c.ctx.Done():
			t.Stop()
			return nil, ErrClosed
		case <-t.C:
		}
	}
}

// leakedHold asks lockd who holds key (best effort: zero fields when it
// cannot tell).
func (c *Client) leakedHold(ctx context.Context, key string) LeakedHold {
	out := LeakedHold{Key: key}
	ictx, cancel := context.WithTimeout(ctx, resolveAttemptTimeout)
	defer cancel()
	r, err := c.lock.Inspect(ictx, &lockv1.InspectRequest{Key: key})
	if err != nil || !r.GetHeld() {
		return out
	}
	out.Session = r.GetHold().GetSessionId()
	out.SessionTTLLeft = r.GetHold().GetSessionTtlLeft().AsDuration()
	return out
}

// leakTimeoutError: the wait ran out with the key still held by this
// identity under another session.
type leakTimeoutError struct {
	wait time.Duration
	err  error // lockd's LEAK refusal
}

func (e *leakTimeoutError) Error() string {
	msg := e.err.Error()
	if st, ok := status.FromError(e.err); ok {
		msg = st.Message()
	}
	return fmt.Sprintf("%s (waited %s for it to lapse)", msg, e.wait)
}

func (e *leakTimeoutError) Unwrap() []error { return []error{ErrWaitTimeout, e.err} }

// acquire is one Acquire (with its wait), without WaitOutLeak.
func (c *Client) acquire(ctx context.Context, key, class string, onFence func(*Lock), wait time.Duration) (*Lock, error) {
	ttl, err := c.ttlOf(ctx, key, class)
	if err != nil {
		return nil, err
	}
	retried, noQuorum := false, false
	for {
		s, err := c.sessionIn(ctx, slot{ttl: ttl, noQuorum: noQuorum}, key)
		if err != nil {
			return nil, err
		}
		h, l, err := s.enter(ctx, key, class, onFence)
		if errors.Is(err, errSessionLost) {
			continue // lost while we looked: the next call opens another
		}
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil // re-entrant: the hold is this session's already
		}
		l, err = c.grant(ctx, s, h, wait, onFence)
		if err == nil {
			return l, nil
		}
		switch {
		case !noQuorum && errors.Is(err, ErrNoQuorumSession):
			noQuorum = true // ask again on a session opened without quorum
			continue
		case !retried && errors.Is(err, ErrSessionNotFound):
			s.lose(ErrExpired, true) // the session is gone at lockd: open another
		case !retried && errors.Is(err, ErrSessionTTL):
			c.forgetClass(key, class) // the class TTL (or the key's class) changed: look it up again
			if ttl, err = c.ttlOf(ctx, key, class); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
		retried = true
	}
}

// grant asks lockd for the hold h stands for and settles h with the answer.
//
// An answer that leaves the outcome unknown (lockd restarting, a broken
// connection, the store not answering) is asked again, on the same session,
// while the wait has time left: lockd answers a session's repeated Acquire
// with its hold if the first one was granted, and a waiter in a durable
// line keeps its place. When the wait is over, the hold is resolved in the
// background.
func (c *Client) grant(ctx context.Context, s *session, h *hold, wait time.Duration, onFence func(*Lock)) (*Lock, error) {
	deadline := time.Now().Add(wait)
	movingUntil := time.Now().Add(max(wait, MovingRetry))
	backoff := retryBackoff
	for {
		left := max(time.Until(deadline), 0)
		if wait == 0 {
			left = 0
		}
		rctx, cancel := context.WithTimeout(ctx, left+acquireSlack)
		s.mu.Lock()
		known, retired := s.leasesLocked()
		s.mu.Unlock()
		sent := c.now()
		resp, err := c.lock.Acquire(rctx, &lockv1.AcquireRequest{
			SessionId: s.id, Key: h.key, Class: h.class, Wait: durationpb.New(left),
			ClusterLeases: known, RetiredLeases: retired,
		})
		cancel()
		err = decode(err)
		switch {
		case err == nil:
			return s.granted(h, resp, sent, onFence), nil
		case errors.Is(err, ErrMoving) && ctx.Err() == nil && c.ctx.Err() == nil:
			// Nothing was granted; the range is served again once its
			// move completes, or at once by the map lockd has just read.
			left := time.Until(movingUntil)
			pause := min(max(retryAfter(err, retryBackoff), 10*time.Millisecond), time.Second, left)
			if left > 10*time.Millisecond {
				c.log.Info("acquire: the key's range is moving; asking again", "key", h.key, "after", pause)
				c.sleep(pause)
				continue
			}
			s.settle(h)
			return nil, err
		case Definite(err):
			s.settle(h) // lockd refused: nothing was granted
			return nil, err
		}
		if wait > 0 && time.Until(deadline) > backoff && ctx.Err() == nil && c.ctx.Err() == nil && s.alive() {
			c.log.Info("acquire: outcome unknown; asking again on the same session", "key", h.key, "session", s.id, "err", err)
			c.sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		// Unknown: lockd may have granted it on this session. Find out and
		// release it; until then, acquires of the key on this session wait.
		if !c.background(func() { s.resolveAcquire(h) }) {
			s.settle(h) // closed: Close ends the session at lockd
		}
		return nil, err
	}
}

// MovingRetry is how long an Acquire without a wait keeps asking again
// when lockd answers MOVING (a range being moved, a shard map changing); an
// Acquire with a wait asks again for as long as it waits.
const MovingRetry = time.Second

// retryBackoff is the first pause before a waiting Acquire whose outcome
// was unknown is asked again (doubling to 1s).
const retryBackoff = 100 * time.Millisecond

// background runs f on its own goroutine; Close waits for it. It runs
// nothing and returns false once the client is closed.
func (c *Client) background(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		f()
	}()
	return true
}

func classRef(key, class string) string {
	if strings.Contains(class, "/") {
		return class
	}
	ns, _, _ := strings.Cut(key, "/")
	return ns + "/" + class
}

func (c *Client) forgetClass(key, class string) {
	c.mu.Lock()
	if class == "" {
		ns, _, _ := strings.Cut(key, "/")
		delete(c.nsClasses, ns)
	} else {
		delete(c.classTTL, classRef(key, class))
	}
	c.mu.Unlock()
}

// ttlOf returns the TTL of the class key is acquired under, asking lockd
// once per class (once per namespace for a key acquired without a class).
func (c *Client) ttlOf(ctx context.Context, key, class string) (time.Duration, error) {
	if class == "" {
		return c.keyTTL(ctx, key)
	}
	ref := classRef(key, class)
	c.mu.Lock()
	ttl, ok := c.classTTL[ref]
	c.mu.Unlock()
	if ok {
		return ttl, nil
	}
	ns, name, _ := strings.Cut(ref, "/")
	resp, err := c.lock.DescribeClass(ctx, &lockv1.DescribeClassRequest{Namespace: ns, Name: name})
	if err != nil {
		return 0, decode(err)
	}
	ttl = resp.GetClass().GetTtl().AsDuration()
	c.mu.Lock()
	c.classTTL[ref] = ttl
	c.mu.Unlock()
	return ttl, nil
}

// keyTTL is the TTL of key's own class: the class of its namespace owning
// the longest prefix of it, from lockd's list of the namespace's classes
// (asked once, and again when a TTL no longer matches). It is only the TTL
// of the session to acquire on: lockd decides the class. When no class
// owns key even in a fresh list, lockd is asked to refuse the key, so the
// caller gets its answer (NO_CLASS, or DENIED for a key it may not lock).
func (c *Client) keyTTL(ctx context.Context, key string) (time.Duration, error) {
	ns, _, _ := strings.Cut(key, "/")
	c.mu.Lock()
	owner := ownerOf(c.nsClasses[ns], key)
	c.mu.Unlock()
	if owner == nil { // not listed yet, or a class added since
		resp, err := c.lock.ListClasses(ctx, &lockv1.ListClassesRequest{Namespace: ns})
		if err != nil {
			return 0, decode(err)
		}
		c.mu.Lock()
		c.nsClasses[ns] = resp.GetClasses()
		c.mu.Unlock()
		owner = ownerOf(resp.GetClasses(), key)
	}
	if owner != nil {
		return owner.GetTtl().AsDuration(), nil
	}
	// No session is read before the key's class is checked: lockd answers
	// this with its refusal of the key, and nothing is granted.
	_, err := c.lock.Acquire(ctx, &lockv1.AcquireRequest{Key: key})
	if err = decode(err); Definite(err) && !errors.Is(err, ErrSessionNotFound) {
		return 0, err
	}
	// A class owns it by now, or lockd did not answer: say what is known.
	return 0, fmt.Errorf("%w: lockd listed no class of namespace %s owning %s (%v)", ErrNoClass, ns, key, err)
}

// ownerOf is the class in list owning the longest prefix of key, or nil.
func ownerOf(list []*lockv1.LockClass, key string) *lockv1.LockClass {
	var best *lockv1.LockClass
	n := -1
	for _, c := range list {
		for _, p := range c.GetKeys() {
			if len(p) > n && strings.HasPrefix(key, p) {
				best, n = c, len(p)
			}
		}
	}
	return best
}

// ValidateToken asks lockd whether tok is the current grant's token for
// key. The answer is a linearizable read and is NOT atomic with the
// caller's next write: use it only for resources that cannot compare a
// fence in their own conditional write. Calls are rate-limited per
// identity (ErrRateLimited).
func (c *Client) ValidateToken(ctx context.Context, key string, tok uint64) (*lockv1.ValidateTokenResponse, error) {
	resp, err := c.lock.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: tok})
	return resp, decode(err)
}
