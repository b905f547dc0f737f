package arbiter

import (
	"context"
	"encoding/json"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// collectLoop refreshes the store-wide session and hold gauges of cell c.
// Every arbiter exports the same values; aggregate them with max, not sum.
func (a *Arbiter) collectLoop(ctx context.Context, c *cell, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := a.collect(ctx, c); err != nil && ctx.Err() == nil {
			a.log.Warn("metrics collection failed", "cluster", c.name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Arbiter) collect(ctx context.Context, c *cell) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if c == a.home { // sessions' records live in the home cell
		if err := a.collectSessions(ctx, cctx, c); err != nil {
			return err
		}
	}
	// Expiries are exported at 0 for every namespace from the start, so
	// increase() sees a namespace's first expiry as a step up.
	a.metrics.ExpiriesWithoutRelease.WithLabelValues("-")
	for _, ns := range a.policy.Load().Classes.Namespaces() {
		a.metrics.ExpiriesWithoutRelease.WithLabelValues(ns)
		resp, err := c.cli.Get(cctx, holdPrefix+ns+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return storeErr(ctx, err)
		}
		a.metrics.Holds.WithLabelValues(ns, c.name).Set(float64(resp.Count))
	}
	// One read of the grace range: the epoch grace key and the open graces
	// under it (recovery.go).
	resp, err := c.cli.Get(cctx, graceKey, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return storeErr(ctx, err)
	}
	epochGrace, openGrace := 0.0, 0.0
	for _, kv := range resp.Kvs {
		if string(kv.Key) == graceKey {
			epochGrace = 1
		} else {
			openGrace = 1
		}
	}
	if c.holdingOff() {
		openGrace = 1
	}
	a.metrics.graceActive.WithLabelValues(c.name).Set(epochGrace)
	a.metrics.openGraceActive.WithLabelValues(c.name).Set(openGrace)
	return nil
}

// collectSessions counts the session records in cell c by namespace.
func (a *Arbiter) collectSessions(ctx, cctx context.Context, c *cell) error {
	counts := map[string]float64{}
	key, end := sessionPrefix, clientv3.GetPrefixRangeEnd(sessionPrefix)
	for {
		resp, err := c.cli.Get(cctx, key, clientv3.WithRange(end), clientv3.WithLimit(5000))
		if err != nil {
			return storeErr(ctx, err)
		}
		for _, kv := range resp.Kvs {
			var r sessionRecord
			if json.Unmarshal(kv.Value, &r) == nil {
				counts[r.Namespace]++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	a.metrics.Sessions.Reset()
	for ns, n := range counts {
		if ns == "" {
			ns = "-"
		}
		a.metrics.Sessions.WithLabelValues(ns).Set(n)
	}
	return nil
}
