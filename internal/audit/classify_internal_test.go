package audit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmove"
)

// plan is plan p1 in state, moving pay/ and pay/x/ (live) from e1 to e2,
// with stragglers.
func plan(state string, stragglers ...shardmove.Move) *shardmove.Plan {
	p := &shardmove.Plan{ID: "p1", From: 3, Requester: "op1", Approver: "op2", Reason: "INC-9 hot tenant", State: state,
		Live: []shardmove.Move{{Range: "pay/", From: "e1", To: "e2", Live: 2}, {Range: "pay/x/", From: "e1", To: "e2", Live: 1}}, Stragglers: stragglers}
	if state == shardmove.StateFailed {
		p.Err = "e2 is gone"
	}
	return p
}

func planKV(p *shardmove.Plan) *mvccpb.KeyValue { return kv(shardmove.PlanPrefix+p.ID, p, 0, 5, 20) }

func kv(key string, v any, lease, create, mod int64) *mvccpb.KeyValue {
	b, _ := json.Marshal(v)
	return &mvccpb.KeyValue{Key: []byte(key), Value: b, Lease: lease, CreateRevision: create, ModRevision: mod}
}

func put(k *mvccpb.KeyValue, prev *mvccpb.KeyValue) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypePut, Kv: k, PrevKv: prev}
}

func del(key string, rev int64, prev *mvccpb.KeyValue) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}, PrevKv: prev}
}

