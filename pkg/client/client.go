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
//     store can expire the session for that keepalive.
//
// Neither stage can stop a holder that is paused (GC, SIGSTOP, a VM freeze)
// past its deadline: only a resource that compares Token on its write — a
// fenced class — rejects such a late write. For an advisory class the token
// orders grants and nothing more.
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/pkg/identity"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Lost reasons and client errors.
var (
	// ErrExpired: lockd answered a keepalive with an expired session; every
	// hold of the session is gone.
	ErrExpired = errors.New("client: lock lost: session expired")
	// ErrDeadline: no keepalive succeeded in time (lockd or etcd
	// unreachable); the local deadline passed and the holder must stop.
	ErrDeadline = errors.New("client: lock lost: local deadline passed without a successful keepalive")
	// ErrEpoch: the store was restored and an operator advanced the epoch;
	// every hold of the earlier epoch is gone. Acquire again.
	ErrEpoch = errors.New("client: lock lost: the store was restored and the epoch advanced")
	// ErrReleased: the lock was released by its holder.
	ErrReleased = errors.New("client: lock released")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrNoFence: Acquire needs an onFence callback.
	ErrNoFence = errors.New("client: onFence is required: it is how the holder learns to stop")
)

type options struct {
	target     string
	tls        *tls.Config
	insecureID string
	opToken    string
	log        *slog.Logger
	now        func() time.Time
	dial       []grpc.DialOption
}

// Option configures a Client.
type Option func(*options) error

// WithTarget sets lockd's address (host:port).
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

// Client talks to lockd. It is safe for concurrent use.
type Client struct {
	conn  *grpc.ClientConn
	lock  lockv1.LockServiceClient
	admin lockv1.AdminServiceClient
	log   *slog.Logger
	now   func() time.Time

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	sessions map[time.Duration]*session // by TTL
	classTTL map[string]time.Duration   // "ns/name" -> TTL
	holds    map[holdID]*Lock
	ka       *kaStream
	closed   bool
}

type holdID struct {
	session int64
	key     string
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
	dial := append([]grpc.DialOption{}, o.dial...)
	switch {
	case o.insecureID != "":
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(identity.InsecurePerRPC(o.insecureID)))
	case o.tls != nil:
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(o.tls)))
	default:
		return nil, fmt.Errorf("%w: no credentials: use WithTLS, a config context, or WithInsecureIdentity for tests", ErrConfig)
	}
	if o.opToken != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{raw: o.opToken, secure: o.insecureID == ""}))
	}
	conn, err := grpc.NewClient(o.target, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", o.target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		conn: conn, lock: lockv1.NewLockServiceClient(conn), admin: lockv1.NewAdminServiceClient(conn),
		log: o.log, now: o.now, ctx: ctx, cancel: cancel,
		sessions: map[time.Duration]*session{}, classTTL: map[string]time.Duration{}, holds: map[holdID]*Lock{},
	}, nil
}

// LockService returns the raw lock.v1 client (for inspection tools).
func (c *Client) LockService() lockv1.LockServiceClient { return c.lock }

// AdminService returns the raw lock.v1 admin client.
func (c *Client) AdminService() lockv1.AdminServiceClient { return c.admin }

// Close closes every session (releasing its holds) and the connection.
func (c *Client) Close() error {
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range sessions {
		s.lose(ErrClosed, false)
		_, _ = c.lock.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: s.id})
	}
	c.cancel()
	return c.conn.Close()
}

// AcquireOption configures one Acquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct{ wait time.Duration }

// Wait waits up to d in line for the key (default: try once).
func Wait(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.wait = d } }

// Acquire takes key under class. onFence is required: it runs (once, on its
// own goroutine) when the lock is lost by expiry or at the local deadline,
// and the holder must stop acting on the guarded resource. Acquiring a key
// this client already holds in the same session increments a count instead
// of calling lockd; only the final Release reaches lockd.
func (c *Client) Acquire(ctx context.Context, key, class string, onFence func(*Lock), opts ...AcquireOption) (*Lock, error) {
	if onFence == nil {
		return nil, ErrNoFence
	}
	var ao acquireOptions
	for _, o := range opts {
		o(&ao)
	}
	ttl, err := c.ttlOf(ctx, key, class)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		s, err := c.session(ctx, ttl)
		if err != nil {
			return nil, err
		}
		if l := c.reenter(s, key); l != nil {
			return l, nil
		}
		resp, err := c.lock.Acquire(ctx, &lockv1.AcquireRequest{
			SessionId: s.id, Key: key, Class: class, Wait: durationpb.New(ao.wait),
		})
		if err != nil {
			code := status.Code(err)
			if attempt == 0 && code == codes.NotFound {
				s.lose(ErrExpired, true) // the session is gone: open another
				continue
			}
			if attempt == 0 && code == codes.FailedPrecondition && strings.Contains(err.Error(), "session TTL") {
				c.forgetClass(key, class)
				if ttl, err = c.ttlOf(ctx, key, class); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		return c.register(s, key, class, resp.GetToken(), onFence), nil
	}
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
	delete(c.classTTL, classRef(key, class))
	c.mu.Unlock()
}

// ttlOf returns the class TTL, asking lockd once per class.
func (c *Client) ttlOf(ctx context.Context, key, class string) (time.Duration, error) {
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
		return 0, err
	}
	ttl = resp.GetClass().GetTtl().AsDuration()
	c.mu.Lock()
	c.classTTL[ref] = ttl
	c.mu.Unlock()
	return ttl, nil
}

