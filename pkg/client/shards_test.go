package client_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestAcquireAsksAgainWhileARangeMoves: a lockd fronting a coord cluster
// and two entity shards answers MOVING for a key whose range is marked out
// (a move drains it); an Acquire with a wait asks again by itself and is
// granted once the mark is gone, within its wait; one without a wait gives
// up after client.MovingRetry with ErrMoving, and nothing was granted.
func TestAcquireAsksAgainWhileARangeMoves(t *testing.T) {
	dir := t.TempDir()
	var shards []lockd.ClusterConfig
	var e1 *store.Backend
	for _, name := range []string{"e1", "e2"} {
		b := lockdtest.StartEmbedded(t, filepath.Join(dir, name))
		t.Cleanup(b.Close)
		shards = append(shards, lockd.ClusterConfig{Name: name, Tiers: []string{"entity"}, Backend: b})
		if e1 == nil {
			e1 = b
		}
	}
	reg := prometheus.NewRegistry()
	env := lockdtest.Start(t, lockdtest.Options{RequestTimeout: 2 * time.Second, Registry: reg, Clusters: shards})
	c := env.Client(t, lockdtest.Alice)
	ctx := t.Context()

	// No map is written: every entity key is on e1. Mark t/job/ out there.
	if _, err := e1.Client.Put(ctx, keyspace.RangeOutKey("t/job/"), "draining"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Acquire(ctx, "t/job/1", "", func(*client.Lock) {}); !errors.Is(err, client.ErrMoving) {
		t.Fatalf("a key in a range being moved, without a wait: %v; want client.ErrMoving", err)
	}
	if took := time.Since(start); took < client.MovingRetry {
		t.Fatalf("gave up after %s; want it to ask again for %s first", took, client.MovingRetry)
	}
	if resp, err := e1.Client.Get(ctx, keyspace.HoldKey("t/job/1")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("hold after MOVING = %v, %v; want none", resp.Kvs, err)
	}

	go func() {
		time.Sleep(1500 * time.Millisecond) // the move completes
		_, _ = e1.Client.Delete(ctx, keyspace.RangeOutKey("t/job/"))
	}()
	l, err := c.Acquire(ctx, "t/job/1", "", func(*client.Lock) {}, client.Wait(10*time.Second))
	if err != nil {
		t.Fatalf("a key whose range was moving, with a wait: %v; want granted once the move completed", err)
	}
	defer l.Release(ctx)
	if n := counter(t, reg, "lockd_moving_refusals_total"); n < 3 {
		t.Fatalf("lockd_moving_refusals_total = %v; want the asks-again counted (at least 3)", n)
	}
}