func TestClassifyTellsEveryEndApart(t *testing.T) {
	at := time.Unix(1700000000, 0).UTC()
	obs := at.Add(90 * time.Second)
	alice := keyspace.Hold{Identity: "spiffe://t/alice", Session: 7, Class: "pay/ledger", AcquiredAt: at.UnixNano()}
	bob := keyspace.Hold{Identity: "spiffe://t/bob", Session: 9, Class: "pay/ledger", AcquiredAt: obs.UnixNano()}
	aliceHold := kv("/l/pay/42", alice, 7, 10, 10)
	sess := func(id int64, closing bool) *mvccpb.KeyValue {
		return kv(keyspace.SessionKey(id), keyspace.Session{Identity: "spiffe://t/alice", TTL: 10, Closing: closing}, id, 5, 5)
	}
	tok := func(e uint32, rev int64) uint64 { return uint64(e)<<48 | uint64(rev) }
	entityHold := kv("/l/pay/44", keyspace.Hold{Identity: alice.Identity, Session: 0x70, Class: "pay/ledger"}, 0x70, 12, 12)
	leaseRec := func(closing bool) *mvccpb.KeyValue {
		return kv(keyspace.ClusterSessionKey(7), keyspace.Session{Identity: alice.Identity, TTL: 10, Session: 7, Closing: closing}, 0x70, 6, 6)
	}
	tests := []struct {
		name string
		evs  []*clientv3.Event
		want []Event // only the fields compared below
	}{
		{"grant", []*clientv3.Event{put(aliceHold, nil)},
			[]Event{{Key: "pay/42", Kind: KindGrant, Holder: alice.Identity, Session: 7, Token: tok(3, 10)}}},
		{"release", []*clientv3.Event{del("/l/pay/42", 20, aliceHold)},
			[]Event{{Key: "pay/42", Kind: KindRelease, EndedHolder: alice.Identity, EndedSession: 7, EndedToken: tok(3, 10), Duration: 90 * time.Second}}},
		{"handoff: one row, the ended hold and the new one", []*clientv3.Event{put(kv("/l/pay/42", bob, 9, 10, 20), aliceHold)},
			[]Event{{Key: "pay/42", Kind: KindHandoff, Holder: bob.Identity, Session: 9, Token: tok(3, 20), EndedHolder: alice.Identity, EndedSession: 7, EndedToken: tok(3, 10)}}},
		{"expiry: the session record deleted unmarked", []*clientv3.Event{del("/l/pay/42", 20, aliceHold), del("/l/pay/43", 20, kv("/l/pay/43", alice, 7, 11, 11)), del(keyspace.SessionKey(7), 20, sess(7, false))},
			[]Event{{Key: "pay/42", Kind: KindExpiry, EndedHolder: alice.Identity, EndedSession: 7, EndedToken: tok(3, 10)},
				{Key: "pay/43", Kind: KindExpiry, EndedHolder: alice.Identity, EndedSession: 7, EndedToken: tok(3, 11)}}},
		{"session close: the record was marked closing", []*clientv3.Event{del("/l/pay/42", 20, aliceHold), del(keyspace.SessionKey(7), 20, sess(7, true))},
			[]Event{{Key: "pay/42", Kind: KindSessionClose, EndedHolder: alice.Identity, EndedSession: 7, EndedToken: tok(3, 10)}}},
		// On a cluster other than the coord tier's, a session's holds are on
		// its lease there, recorded under ClusterSessionKey(session).
		{"expiry on another cluster: the session's lease record there deleted unmarked", []*clientv3.Event{del("/l/pay/44", 20, entityHold), del(keyspace.ClusterSessionKey(7), 20, leaseRec(false))},
			[]Event{{Key: "pay/44", Kind: KindExpiry, EndedHolder: alice.Identity, EndedSession: 0x70, EndedToken: tok(3, 12)}}},
		{"session close on another cluster: the lease record there was marked closing", []*clientv3.Event{del("/l/pay/44", 20, entityHold), del(keyspace.ClusterSessionKey(7), 20, leaseRec(true))},
			[]Event{{Key: "pay/44", Kind: KindSessionClose, EndedHolder: alice.Identity, EndedSession: 0x70, EndedToken: tok(3, 12)}}},
		{"force-release: the record in the same revision", []*clientv3.Event{
			del("/l/pay/42", 20, aliceHold),
			put(kv(keyspace.ForceRecordPrefix+"ab", keyspace.Force{Key: "pay/42", Requester: "op1", Approver: "op2", Reason: "INC-7 stuck"}, 99, 20, 20), nil)},
			[]Event{{Key: "pay/42", Kind: KindForceRelease, EndedHolder: alice.Identity, EndedSession: 7, EndedToken: tok(3, 10), Requester: "op1", Approver: "op2", Reason: "INC-7 stuck"}}},
		{"epoch advance: its own row and the holds it deleted", []*clientv3.Event{
			put(kv(keyspace.EpochKey, keyspace.Epoch{Epoch: 4, ClusterID: "abc"}, 0, 1, 20), kv(keyspace.EpochKey, keyspace.Epoch{Epoch: 3, ClusterID: "abc"}, 0, 1, 2)),
			del("/l/pay/42", 20, aliceHold), del(keyspace.GraceKey, 20, nil)},
			[]Event{{Key: "/sys/epoch", Kind: KindEpochAdvance, FromEpoch: 3, ToEpoch: 4},
				{Key: "pay/42", Kind: KindEpochAdvance, EndedHolder: alice.Identity, EndedSession: 7, EndedToken: tok(3, 10)}}},
		{"a plan starts draining: a row per live range, keyed by the range", []*clientv3.Event{
			put(planKV(plan(shardmove.StateDraining)), planKV(plan(shardmove.StateApproved)))},
			[]Event{{Key: "pay/", Kind: KindMove, Requester: "op1", Approver: "op2",
				Reason: "shard plan p1 (map version 3 to 4): pay/ closed on e1 to drain before it moves to e2; requested: INC-9 hot tenant"},
				{Key: "pay/x/", Kind: KindMove, Requester: "op1", Approver: "op2",
					Reason: "shard plan p1 (map version 3 to 4): pay/x/ closed on e1 to drain before it moves to e2; requested: INC-9 hot tenant"}}},
		{"a plan flips: each range moved, a straggler's waiting for its old holds", []*clientv3.Event{
			put(planKV(plan(shardmove.StateSettling, shardmove.Move{Range: "pay/y/", From: "e1", To: "e2"})), planKV(plan(shardmove.StateFlipping)))},
			[]Event{
				{Key: "pay/", Kind: KindMove, Requester: "op1", Approver: "op2", Reason: "shard plan p1 (map version 3 to 4): pay/ moved from e1 to e2, served there from now; requested: INC-9 hot tenant"},
				{Key: "pay/x/", Kind: KindMove, Requester: "op1", Approver: "op2", Reason: "shard plan p1 (map version 3 to 4): pay/x/ moved from e1 to e2, served there from now; requested: INC-9 hot tenant"},
				{Key: "pay/y/", Kind: KindMove, Requester: "op1", Approver: "op2", Reason: "shard plan p1 (map version 3 to 4): pay/y/ moved from e1 to e2, which grants it once the holds e1 granted during the drain are gone; requested: INC-9 hot tenant"}}},
		{"a plan is done: its stragglers' ranges served", []*clientv3.Event{
			put(planKV(plan(shardmove.StateDone, shardmove.Move{Range: "pay/y/", From: "e1", To: "e2"})), planKV(plan(shardmove.StateSettling)))},
			[]Event{
				{Key: "pay/y/", Kind: KindMove, Requester: "op1", Approver: "op2", Reason: "shard plan p1 (map version 3 to 4): pay/y/ served on e2 from now: the holds e1 granted during the drain are gone; requested: INC-9 hot tenant"}}},
		{"a plan fails: why", []*clientv3.Event{
			put(planKV(plan(shardmove.StateFailed)), planKV(plan(shardmove.StateDraining)))},
			[]Event{
				{Key: "pay/", Kind: KindMove, Requester: "op1", Approver: "op2", Reason: "shard plan p1 (map version 3 to 4): pay/ not moved from e1 to e2: the plan failed: e2 is gone; requested: INC-9 hot tenant"},
				{Key: "pay/x/", Kind: KindMove, Requester: "op1", Approver: "op2", Reason: "shard plan p1 (map version 3 to 4): pay/x/ not moved from e1 to e2: the plan failed: e2 is gone; requested: INC-9 hot tenant"}}},
		{"a plan done without stragglers makes no rows", []*clientv3.Event{
			put(planKV(plan(shardmove.StateDone)), planKV(plan(shardmove.StateSettling)))}, nil},
		{"a plan's progress, proposal and approval make no rows", []*clientv3.Event{
			put(planKV(plan(shardmove.StateDraining)), planKV(plan(shardmove.StateDraining))),
			put(planKV(plan(shardmove.StateProposed)), nil)}, nil},
		{"queues, requests, grace and the tailer's own keys make no rows", []*clientv3.Event{
			put(kv("/q/pay/42/7", nil, 7, 20, 20), nil), put(kv("/sys/force-requests/ab", nil, 0, 20, 20), nil),
			put(kv(keyspace.AuditPrefix+"checkpoint/abc", nil, 0, 20, 20), nil), put(kv(keyspace.SessionKey(8), nil, 8, 20, 20), nil)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStream(0xabc, 3)
			got := s.classify(20, tt.evs, obs)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d rows %+v, want %d", len(got), got, len(tt.want))
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Revision != 20 || g.ClusterID != 0xabc || !g.ObservedAt.Equal(obs) {
					t.Errorf("row %d: identity/time %x/%d/%s", i, g.ClusterID, g.Revision, g.ObservedAt)
				}
				if g.Key != w.Key || g.Kind != w.Kind || g.Holder != w.Holder || g.Session != w.Session || g.Token != w.Token ||
					g.EndedHolder != w.EndedHolder || g.EndedSession != w.EndedSession || g.EndedToken != w.EndedToken ||
					g.Requester != w.Requester || g.Approver != w.Approver || g.Reason != w.Reason || g.FromEpoch != w.FromEpoch || g.ToEpoch != w.ToEpoch {
					t.Errorf("row %d:\n got %+v\nwant %+v", i, g, w)
				}
				if w.Duration != 0 && g.Duration != w.Duration {
					t.Errorf("row %d: duration %s, want %s", i, g.Duration, w.Duration)
				}
			}
		})
	}
}