func (c *Client) reenter(s *session, key string) *Lock {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.holds[holdID{s.id, key}]
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil
	}
	l.count++
	return l
}

func (c *Client) register(s *session, key, class string, tok *lockv1.Token, onFence func(*Lock)) *Lock {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := holdID{s.id, key}
	if l := c.holds[id]; l != nil && l.token == tok.GetValue() && l.Err() == nil {
		l.mu.Lock()
		l.count++
		l.mu.Unlock()
		return l
	}
	l := &Lock{c: c, s: s, key: key, class: class, token: tok.GetValue(), epoch: tok.GetEpoch(),
		onFence: onFence, done: make(chan struct{}), count: 1}
	c.holds[id] = l
	s.mu.Lock()
	s.locks[key] = l
	lost := s.lost
	s.mu.Unlock()
	if lost != nil {
		l.lose(lost, true)
	}
	return l
}

// Lock is a granted hold.
type Lock struct {
	c       *Client
	s       *session
	key     string
	class   string
	token   uint64
	epoch   uint32
	onFence func(*Lock)
	done    chan struct{}

	mu    sync.Mutex
	count int
	err   error
}

// Key is the locked key.
func (l *Lock) Key() string { return l.key }

// Class is the class the lock was acquired under.
func (l *Lock) Class() string { return l.class }

// Token is the fencing token: present it on every write to the guarded
// resource, which must reject a token not greater than the last it
// accepted. Never log it.
func (l *Lock) Token() uint64 { return l.token }

// Epoch is the token's epoch (diagnostics).
func (l *Lock) Epoch() uint32 { return l.epoch }

// CanStart reports whether a new unit of work may start: false from the
// first failed keepalive, and once the lock is lost or released.
func (l *Lock) CanStart() bool {
	if l.Err() != nil {
		return false
	}
	return l.s.healthy()
}

// RemainingTTL is the time left before the local deadline.
func (l *Lock) RemainingTTL() time.Duration {
	if l.Err() != nil {
		return 0
	}
	return l.s.remaining()
}

// Done is closed when the lock is lost or released.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Err is why the lock ended: ErrExpired, ErrDeadline, ErrReleased,
// ErrClosed; nil while held.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lose ends the lock with err; fence says whether onFence runs.
func (l *Lock) lose(err error, fence bool) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	close(l.done)
	l.mu.Unlock()
	l.c.mu.Lock()
	if cur := l.c.holds[holdID{l.s.id, l.key}]; cur == l {
		delete(l.c.holds, holdID{l.s.id, l.key})
	}
	l.c.mu.Unlock()
	if fence {
		go l.onFence(l)
	}
}

// Release drops one count; the final release ends the hold at lockd. A
// release of a lock already lost returns its lost reason.
func (l *Lock) Release(ctx context.Context) error {
	_, err := l.ReleaseHeld(ctx)
	return err
}

// ReleaseHeld is Release that also reports whether lockd still held the
// lock with this token when the final release reached it. False with a nil
// error means the hold had already ended (it expired, or was removed) before
// the release: work done since the last CanStart may have overlapped another
// holder's, which only the resource's fence can have stopped. A nested
// (non-final) release reports true.
func (l *Lock) ReleaseHeld(ctx context.Context) (bool, error) {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		if errors.Is(err, ErrReleased) {
			return false, nil
		}
		return false, err
	}
	l.count--
	if l.count > 0 {
		l.mu.Unlock()
		return true, nil
	}
	l.mu.Unlock()
	resp, err := l.c.lock.Release(ctx, &lockv1.ReleaseRequest{SessionId: l.s.id, Key: l.key, Token: l.token})
	l.s.mu.Lock()
	if l.s.locks[l.key] == l {
		delete(l.s.locks, l.key)
	}
	l.s.mu.Unlock()
	l.lose(ErrReleased, false)
	return resp.GetReleased(), err
}

// ValidateToken asks lockd whether tok is the current grant's token for
// key. The answer is a linearizable read and is NOT atomic with the
// caller's next write: use it only for resources that cannot compare a
// fence in their own conditional write. Calls are rate-limited per
// identity (codes.ResourceExhausted).
func (c *Client) ValidateToken(ctx context.Context, key string, tok uint64) (*lockv1.ValidateTokenResponse, error) {
	return c.lock.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: tok})
}
