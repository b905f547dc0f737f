package arbiter

import (
	"context"
	"slices"

	"github.com/lockd-dev/lockd/internal/class"
)

// A line is one way to be granted a key that may be held: it answers an
// Acquire whose key, class and caller are settled, from the first attempt
// through the wait to the grant or the refusal. Every line's grants are
// made by the cell's grant transaction, except the open posture's, which
// are unprotected and say so.
//
//   - memoryLine (queue.go): best effort; arrival order kept in this
//     arbiter's memory.
//   - durableLine (durable.go): the order kept in etcd, across arbiters
//     and restarts.
//   - openState (open.go): without etcd quorum, a class open on quorum
//     loss is granted from memory and the spool.
type line interface {
	acquire(ctx context.Context, req AcquireRequest, cls *class.Class) (Grant, error)
}

// lineOf is the cell's line that serves req for a key of cls: the open
// posture's while it decides the request (its refusals among them), else
// the line of the class's fairness.
func (c *cell) lineOf(req AcquireRequest, cls *class.Class) (line, error) {
	if c.open != nil {
		if serves, err := c.open.serves(req, cls); serves || err != nil {
			return c.open, err
		}
	}
	if cls.Fairness == class.FairnessDurable {
		return c.durables, nil
	}
	return c.memory, nil
}

// cellFor is the cell that serves key, of class cls: the cluster of its
// tier, and for the entity tier split across shards the shard the map homes
// key to. Routing is decided by the class and the map, so in review and by
// operators, never by a caller.
func (a *Arbiter) cellFor(cls *class.Class, key string) *cell {
	if cls.Tier == class.TierEntity && len(a.shards) > 0 {
		c, _ := a.shardOf(key)
		return c
	}
	for _, c := range a.cells[1:] {
		if slices.Contains(c.tiers, cls.Tier) {
			return c
		}
	}
	return a.home
}

// cellOfKey is the cell key lives in: its class's (cellFor). A key no
// class owns cannot be held; it is looked up in the home cell.
func (a *Arbiter) cellOfKey(key string) *cell {
	if cls, ok := a.policy.Load().Classes.Owner(key); ok {
		return a.cellFor(cls, key)
	}
	return a.home
}