func TestClassifyForcedSessionRevokeIsForcedNotExpired(t *testing.T) {
	alice := keyspace.Hold{Identity: "spiffe://t/alice", Session: 7, Class: "pay/ledger"}
	s := newStream(1, 3)
	s.classify(20, []*clientv3.Event{
		del("/l/pay/42", 20, kv("/l/pay/42", alice, 7, 10, 10)),
		put(kv(keyspace.ForceRecordPrefix+"ab", keyspace.Force{Key: "pay/42", Session: 7, RevokeSession: true, Requester: "op1", Approver: "op2", Reason: "r"}, 99, 20, 20), nil),
	}, time.Now())
	got := s.classify(21, []*clientv3.Event{
		del("/l/pay/43", 21, kv("/l/pay/43", alice, 7, 11, 11)),
		del(keyspace.SessionKey(7), 21, kv(keyspace.SessionKey(7), keyspace.Session{Identity: alice.Identity}, 7, 5, 5)),
	}, time.Now())
	if len(got) != 1 || got[0].Kind != KindForceRelease || got[0].Approver != "op2" {
		t.Fatalf("the revoke's other hold: %+v; want a force-release by op1 and op2", got)
	}
	if len(s.revoking) != 0 {
		t.Fatalf("the revoked session is still remembered: %v", s.revoking)
	}
}

