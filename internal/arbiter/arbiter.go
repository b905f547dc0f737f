// Package arbiter is lockd's grant path on etcd.
//
// Sessions are etcd leases owned by one SPIFFE identity; every hold is a key
// attached to its session's lease, so a session's expiry releases all of its
// holds in one committed entry. A grant is one transaction comparing the hold
// key's absence and the epoch record; its fencing token is epoch<<48 | the
// transaction's commit revision. Waiters queue in memory per key, in arrival
// order, on this arbiter only, or, for a class with durable fairness, in a
// line of keys in etcd shared by every arbiter (durable.go); a watch event
// is a hint that makes the head waiter try its own full transaction, never
// a grant by itself.
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
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"

	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
	"github.com/lockd-dev/lockd/internal/spool"
)

// Key layout in etcd.
const (
	holdPrefix    = keyspace.HoldPrefix
	queuePrefix   = keyspace.QueuePrefix
	sessionPrefix = keyspace.SessionPrefix
	epochKey      = keyspace.EpochKey
	// graceKey exists, on a lease of the longest class TTL, from an epoch
	// advance until every holder of the old epoch has been fenced: no grant
	// is made while it exists (see AdvanceEpoch).
	graceKey = keyspace.GraceKey
)

// Config configures an Arbiter.
type Config struct {
	// Client is the etcd client (KV, Watch, Lease grant/revoke/TTL).
	Client *clientv3.Client
	// Leases is the raw lease client keepalives are forwarded on.
	Leases pb.LeaseClient
	// KV is the raw KV client of Client's cluster, which grants, releases
	// and handoffs are sent on (internal/etcdop). Optional when Client has
	// a connection of its own (one is made on it); required for an
	// in-process client (store.Backend.KV).
	KV pb.KVClient
	// Operators are the SPIFFE IDs allowed to see tokens of others and to
	// advance the epoch.
	Operators []string
	// OIDCOperators: operators sign in with OIDC, verified at the gRPC
	// boundary, which passes them as operator Callers. Only the boundary
	// builds a Caller (callers' own are SPIFFE workloads).
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
	// MaxBatch is how many grants and releases of different keys one etcd
	// Txn may commit together (group commit, default 64); 1 commits each in
	// its own. Keys granted in one batch share a token value.
	MaxBatch int
	// MaxTxnOps is the etcd clusters' --max-txn-ops (default 128, etcd's
	// own): a batch never needs more.
	MaxTxnOps int
	// EpochRefresh is how often the epoch record is re-read (default 1s).
	EpochRefresh time.Duration
	// MaxEpochAge bounds the age of the epoch read a keepalive answer is
	// credited with (default 3s): a keepalive lockd cannot vouch for with a
	// recent enough read is answered uncredited. An advance's grace is sized from it.
	MaxEpochAge time.Duration
	// StateFile, when set, is where the arbiter remembers the highest epoch
	// it has served (with its cluster ID and revision): a store behind it is
	// sealed at start. lockd keeps it in its data dir.
	StateFile string
	// Bootstrap says when the arbiter may create the epoch record itself;
	// by default it never does, and a store without one is sealed.
	Bootstrap Bootstrap
	// MaxSessionsPerIdentity and MaxWaitersPerIdentity bound what one
	// identity may have open on this arbiter (defaults
	// DefaultMaxSessionsPerIdentity and DefaultMaxWaitersPerIdentity).
	MaxSessionsPerIdentity int
	MaxWaitersPerIdentity  int
	// Metrics receives counts; nil uses a private registry.
	Metrics *Metrics
	// ValidateRate and ValidateBurst limit ValidateToken calls per identity
	// (defaults DefaultValidateRate and DefaultValidateBurst).
	ValidateRate  float64
	ValidateBurst int
	// SpoolDir, when set, turns the open posture on (open.go): the
	// directory of the spool that records unprotected grants. Without it,
	// a class with onQuorumLoss: open is closed on quorum loss like any.
	SpoolDir string
	// ArbiterID names this arbiter in unprotected grants and their
	// history; required with SpoolDir, and stable across restarts (the
	// spool's sequence numbers are per arbiter).
	ArbiterID string
	// OpenAfter is how long without a quorum read the arbiter waits before
	// granting open classes from memory (default DefaultOpenAfter, at least
	// MinOpenAfter; make it longer than the etcd cluster's election).
	OpenAfter time.Duration
	// Region is the region this arbiter serves (region.go): keys of a
	// namespace homed to another region are refused with ErrWrongRegion
	// before any etcd read, never forwarded. Empty serves every namespace
	// while the class set names at most one region; with several, it
	// refuses every homed namespace (lockd refuses to start so).
	Region string
	// RegionEndpoints are other regions' lockd addresses, named in a
	// refusal so the caller knows where to go.
	RegionEndpoints map[string]string
	// Cluster names the etcd cluster Client reaches, as operators know it
	// (a topology file's cluster name); Inspect says it for every key.
	// Default DefaultCluster.
	Cluster string
	// Clusters are further etcd clusters, each serving the tiers it names;
	// Client's cluster (the coord tier's) serves the rest and keeps the
	// sessions, the epoch allocation counter and the open posture. A
	// session that locks a key on one of them gets a lease there too (its
	// holds there are on it), renewed by RenewLease.
	Clusters []Cluster
	// CoordServesEntity: Client's cluster serves the entity tier too, as
	// the first of its shards, beside the Clusters that serve it (a
	// topology listing entity on the coord cluster and on others). Without
	// any of Clusters serving entity it is implied.
	CoordServesEntity bool
}

