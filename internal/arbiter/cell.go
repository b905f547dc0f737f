package arbiter

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/internal/shardmap"
)

// A cell is one etcd cluster and everything the arbiter keeps that is tied
// to it: the client, the epoch record and its seal, the state file's
// watermark for the cluster, the waiting lines for its keys and the open
// posture taken when it loses quorum. A key lives in exactly one cell (its
// class's tier picks it); nothing in a cell is shared with another, so an
// incident in one cluster is confined to the keys homed there.
//
// The arbiter routes to cells (Arbiter.cellFor, cellOfKey): a grant, a
// release, a token check, an inspection and a force-release go to the
// key's cell; force requests live there, beside the hold they name. The
// home cell (the coord tier's) also keeps the sessions, the epoch
// allocation counter and the open posture; in any other cell a session
// that holds keys there has a lease of its own (clusterlease.go). The policy, operators, quotas
// (the waiter quota among them), region and the session table stay with
// the arbiter.
type cell struct {
	cellConfig

	cli *clientv3.Client
	// kv sends the lock path's transactions, built as etcd's own messages
	// (internal/etcdop), on the cluster's raw KV client.
	kv     etcdop.KV
	leases pb.LeaseClient // the home cell's: session keepalives are forwarded on it
	admin  adminKV        // the admin operations' limited view of etcd

	epoch atomic.Pointer[epochState]
	// epochMu serialises epoch state changes and the state file;
	// reloadMu serialises refresh reads (their revisions are compared) and
	// lets one keepalive re-read a stale epoch for all; it is given up on
	// when the waiter's context ends.
	epochMu     sync.Mutex
	reloadMu    chanMutex
	stateFile   string
	floor       watermark // the state file at start
	mark        watermark // the state file now (epochMu)
	markWritten time.Time
	lastRead    struct {
		epoch uint32
		rev   int64
	}
	maxTTLSeen atomic.Int64 // seconds
	// storeChanged is closed (and replaced) when the epoch state changes.
	storeMu      sync.Mutex
	storeChanged chan struct{}

	// commits group-commits the cell's grants and releases (batch.go).
	commits *committer

	// memory and durables are the waiting lines for the cell's keys; the
	// open posture (open) is the third.
	memory   *memoryLine
	durables *durableLine

	// sessionLeases are the sessions' leases on this cluster, when it is not the
	// home one (clusterlease.go).
	sessionLeases clusterLeases

	// shardOf, for an entity shard, homes a key by the arbiter's shard map
	// and names the fence of a grant there; mapBehind says a shard serves a
	// newer map. Both nil for other cells (shards.go).
	shardOf   func(key string) (*cell, shardmap.Fence)
	mapBehind func()
	// grantRate counts this arbiter's grants in the cell (shard status).
	grantRate rateWindow

	open *openState // the open posture; nil without a spool
	// readsFailing is when epoch reads started failing, as time since
	// monoBase plus one; 0 while they succeed (noQuorumFor).
	readsFailing atomic.Int64
	// holdOffUntil is until when (time since monoBase) classes open on
	// quorum loss are not granted through etcd (recovery.go).
	holdOffUntil atomic.Int64
}

// cellConfig is what a cell is run with.
type cellConfig struct {
	// name is the cluster's, as operators know it; tiers are the tiers
	// whose keys live in it.
	name    string
	tiers   []class.Tier
	log     *slog.Logger
	metrics *Metrics
	// timeout bounds one etcd call; the epoch is re-read every refresh and
	// is confirmed when read within maxEpochAge.
	timeout time.Duration
	refresh time.Duration
	// poll is how often a broken watch is tried again.
	poll        time.Duration
	maxEpochAge time.Duration
	bootstrap   Bootstrap
	// allocate, for a cell other than the home one, allocates the first
	// epoch it bootstraps from the coord cluster's counter.
	allocate func(ctx context.Context, atLeast uint32) (uint32, error)
	// monoBase is the base of the monotonic times the cell keeps as
	// durations (readsFailing, holdOffUntil).
	monoBase time.Time
	// home: the coord tier's cell, which keeps the sessions.
	home bool
	// maxBatch and maxTxnOps bound a group commit (batch.go): parts per
	// batch (1: none) and etcd's --max-txn-ops.
	maxBatch, maxTxnOps int
}

// newCell returns the cell of the cluster cli reaches, with the state
// file's watermark floor.
func newCell(cfg cellConfig, cli *clientv3.Client, kv pb.KVClient, leases pb.LeaseClient, stateFile string, floor watermark) *cell {
	var sizes prometheus.Observer = prometheus.ObserverFunc(func(float64) {})
	if cfg.metrics != nil {
		sizes = cfg.metrics.batchSize.WithLabelValues(cfg.name)
	}
	return &cell{
		cellConfig: cfg,
		cli:        cli,
		kv:         etcdop.NewKV(kv),
		leases:     leases,
		admin:      adminKV{kv: cli},
		stateFile:  stateFile,
		floor:      floor,
		mark:       floor,
		reloadMu:   make(chanMutex, 1),
		commits:    newCommitter(etcdop.NewKV(kv), cfg.maxBatch, cfg.maxTxnOps, sizes),
	}
}
