package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	"github.com/lockd-dev/lockd/pkg/client"
)

// system is one lock implementation under test. Each worker gets its own
// handle (its own session or lease), as separate processes would.
type system interface {
	worker(ctx context.Context, i int) (locker, error)
	close()
}

// locker takes and gives back one key at a time.
type locker interface {
	// lock blocks until key is granted and returns its release.
	lock(ctx context.Context, key string) (func(context.Context) error, error)
	close()
}

// ---- raw: one grant Txn and one release Txn, straight to etcd ----

// rawSystem is the floor a one-Txn-per-grant lock can reach: the same
// grant transaction lockd runs (key absent → put on the worker's lease),
// and a release Txn on the hold's revision. Waiters watch for the delete.
type rawSystem struct{ cli *clientv3.Client }

func newRaw(endpoints []string) (*rawSystem, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &rawSystem{cli: cli}, nil
}

func (s *rawSystem) close() { _ = s.cli.Close() }

func (s *rawSystem) worker(ctx context.Context, _ int) (locker, error) {
	l, err := s.cli.Grant(ctx, int64(rig.ClassTTL/time.Second))
	if err != nil {
		return nil, err
	}
	ka, err := s.cli.KeepAlive(context.WithoutCancel(ctx), l.ID)
	if err != nil {
		return nil, err
	}
	go func() {
		for range ka { //nolint:revive // drain keepalive answers
		}
	}()
	return &rawLocker{cli: s.cli, lease: l.ID}, nil
}

type rawLocker struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
}

func (l *rawLocker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = l.cli.Revoke(ctx, l.lease)
}

func (l *rawLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	k := "/bench-raw/" + key
	for {
		resp, err := l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, "", clientv3.WithLease(l.lease))).
			Commit()
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			rev := resp.Header.Revision
			return func(ctx context.Context) error {
				_, err := l.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
					Then(clientv3.OpDelete(k)).Commit()
				return err
			}, nil
		}
		// Held: wait for a delete after the revision we saw, then retry.
		wctx, cancel := context.WithCancel(ctx)
		wch := l.cli.Watch(wctx, k, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterPut())
		select {
		case <-wch:
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// ---- etcd-mutex: go.etcd.io/etcd/client/v3/concurrency ----

type mutexSystem struct{ cli *clientv3.Client }

func newMutex(endpoints []string) (*mutexSystem, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &mutexSystem{cli: cli}, nil
}

func (s *mutexSystem) close() { _ = s.cli.Close() }

func (s *mutexSystem) worker(ctx context.Context, _ int) (locker, error) {
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(int(rig.ClassTTL/time.Second)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, err
	}
	return &mutexLocker{sess: sess}, nil
}

type mutexLocker struct{ sess *concurrency.Session }

func (l *mutexLocker) close() { _ = l.sess.Close() }

func (l *mutexLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(l.sess, "/bench-mutex/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

// ---- lockd through pkg/client ----

// lockdSystem runs workers through pkg/client. With shared set (workers
// on their own keys) all workers are one process's goroutines: one client,
// one identity, one connection and one session, as a service would run
// it, and as the raw and Mutex workers share one etcd client. Workers that
// contend for keys are separate processes: a client each.
type lockdSystem struct {
	addr   string
	class  string
	prefix string // of the keys, which the class owns
	shared bool
	opts   []client.Option

	mu  sync.Mutex
	one *client.Client
}

func (s *lockdSystem) close() {
	if s.one != nil {
		_ = s.one.Close()
	}
}

func (s *lockdSystem) worker(_ context.Context, i int) (locker, error) {
	if s.shared {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.one == nil {
			c, err := s.client(0)
			if err != nil {
				return nil, err
			}
			s.one = c
		}
		return &lockdLocker{c: s.one, class: s.class, prefix: s.prefix, shared: true}, nil
	}
	c, err := s.client(i)
	if err != nil {
		return nil, err
	}
	return &lockdLocker{c: c, class: s.class, prefix: s.prefix}, nil
}

// client is a Go client as identity i.
func (s *lockdSystem) client(i int) (*client.Client, error) {
	return client.New(append([]client.Option{client.WithTarget(s.addr), client.WithInsecureIdentity(rig.Identity(i))}, s.opts...)...)
}

type lockdLocker struct {
	c      *client.Client
	class  string
	prefix string
	shared bool
}

func (l *lockdLocker) close() {
	if !l.shared {
		_ = l.c.Close()
	}
}

func (l *lockdLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lk, err := l.c.Acquire(ctx, l.prefix+key, l.class, func(*client.Lock) {}, client.Wait(time.Minute))
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// ---- redsync on one redis-server (no fencing token) ----

type redsyncSystem struct {
	rdb *goredislib.Client
	rs  *redsync.Redsync
}

func newRedsync(addr string) *redsyncSystem {
	rdb := goredislib.NewClient(&goredislib.Options{Addr: addr, PoolSize: 128})
	return &redsyncSystem{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb))}
}

func (s *redsyncSystem) close() { _ = s.rdb.Close() }

func (s *redsyncSystem) worker(context.Context, int) (locker, error) {
	return &redsyncLocker{rs: s.rs}, nil
}

type redsyncLocker struct{ rs *redsync.Redsync }

func (l *redsyncLocker) close() {}

func (l *redsyncLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	// Retry every 1–5 ms rather than redsync's default 50–250 ms, so the
	// contended figure measures Redis, not the back-off.
	m := l.rs.NewMutex("bench-"+key, redsync.WithExpiry(rig.ClassTTL), redsync.WithTries(1<<20),
		redsync.WithRetryDelayFunc(func(int) time.Duration { return time.Duration(1000+rand.IntN(4000)) * time.Microsecond }))
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("redsync: %w", err)
	}
	return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
}