// Cluster is an etcd cluster beyond Config.Client's.
type Cluster struct {
	// Name is the cluster's name, as operators know it (a DNS label).
	Name string
	// Client reaches it; KV, optional, is its raw KV client (see Config.KV).
	Client *clientv3.Client
	KV     pb.KVClient
	// Tiers are the tiers whose keys live in it (not the coord tier).
	Tiers []class.Tier
	// StateFile and Bootstrap are as Config's, for this cluster. A first
	// epoch it creates is allocated from the coord cluster's counter.
	StateFile string
	Bootstrap Bootstrap
}

// DefaultCluster names the cluster of a Config without one.
const DefaultCluster = "default"

// Default per-identity quotas on one arbiter.
const (
	DefaultMaxSessionsPerIdentity = 1000
	DefaultMaxWaitersPerIdentity  = 1000
)

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
	// home is the cell of the coord tier: sessions (their leases), the
	// epoch operators advance and the open posture live there. cells are
	// every cell the arbiter fronts, home first; a key's class picks its
	// cell (cellFor). Today both tiers are served by home.
	home  *cell
	cells []*cell
	// shards are the cells of the entity tier when several clusters serve
	// it (or one apart from the coord tier's), in topology order; routes
	// homes entity keys to them (shards.go). mapStale asks for the map to
	// be read again.
	shards   []*cell
	routes   atomic.Pointer[shardRoutes]
	mapStale chan struct{}

	operators map[string]bool
	oidcOps   bool
	log       *slog.Logger
	now       func() time.Time
	poll      time.Duration
	metrics   *Metrics

	policy atomic.Pointer[Policy]

	sessions   sync.Map // int64 -> *sessionInfo
	smu        sync.Mutex
	sessionsBy map[string]int // identity -> sessions opened here and live (smu)
	maxSess    int
	waiters    *waiterQuota

	removed removedHolds // force-released holds, for keepalive answers

	validate validateLimits

	region          string
	regionEndpoints map[string]string

	bg     context.Context // ends at Close
	stop   context.CancelFunc
	closed chan struct{}
	// draining is closed by Drain (and Close): waiters stop waiting.
	draining  chan struct{}
	drainOnce sync.Once
	wg        sync.WaitGroup
}

