// Package arbiter is lockd's grant path on etcd.
//
// Sessions are etcd leases owned by one SPIFFE identity; every hold is a key
// attached to its session's lease, so a session's expiry releases all of its
// holds in one committed entry. A grant is one transaction comparing the hold
// key's absence and the epoch record; its fencing token is epoch<<48 | the
// transaction's commit revision. Waiters queue in memory per key, in arrival
// order, on this arbiter only; a watch event is a hint that makes the head
// waiter try its own full transaction, never a grant by itself.
//
// The arbiter compares the cluster ID in every etcd response header with the
// one in the epoch record. A mismatch means the store was restored: the
// arbiter seals and refuses every grant until the epoch advances.
package arbiter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"

	"github.com/lockd-dev/lockd/pkg/authz"
	"github.com/lockd-dev/lockd/pkg/class"
)

// Key layout in etcd.
const (
	holdPrefix    = "/l/"
	queuePrefix   = "/q/"
	sessionPrefix = "/s/"
	epochKey      = "/sys/epoch"
	// graceKey exists, on a lease of the longest class TTL, from an epoch
	// advance until every holder of the old epoch has been fenced: no grant
	// is made while it exists (see AdvanceEpoch).
	graceKey = "/sys/epoch-grace"
)

// Config configures an Arbiter.
type Config struct {
	// Client is the etcd client (KV, Watch, Lease grant/revoke/TTL).
	Client *clientv3.Client
	// Leases is the raw lease client keepalives are forwarded on.
	Leases pb.LeaseClient
	// Operators are the SPIFFE IDs allowed to see tokens of others and to
	// advance the epoch.
	Operators []string
	// OIDCOperators: operators sign in with OIDC, verified at the gRPC
	// boundary, which passes them as "oidc:<subject>". Only the boundary
	// can produce such an identity (callers' own are SPIFFE IDs).
	OIDCOperators bool
	// Logger receives one structured line per event; tokens are never logged.
	Logger *slog.Logger
	// Now is the clock for diagnostics (acquired-at, ages); grants never
	// depend on it.
	Now func() time.Time
	// RequestTimeout bounds each etcd call (default 5s); a caller's shorter
	// deadline wins.
	RequestTimeout time.Duration
	// PollInterval is how often a queued waiter re-tries without a watch
	// event (default 1s, with jitter).
	PollInterval time.Duration
	// EpochRefresh is how often the epoch record is re-read (default 2s).
	EpochRefresh time.Duration
	// Metrics receives counts; nil uses a private registry.
	Metrics *Metrics
	// ValidateRate and ValidateBurst limit ValidateToken calls per identity
	// (defaults DefaultValidateRate and DefaultValidateBurst).
	ValidateRate  float64
	ValidateBurst int
}

// Policy is one consistent snapshot of classes and the grants compiled from
// them.
type Policy struct {
	Classes *class.Set
	Authz   *authz.Authorizer
}

// NewPolicy compiles a class set.
func NewPolicy(set *class.Set) *Policy {
	return &Policy{Classes: set, Authz: authz.New(set)}
}

// Arbiter serves grants. It is safe for concurrent use.
type Arbiter struct {
	cli       *clientv3.Client
	leases    pb.LeaseClient
	operators map[string]bool
	admin     adminKV // the admin operations' limited view of etcd
	oidcOps   bool
	log       *slog.Logger
	now       func() time.Time
	timeout   time.Duration
	poll      time.Duration
	refresh   time.Duration
	metrics   *Metrics

	policy atomic.Pointer[Policy]
	epoch  atomic.Pointer[epochState]

	qmu    sync.Mutex
	queues map[string]*queue

	sessions sync.Map // int64 -> *sessionInfo

	validate validateLimits

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// New returns an arbiter serving policy. Call Start before serving.
func New(cfg Config, policy *Policy) (*Arbiter, error) {
	if cfg.Client == nil || cfg.Leases == nil {
		return nil, fmt.Errorf("%w: arbiter needs an etcd client and lease client", ErrInvalid)
	}
	a := &Arbiter{
		cli:       cfg.Client,
		leases:    cfg.Leases,
		operators: map[string]bool{},
		admin:     adminKV{kv: cfg.Client},
		oidcOps:   cfg.OIDCOperators,
		log:       cfg.Logger,
		now:       cfg.Now,
		timeout:   cfg.RequestTimeout,
		poll:      cfg.PollInterval,
		refresh:   cfg.EpochRefresh,
		metrics:   cfg.Metrics,
		validate:  validateLimits{rate: rate.Limit(cmp.Or(cfg.ValidateRate, DefaultValidateRate)), burst: cmp.Or(cfg.ValidateBurst, DefaultValidateBurst)},
		queues:    map[string]*queue{},
	}
	for _, op := range cfg.Operators {
		a.operators[op] = true
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.timeout == 0 {
		a.timeout = 5 * time.Second
	}
	if a.poll == 0 {
		a.poll = time.Second
	}
	if a.refresh == 0 {
		a.refresh = 2 * time.Second
	}
	if a.metrics == nil {
		a.metrics = NewMetrics(nil)
	}
	a.policy.Store(policy)
	return a, nil
}

// SetPolicy replaces the classes and grants served, atomically.
func (a *Arbiter) SetPolicy(p *Policy) { a.policy.Store(p) }

// Policy returns the policy being served.
func (a *Arbiter) Policy() *Policy { return a.policy.Load() }

// IsOperator reports whether id is an operator identity: one of Operators,
// or, with OIDCOperators, an operator the boundary verified ("oidc:…").
func (a *Arbiter) IsOperator(id string) bool {
	return a.operators[id] || (a.oidcOps && strings.HasPrefix(id, "oidc:"))
}

// Metrics returns the arbiter's metrics.
func (a *Arbiter) Metrics() *Metrics { return a.metrics }

// Start loads (or creates) the epoch record and starts background work: the
// epoch refresher and the session watcher. It fails if etcd cannot be
// reached within ctx.
func (a *Arbiter) Start(ctx context.Context) error {
	if err := a.initEpoch(ctx); err != nil {
		return err
	}
	bg, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	a.wg.Add(3)
	go func() { defer a.wg.Done(); a.refreshEpochLoop(bg) }()
	go func() { defer a.wg.Done(); a.watchSessions(bg) }()
	go func() { defer a.wg.Done(); a.collectLoop(bg, 15*time.Second) }()
	return nil
}

// Close stops background work. Waiters still queued get ErrUnavailable.
func (a *Arbiter) Close() {
	if a.stop != nil {
		a.stop()
	}
	a.wg.Wait()
}

// callCtx derives the context for one etcd call: the arbiter's request
// timeout, or a little less than the caller's deadline so the caller hears
// Unavailable before its own deadline passes.
func (a *Arbiter) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d := a.timeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		margin := left / 20
		if margin > 100*time.Millisecond {
			margin = 100 * time.Millisecond
		}
		if left-margin < d {
			d = left - margin
		}
	}
	return context.WithTimeout(ctx, d)
}

// storeErr classifies an etcd error. The caller's own cancellation passes
// through; a lease that is gone is ErrSessionNotFound; everything else
// (timeouts, no leader, lost connections, a store that refuses writes) is
// ErrUnavailable: the store did not serve the request, so nothing was granted
// from memory, though a timed-out write may still have committed.
func storeErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if isLeaseNotFound(err) {
		return ErrSessionNotFound
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) ||
		strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())
}

func holdKey(key string) string { return holdPrefix + key }
