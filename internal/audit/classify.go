package audit

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmove"
	"github.com/lockd-dev/lockd/pkg/token"
)

// stream is what the classifier carries from one revision to the next.
type stream struct {
	clusterID uint64
	epoch     uint32 // in force after the last revision classified
	// revoking: sessions a force-release asked to revoke, until their
	// session key goes; their holds are forced, not expired.
	revoking map[int64]keyspace.Force
	// bad counts records that did not decode (rows are still written,
	// with what the key and its lease say; the tailer logs each).
	bad int
}

func newStream(clusterID uint64, epoch uint32) *stream {
	return &stream{clusterID: clusterID, epoch: epoch, revoking: map[int64]keyspace.Force{}}
}

// classify turns the events of one revision into rows, one per lock key
// that changed, plus an epoch advance's own row, plus one row per
// unprotected grant shipped (created under keyspace.UnprotectedPrefix).
// Changes under the audit tailer's own keys, queues, requests and the grace
// key make no rows, nor does rewriting or deleting a shipped grant.
func (s *stream) classify(rev int64, evs []*clientv3.Event, observed time.Time) []Event {
	before := s.epoch
	after := before
	var advanced bool
	forces := map[string]keyspace.Force{} // by lock key
	sessionsEnded := map[int64]bool{}     // session -> closed on purpose
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		switch {
		case k == keyspace.EpochKey && ev.Type == clientv3.EventTypePut:
			if e, _, err := keyspace.DecodeEpoch(ev.Kv.Value); err == nil {
				after, advanced = e, true
			} else {
				s.bad++
			}
		case strings.HasPrefix(k, keyspace.ForceRecordPrefix) && ev.Type == clientv3.EventTypePut && ev.IsCreate():
			if f, err := keyspace.DecodeForce(ev.Kv.Value); err == nil {
				if !f.RevokeOnly {
					forces[f.Key] = f
				}
				if f.RevokeSession {
					s.revoking[f.Session] = f
				}
			} else {
				s.bad++
			}
		case strings.HasPrefix(k, keyspace.SessionPrefix) && ev.Type == clientv3.EventTypeDelete,
			strings.HasPrefix(k, keyspace.ClusterSessionPrefix) && ev.Type == clientv3.EventTypeDelete:
			// A session, or its lease on this cluster: the holds on that
			// lease end with it.
			id, ok := keyspace.SessionID(k)
			if _, cl := keyspace.ClusterSessionID(k); cl && ev.PrevKv != nil {
				id, ok = ev.PrevKv.Lease, true
			}
			if !ok {
				continue
			}
			closing := false
			if ev.PrevKv != nil {
				if rec, err := keyspace.DecodeSession(ev.PrevKv.Value); err == nil {
					closing = rec.Closing
				}
			}
			sessionsEnded[id] = closing
		}
	}
	var rows []Event
	if advanced {
		rows = append(rows, Event{ClusterID: s.clusterID, Epoch: after, Revision: rev, Key: EpochKey, Kind: KindEpochAdvance,
			ObservedAt: observed, FromEpoch: before, ToEpoch: after})
	}
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		if strings.HasPrefix(k, shardmove.PlanPrefix) {
			if ev.Type == clientv3.EventTypePut {
				rows = append(rows, s.moves(ev, after, rev, observed)...)
			}
			continue
		}
		if strings.HasPrefix(k, keyspace.UnprotectedPrefix) {
			// Shipping puts a grant only if it is absent: its creation is
			// the row; anything else done to the key is not a grant.
			if ev.Type == clientv3.EventTypePut && ev.IsCreate() {
				rows = append(rows, s.unprotected(ev.Kv, after, rev, observed))
			}
			continue
		}
		key, ok := strings.CutPrefix(k, keyspace.HoldPrefix)
		if !ok {
			continue
		}
		row := Event{ClusterID: s.clusterID, Epoch: after, Revision: rev, Key: key, ObservedAt: observed}
		if ev.Type == clientv3.EventTypePut {
			h := s.hold(ev.Kv)
			row.Holder, row.Session, row.Class = h.Identity, ev.Kv.Lease, h.Class
			row.Token = pack(after, ev.Kv.ModRevision)
			row.AcquiredAt = unixNanos(h.AcquiredAt)
			row.Kind = KindGrant
			if ev.PrevKv != nil {
				row.Kind = KindHandoff
				s.ended(&row, ev.PrevKv, before)
			}
			rows = append(rows, row)
			continue
		}
		// A delete: why did the hold end?
		row.Kind = KindRelease
		var lease int64
		if ev.PrevKv != nil {
			s.ended(&row, ev.PrevKv, before)
			lease = ev.PrevKv.Lease
		}
		if f, forced := s.revoking[lease]; forced && lease != 0 {
			row.Kind = KindForceRelease
			row.Requester, row.Approver, row.Reason = f.Requester, f.Approver, f.Reason
		}
		if closing, gone := sessionsEnded[lease]; gone && lease != 0 && row.Kind == KindRelease {
			row.Kind = KindExpiry
			if closing {
				row.Kind = KindSessionClose
			}
		}
		if f, forced := forces[key]; forced {
			row.Kind = KindForceRelease
			row.Requester, row.Approver, row.Reason = f.Requester, f.Approver, f.Reason
		}
		if advanced {
			row.Kind = KindEpochAdvance
		}
		rows = append(rows, row)
	}
	for id := range sessionsEnded {
		delete(s.revoking, id)
	}
	s.epoch = after
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows
}