// New returns an arbiter serving policy. Call Start before serving. An
// unusable cfg is refused with errors wrapping ErrInvalidConfig.
func New(cfg Config, policy *Policy) (*Arbiter, error) {
	if err := cfg.validate(policy); err != nil {
		return nil, err
	}
	floor, err := loadWatermark(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	log, metrics := cfg.Logger, cfg.Metrics
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics(nil, nil)
	}
	base := cellConfig{
		log:         log,
		metrics:     metrics,
		timeout:     cmp.Or(cfg.RequestTimeout, defaultRequestTimeout),
		refresh:     cmp.Or(cfg.EpochRefresh, defaultEpochRefresh),
		poll:        cmp.Or(cfg.PollInterval, defaultPollInterval),
		maxEpochAge: cmp.Or(cfg.MaxEpochAge, defaultMaxEpochAge),
		monoBase:    time.Now(),
		maxBatch:    cmp.Or(cfg.MaxBatch, DefaultMaxBatch),
		maxTxnOps:   cmp.Or(cfg.MaxTxnOps, DefaultMaxTxnOps),
	}
	homeCfg := base
	homeCfg.home = true
	homeCfg.name, homeCfg.bootstrap = cmp.Or(cfg.Cluster, DefaultCluster), cfg.Bootstrap
	for _, t := range []class.Tier{class.TierCoord, class.TierEntity} {
		if !slices.ContainsFunc(cfg.Clusters, func(cl Cluster) bool { return slices.Contains(cl.Tiers, t) }) ||
			(t == class.TierEntity && cfg.CoordServesEntity) {
			homeCfg.tiers = append(homeCfg.tiers, t)
		}
	}
	home := newCell(homeCfg, cfg.Client, etcdop.Raw(cfg.Client, cfg.KV), cfg.Leases, cfg.StateFile, floor)
	cells := []*cell{home}
	for _, cl := range cfg.Clusters {
		fl, err := loadWatermark(cl.StateFile)
		if err != nil {
			return nil, fmt.Errorf("%w: Clusters[%s].StateFile: %w", ErrInvalidConfig, cl.Name, err)
		}
		cc := base
		cc.name, cc.tiers, cc.bootstrap = cl.Name, slices.Clone(cl.Tiers), cl.Bootstrap
		c := newCell(cc, cl.Client, etcdop.Raw(cl.Client, cl.KV), nil, cl.StateFile, fl) // leases are renewed with cli's KeepAliveOnce
		c.maxTTLSeen.Store(fl.MaxSessionTTL)
		cells = append(cells, c)
	}
	a := &Arbiter{
		home:            home,
		cells:           cells,
		operators:       map[string]bool{},
		oidcOps:         cfg.OIDCOperators,
		log:             log,
		now:             cfg.Now,
		poll:            cmp.Or(cfg.PollInterval, defaultPollInterval),
		metrics:         metrics,
		validate:        validateLimits{rate: rate.Limit(cmp.Or(cfg.ValidateRate, DefaultValidateRate)), burst: cmp.Or(cfg.ValidateBurst, DefaultValidateBurst)},
		sessionsBy:      map[string]int{},
		maxSess:         cmp.Or(cfg.MaxSessionsPerIdentity, DefaultMaxSessionsPerIdentity),
		waiters:         newWaiterQuota(cmp.Or(cfg.MaxWaitersPerIdentity, DefaultMaxWaitersPerIdentity)),
		closed:          make(chan struct{}),
		draining:        make(chan struct{}),
		region:          cfg.Region,
		regionEndpoints: maps.Clone(cfg.RegionEndpoints),
	}
	for _, c := range a.cells {
		c.memory, c.durables = newMemoryLine(a, c), newDurableLine(a, c)
		if c != home {
			c.allocate = a.allocateFirst
		}
		if slices.Contains(c.tiers, class.TierEntity) {
			a.shards = append(a.shards, c) // home first: the implicit map's shard
		}
	}
	if len(a.shards) == 1 && a.shards[0] == home {
		a.shards = nil // one cluster serves every tier: no shards
	}
	for _, c := range a.shards {
		c.shardOf, c.mapBehind = a.shardOf, a.mapBehind
	}
	if len(a.shards) > 0 {
		rt, err := a.routesFor(shardmap.Implicit(a.shards[0].name))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInternal, err)
		}
		a.routes.Store(rt)
		a.mapStale = make(chan struct{}, 1)
	}
	home.maxTTLSeen.Store(floor.MaxSessionTTL)
	a.bg, a.stop = context.WithCancel(context.Background())
	for _, op := range cfg.Operators {
		a.operators[op] = true
	}
	if a.now == nil {
		a.now = time.Now
	}
	a.policy.Store(policy)
	if cfg.SpoolDir != "" {
		sp, rec, err := spool.Open(cfg.SpoolDir)
		if err != nil {
			return nil, fmt.Errorf("%w: SpoolDir: %w", ErrInvalidConfig, err)
		}
		left, err := sp.Unshipped()
		if err != nil {
			_ = sp.Close()
			return nil, fmt.Errorf("%w: SpoolDir: %w", ErrInvalidConfig, err)
		}
		if rec.TruncatedBytes > 0 {
			a.log.Warn("spool: a torn tail was truncated (no grant it held had been answered)", "bytes", rec.TruncatedBytes, "why", rec.TruncateReason)
		}
		if len(left) > 0 {
			a.log.Warn("spool: unprotected grants not yet shipped; they are shipped once the store answers", "grants", len(left))
		}
		home.open = newOpenState(a, cmp.Or(cfg.OpenAfter, DefaultOpenAfter), cfg.ArbiterID, sp, len(left) > 0)
	}
	return a, nil
}