func TestClassifyUnprotectedGrants(t *testing.T) {
	at := time.Unix(1700000000, 0).UTC()
	obs := at.Add(10 * time.Minute)
	rec := func(arbiter string, seq uint64, key string) keyspace.Unprotected {
		return keyspace.Unprotected{Arbiter: arbiter, Seq: seq, Key: key, Class: "pay/batch", Identity: "spiffe://t/batch",
			Session: 70 + int64(seq), AcquiredAt: at.Add(time.Duration(seq) * time.Second).UnixNano(), TTL: 15}
	}
	shipped := func(u keyspace.Unprotected, create, mod int64) *mvccpb.KeyValue {
		return kv(keyspace.UnprotectedKey(u.Arbiter, u.Seq), u, 0, create, mod)
	}
	row := func(u keyspace.Unprotected) Event {
		return Event{ClusterID: 0xabc, Epoch: 3, Revision: 20, Key: u.Key, Kind: KindUnprotected, Class: u.Class, ObservedAt: obs,
			Holder: u.Identity, Session: u.Session, AcquiredAt: time.Unix(0, u.AcquiredAt).UTC(), Unprotected: true, Arbiter: u.Arbiter, SpoolSeq: u.Seq}
	}
	a, b, c := rec("lockd-0", 1, "pay/42"), rec("lockd-0", 2, "pay/43"), rec("lockd-1", 1, "pay/44")
	garbled := &mvccpb.KeyValue{Key: []byte(keyspace.UnprotectedKey("lockd-1", 0x2a)), Value: []byte("{not json"), CreateRevision: 20, ModRevision: 20}
	noSeq := kv(keyspace.UnprotectedKey("lockd-1", 7), keyspace.Unprotected{Arbiter: "lockd-1", Key: "pay/45"}, 0, 20, 20)
	bob := keyspace.Hold{Identity: "spiffe://t/bob", Session: 9, Class: "pay/ledger", AcquiredAt: at.UnixNano()}
	tests := []struct {
		name string
		evs  []*clientv3.Event
		want []Event
		bad  int
	}{
		{"a shipped grant is one row, token 0", []*clientv3.Event{put(shipped(a, 20, 20), nil)}, []Event{row(a)}, 0},
		{"several in one revision, with a grant of another key: a row each, by key",
			[]*clientv3.Event{put(shipped(c, 20, 20), nil), put(kv("/l/pay/10", bob, 9, 20, 20), nil), put(shipped(a, 20, 20), nil), put(shipped(b, 20, 20), nil)},
			[]Event{{ClusterID: 0xabc, Epoch: 3, Revision: 20, Key: "pay/10", Kind: KindGrant, Class: "pay/ledger", ObservedAt: obs,
				Holder: bob.Identity, Session: 9, Token: 3<<48 | 20, AcquiredAt: at}, row(a), row(b), row(c)}, 0},
		{"an overwrite is not a grant", []*clientv3.Event{put(shipped(a, 12, 20), shipped(a, 12, 12))}, nil, 0},
		{"a delete is not a grant", []*clientv3.Event{del(keyspace.UnprotectedKey("lockd-0", 1), 20, shipped(a, 12, 12))}, nil, 0},
		{"a record that does not decode: a row under its own key, with what the key says, counted bad",
			[]*clientv3.Event{put(garbled, nil), put(noSeq, nil)},
			[]Event{
				{ClusterID: 0xabc, Epoch: 3, Revision: 20, Key: keyspace.UnprotectedKey("lockd-1", 7), Kind: KindUnprotected, ObservedAt: obs,
					Unprotected: true, Arbiter: "lockd-1", SpoolSeq: 7},
				{ClusterID: 0xabc, Epoch: 3, Revision: 20, Key: keyspace.UnprotectedKey("lockd-1", 0x2a), Kind: KindUnprotected, ObservedAt: obs,
					Unprotected: true, Arbiter: "lockd-1", SpoolSeq: 0x2a},
			}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStream(0xabc, 3)
			got := s.classify(20, tt.evs, obs)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if s.bad != tt.bad {
				t.Errorf("bad records: %d, want %d", s.bad, tt.bad)
			}
		})
	}
}

