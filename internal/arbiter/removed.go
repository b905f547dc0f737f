package arbiter

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
)

// RemovedHold is a hold that was removed from a live session by a
// force-release: keepalive answers for the session name it, so the holder
// learns within one keepalive interval.
type RemovedHold struct {
	Key          string
	HoldRevision int64
	// Requester and Approver are the two operators, Reason what they gave.
	Requester, Approver, Reason string
}

// removedKeep is how long a force-released hold is named in its session's
// keepalive answers: longer than any session can go without a keepalive
// and still be alive, so a holder that reconnects later is told too.
const removedKeep = 2 * class.MaxTTL

// removedHolds are the force-released holds of live sessions, from the
// /sys/force/ records every arbiter watches.
type removedHolds struct {
	n  atomic.Int64 // entries, so the keepalive path skips the lock when none
	mu sync.Mutex
	by map[int64][]removedEntry
}

type removedEntry struct {
	hold RemovedHold
	at   time.Time
}

func (r *removedHolds) add(session int64, h RemovedHold, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[int64][]removedEntry{}
	}
	for id, es := range r.by { // forget what nobody can still need
		kept := es[:0]
		for _, e := range es {
			if now.Sub(e.at) < removedKeep {
				kept = append(kept, e)
			}
		}
		r.n.Add(int64(len(kept) - len(es)))
		if len(kept) == 0 {
			delete(r.by, id)
		} else {
			r.by[id] = kept
		}
	}
	for _, e := range r.by[session] {
		if e.hold.Key == h.Key && e.hold.HoldRevision == h.HoldRevision {
			return // the same hold: told at approval, then seen in the record
		}
	}
	r.by[session] = append(r.by[session], removedEntry{hold: h, at: now})
	r.n.Add(1)
}

// of returns the removed holds of session.
func (r *removedHolds) of(session int64) []RemovedHold {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RemovedHold
	now := time.Now()
	for _, e := range r.by[session] {
		if now.Sub(e.at) < removedKeep {
			out = append(out, e.hold)
		}
	}
	return out
}

// watchForced follows the force-release records: each names the session
// and the hold it removed.
func (a *Arbiter) watchForced(ctx context.Context, c *cell) {
	note := func(kv *mvccpb.KeyValue) {
		var rec forceRecord
		if json.Unmarshal(kv.Value, &rec) != nil || rec.Session == 0 || rec.RevokeOnly {
			return
		}
		if age := a.now().Sub(rec.ApprovedAt); !rec.ApprovedAt.IsZero() && age > removedKeep {
			return
		}
		a.removed.add(rec.Session, RemovedHold{Key: rec.Key, HoldRevision: rec.HoldRevision,
			Requester: rec.Requester, Approver: rec.Approver, Reason: rec.Reason}, time.Now())
	}
	c.follow(ctx, forceRecordPrefix, func(kvs []*mvccpb.KeyValue, _ int64) {
		for _, kv := range kvs {
			note(kv)
		}
	}, func(ev *clientv3.Event) {
		if ev.Type == clientv3.EventTypePut {
			note(ev.Kv)
		}
	})
}