// SetPolicy replaces the classes and grants served, atomically. A set
// whose regions this arbiter cannot tell apart (several, and no Region) is
// served, but every homed namespace is refused (homeCheck), and logged.
func (a *Arbiter) SetPolicy(p *Policy) {
	a.policy.Store(p)
	switch rs := p.Classes.Regions(); {
	case a.region == "" && len(rs) > 1:
		a.log.Error("the classes home namespaces to several regions and this lockd has no --region: every homed namespace is refused with WRONG_REGION",
			"regions", rs)
	case a.region != "" && len(rs) > 0 && !slices.Contains(rs, a.region):
		a.log.Warn("no namespace is homed to this lockd's region: it serves only namespaces without a LockNamespace",
			"region", a.region, "regions", rs)
	}
}

// Policy returns the policy being served.
func (a *Arbiter) Policy() *Policy { return a.policy.Load() }

// IsOperator reports whether c is an operator: a workload among Operators,
// or, with OIDCOperators, an operator the boundary verified.
func (a *Arbiter) IsOperator(c identity.Caller) bool {
	if c.IsOperator() {
		return a.oidcOps
	}
	return a.operators[c.ID]
}

// Metrics returns the arbiter's metrics.
func (a *Arbiter) Metrics() *Metrics { return a.metrics }

// Start loads the epoch record (creating it only where Config.Bootstrap
// allows) and starts background work: the epoch refresher, the session
// and force-release watchers and the gauges. A store without an epoch
// record, or behind the state file, leaves the arbiter sealed, not
// failed. Start fails if etcd cannot be reached within ctx.
func (a *Arbiter) Start(ctx context.Context) error {
	for _, c := range a.cells {
		if err := c.initEpoch(ctx); err != nil {
			return err
		}
	}
	a.sealSharedEpochs()
	if len(a.shards) > 0 {
		rev, err := a.loadShardMap(ctx)
		if err != nil {
			return fmt.Errorf("reading the shard map (%s) on the coord cluster: %w", keyspace.ShardMapKey, err)
		}
		a.wg.Add(2)
		go func() { defer a.wg.Done(); a.watchShardMap(a.bg, rev) }()
		go func() { defer a.wg.Done(); a.refreshShardMaps(a.bg) }()
	}
	for _, c := range a.cells {
		// Quorum may have returned a moment ago, before another arbiter
		// saw it and wrote its open grace (recovery.go).
		c.holdOff(c.detectionBound())
		a.metrics.startCluster(c.name, func() time.Duration { return time.Since(c.epoch.Load().readAt) })
		a.wg.Add(3)
		go func() { defer a.wg.Done(); c.refreshEpochLoop(a.bg) }()
		go func() { defer a.wg.Done(); a.collectLoop(a.bg, c, 15*time.Second) }()
		go func() { defer a.wg.Done(); a.watchForced(a.bg, c) }()
		if c != a.home {
			a.wg.Add(1)
			go func() { defer a.wg.Done(); c.watchLeases(a.bg) }()
		}
	}
	if a.home.open != nil {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.postureLoop(a.bg) }()
	}
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.watchSessions(a.bg) }()
	return nil
}

// Drain ends every wait: waiters still queued get ErrUnavailable ("acquire
// again"), and durable waiters keep their place in line for that. Call it
// before the gRPC server stops, so waits end with that answer rather than
// with their calls cancelled (which gives a durable waiter's place up).
func (a *Arbiter) Drain() { a.drainOnce.Do(func() { close(a.draining) }) }

// Close stops background work. Waiters still queued get ErrUnavailable and
// every queue watch ends.
func (a *Arbiter) Close() {
	select {
	case <-a.closed:
		return
	default:
	}
	a.Drain()
	close(a.closed)
	a.stop()
	for _, c := range a.cells {
		c.memory.stop()
	}
	a.wg.Wait()
	if a.home.open != nil {
		if err := a.home.open.sp.Close(); err != nil {
			a.log.Warn("spool close failed", "err", err)
		}
	}
}

// callCtx derives the context for one etcd call: the arbiter's request
// timeout, or a little less than the caller's deadline so the caller hears
// Unavailable before its own deadline passes.
func (c *cell) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.callTimeout(ctx))
}

// txnCtx is callCtx for a grant transaction: bounded the same way, but not
// cancelled when the caller goes away, so the arbiter always learns whether
// a grant it sent committed (and releases one whose caller has left).
func (c *cell) txnCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout(ctx))
}

func (c *cell) callTimeout(ctx context.Context) time.Duration {
	d := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		margin := min(left/20, 100*time.Millisecond)
		d = min(d, left-margin)
	}
	return d
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

// isLeaseNotFound reports etcd's "requested lease not found", which comes
// back as a gRPC status (a typed error once converted by clientv3).
func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) ||
		rpctypes.Error(err) == rpctypes.ErrLeaseNotFound
}

func holdKey(key string) string { return holdPrefix + key }