// TestClassifyRevokeOnAnotherClusterIsForcedNotExpired: a force-release
// with --revoke-session of a hold on one cluster ends the session's holds
// on every cluster; on the others, the revoke-only record it leaves makes
// the holds its lease there takes with it forced, not expired, and names
// no hold of its key as forced by itself.
func TestClassifyRevokeOnAnotherClusterIsForcedNotExpired(t *testing.T) {
	alice := keyspace.Hold{Identity: "spiffe://t/alice", Session: 0x70, Class: "pay/ledger"}
	s := newStream(2, 5)
	got := s.classify(30, []*clientv3.Event{
		put(kv(keyspace.ForceRecordPrefix+"ab", keyspace.Force{Key: "pay/42", Session: 0x70, Home: 7, RevokeSession: true, RevokeOnly: true,
			Requester: "op1", Approver: "op2", Reason: "r"}, 99, 30, 30), nil),
		del("/l/pay/42", 30, kv("/l/pay/42", keyspace.Hold{Identity: "spiffe://t/bob", Session: 0x90}, 0x90, 11, 11)),
	}, time.Now())
	if len(got) != 1 || got[0].Kind != KindRelease {
		t.Fatalf("another holder's release of the forced key on this cluster: %+v; want a release, not forced by a revoke-only record", got)
	}
	got = s.classify(31, []*clientv3.Event{
		del("/l/pay/43", 31, kv("/l/pay/43", alice, 0x70, 12, 12)),
		del(keyspace.ClusterSessionKey(7), 31, kv(keyspace.ClusterSessionKey(7), keyspace.Session{Identity: alice.Identity, Session: 7}, 0x70, 6, 6)),
	}, time.Now())
	if len(got) != 1 || got[0].Kind != KindForceRelease || got[0].Approver != "op2" || got[0].EndedSession != 0x70 {
		t.Fatalf("the revoked lease's hold: %+v; want a force-release by op1 and op2", got)
	}
	if len(s.revoking) != 0 {
		t.Fatalf("the revoked lease is still remembered: %v", s.revoking)
	}
}
