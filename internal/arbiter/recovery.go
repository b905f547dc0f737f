package arbiter

// Recovery from an outage, for classes open on quorum loss.
//
// In its open posture an arbiter grants keys of open classes from memory,
// unprotected. When quorum returns it stops crediting its local sessions'
// keepalives, so each unprotected holder loses its lock by its own deadline
// (the send time of its last answered keepalive plus the TTL, less a
// second) at the latest, or earlier when its next keepalive is answered
// with unprotected_ended. Until then no key of an open class may be granted
// through etcd, by any arbiter: the holder may still be acting on it.
//
//   - An arbiter that was open writes an open grace before it grants open
//     classes through etcd again: a key under the epoch grace key
//     (keyspace.OpenGraceKey), on a lease of the longest TTL its local
//     sessions or the open classes have, plus a second. It is written after
//     the arbiter stopped crediting local keepalives, so it outlives every
//     unprotected holder's deadline, and etcd's clock expires it, whichever
//     arbiter restarts meanwhile.
//   - Every grant of an open class compares the whole grace range empty
//     (the epoch grace and every arbiter's open grace), in its own
//     transaction; such keys are granted only that way, never handed over
//     by a release (queue.go, durable.go).
//   - Arbiters do not see quorum return at the same moment. An arbiter
//     that saw its epoch reads fail, or that has just started, holds open
//     classes back for detectionBound, the longest another arbiter of the
//     same outage may take to see quorum again and write its open grace.
//
// What this cannot cover: an arbiter cut off from a majority that the others
// still reach keeps granting from memory while they grant through etcd
// (the open posture's stated risk), and an open arbiter that dies between
// seeing quorum and writing its grace leaves its holders covered only by
// the others' hold-off and graces.

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/keyspace"
)

// openGraced reports whether grants of cls wait out open graces: cls is
// open on quorum loss.
func openGraced(cls *class.Class) bool {
	return !brokenRecovery && cls != nil && cls.OnQuorumLoss == class.QuorumLossOpen
}

// detectionBound is how long after this arbiter sees quorum again another
// arbiter of the same outage may take to see it too (its next epoch read,
// which may have been waiting out the request timeout, and its posture
// tick) and to write its open grace (one more request timeout).
func (c *cell) detectionBound() time.Duration {
	return c.refresh + c.refresh/2 + 2*c.timeout
}

// holdingOff reports whether open classes are held back from etcd now.
func (c *cell) holdingOff() bool {
	return time.Since(c.monoBase) < time.Duration(c.holdOffUntil.Load())
}

// holdOff holds open classes back from etcd for at least d from now.
func (c *cell) holdOff(d time.Duration) {
	until := int64(time.Since(c.monoBase) + d)
	for {
		cur := c.holdOffUntil.Load()
		if cur >= until || c.holdOffUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// openGraceTTL is how long an open grace written now must last: the
// longest TTL of a local session opened in the outage or of an open class,
// plus a second (etcd counts lease TTLs in whole seconds).
func (a *Arbiter) openGraceTTL() time.Duration {
	ttl := time.Duration(0)
	if a.home.open != nil {
		a.home.open.mu.Lock()
		ttl = a.home.open.maxLocalTTL
		a.home.open.mu.Unlock()
	}
	for _, c := range a.policy.Load().Classes.Classes() {
		if c.OnQuorumLoss == class.QuorumLossOpen {
			ttl = max(ttl, c.TTL)
		}
	}
	return ttl + time.Second
}

// writeOpenGrace puts this arbiter's open grace, if its open posture
// opened any local session: until it expires no key of an open class is
// granted through etcd. Called once quorum is back and local keepalives
// are no longer credited, before open classes are served from etcd.
func (a *Arbiter) writeOpenGrace(ctx context.Context) error {
	o := a.home.open
	o.mu.Lock()
	need := o.localOpened > 0
	o.mu.Unlock()
	if !need {
		return nil
	}
	ttl := a.openGraceTTL()
	cctx, cancel := a.home.callCtx(ctx)
	defer cancel()
	lease, err := a.home.cli.Grant(cctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return storeErr(ctx, err)
	}
	why := fmt.Sprintf("arbiter %s was open on quorum loss; unprotected holders lose their locks within %s", o.id, ttl)
	resp, err := a.home.cli.Put(cctx, keyspace.OpenGraceKey(o.id), why, clientv3.WithLease(lease.ID))
	if err != nil {
		return storeErr(ctx, err)
	}
	if _, err := a.home.checkHeader(resp.Header); err != nil {
		return err
	}
	o.mu.Lock()
	o.localOpened, o.maxLocalTTL = 0, 0
	o.mu.Unlock()
	a.log.Warn("open grace written: keys of classes open on quorum loss are granted through etcd again once every unprotected holder's deadline has passed",
		"for", ttl.String(), "arbiter", o.id)
	return nil
}