// moves are the rows of a shard plan's step at rev, one per range it moves
// that had holds or waiters (its live ranges, and its stragglers: ranges
// granted on their old shard while the drain began), keyed by the range:
// draining (a live range closed on its old shard), settling (the map
// flipped: each range moved, a straggler's new shard waiting for its old
// holds), done (a straggler's range served at last) and failed. Other
// writes of the plan (its progress, a proposal, an approval) make none,
// nor does a plan that moves no live range: no holder's history changes.
func (s *stream) moves(ev *clientv3.Event, epoch uint32, rev int64, observed time.Time) []Event {
	var p, prev shardmove.Plan
	if err := json.Unmarshal(ev.Kv.Value, &p); err != nil {
		s.bad++
		return nil
	}
	if ev.PrevKv != nil {
		_ = json.Unmarshal(ev.PrevKv.Value, &prev)
	}
	if p.State == prev.State {
		return nil
	}
	var rows []Event
	add := func(m shardmove.Move, format string) {
		why := fmt.Sprintf("shard plan %s (map version %d to %d): %s", p.ID, p.From, p.From+1, fmt.Sprintf(format, m.Range, m.From, m.To, p.Err))
		if p.Reason != "" {
			why += "; requested: " + p.Reason
		}
		rows = append(rows, Event{ClusterID: s.clusterID, Epoch: epoch, Revision: rev, Key: m.Range, Kind: KindMove, ObservedAt: observed,
			Requester: p.Requester, Approver: p.Approver, Reason: why})
	}
	for _, m := range p.Live {
		switch p.State {
		case shardmove.StateDraining:
			add(m, "%[1]s closed on %[2]s to drain before it moves to %[3]s")
		case shardmove.StateSettling:
			add(m, "%[1]s moved from %[2]s to %[3]s, served there from now")
		case shardmove.StateFailed:
			add(m, "%[1]s not moved from %[2]s to %[3]s: the plan failed: %[4]s")
		}
	}
	for _, m := range p.Stragglers {
		switch p.State {
		case shardmove.StateSettling:
			add(m, "%[1]s moved from %[2]s to %[3]s, which grants it once the holds %[2]s granted during the drain are gone")
		case shardmove.StateDone:
			add(m, "%[1]s served on %[3]s from now: the holds %[2]s granted during the drain are gone")
		case shardmove.StateFailed:
			add(m, "%[1]s not moved from %[2]s to %[3]s: the plan failed: %[4]s")
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows
}

// unprotected is the row of an unprotected grant shipped at rev. A record
// that does not decode still makes a row, keyed by its own etcd key (no
// lock key to use, and unique in the revision) with the arbiter and
// sequence number the key names, and is counted bad so the tailer logs it.
func (s *stream) unprotected(kv *mvccpb.KeyValue, epoch uint32, rev int64, observed time.Time) Event {
	row := Event{ClusterID: s.clusterID, Epoch: epoch, Revision: rev, Kind: KindUnprotected, ObservedAt: observed, Unprotected: true}
	u, err := keyspace.DecodeUnprotected(kv.Value)
	if err != nil {
		s.bad++
		row.Key = string(kv.Key)
		row.Arbiter, row.SpoolSeq = unprotectedKeyParts(row.Key)
		return row
	}
	row.Key, row.Class, row.Holder, row.Session = u.Key, u.Class, u.Identity, u.Session
	row.AcquiredAt = unixNanos(u.AcquiredAt)
	row.Arbiter, row.SpoolSeq = u.Arbiter, u.Seq
	return row
}

// unprotectedKeyParts reads the arbiter ID and sequence number out of a key
// keyspace.UnprotectedKey made; zero values for what it cannot read.
func unprotectedKeyParts(k string) (arbiter string, seq uint64) {
	rest := strings.TrimPrefix(k, keyspace.UnprotectedPrefix)
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", 0
	}
	seq, err := strconv.ParseUint(rest[i+1:], 16, 64)
	if err != nil {
		seq = 0
	}
	return rest[:i], seq
}

// ended fills the row's ended hold from the previous value of its key,
// granted under epoch.
func (s *stream) ended(row *Event, prev *mvccpb.KeyValue, epoch uint32) {
	h := s.hold(prev)
	row.EndedHolder, row.EndedSession, row.EndedToken = h.Identity, prev.Lease, pack(epoch, prev.ModRevision)
	row.EndedAcquiredAt = unixNanos(h.AcquiredAt)
	if row.Class == "" {
		row.Class = h.Class
	}
	if !row.EndedAcquiredAt.IsZero() && row.ObservedAt.After(row.EndedAcquiredAt) {
		row.Duration = row.ObservedAt.Sub(row.EndedAcquiredAt)
	}
}

func (s *stream) hold(kv *mvccpb.KeyValue) keyspace.Hold {
	h, err := keyspace.DecodeHold(kv.Value)
	if err != nil {
		s.bad++
	}
	return h
}

// pack is the token of a hold granted at rev under epoch; 0 when there
// was no epoch yet (nothing is granted then).
func pack(epoch uint32, rev int64) uint64 {
	t, err := token.Pack(epoch, rev)
	if err != nil {
		return 0
	}
	return t
}

func unixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
