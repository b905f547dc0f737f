// Package shardmove moves entity ranges between shards: a plan (a new
// shard map) is proposed and approved by two operators, then one move
// controller per coord cluster (elected there) carries it out, recording
// every step under /sys/shard-moves/ so that another controller resumes
// it after a crash.
//
// A move never lets a token go backwards and never lets two shards grant a
// key at once:
//
//  1. ranges that move and have holds or waiters on their old shard are
//     marked out there (no grant, no new waiter) and drained: their holders
//     release, or their sessions end (an operator may force-release);
//  2. every shard that may receive ranges must have an epoch above every
//     other shard's (else the plan is blocked until operators advance it);
//  3. the new version is published on every shard, each old shard only
//     while its epoch is still the one checked: from then on no shard
//     grants by the old map;
//  4. a range granted on its old shard between 1 and 3 (a straggler) is
//     marked out on its new shard until its old holds are gone;
//  5. the map is flipped on the coord cluster; the drain marks are cleared.
package shardmove

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
)

// PlanPrefix + plan ID is a plan, JSON, on the coord cluster.
const PlanPrefix = keyspace.SysPrefix + "shard-moves/"

// Plan states, in order.
const (
	StateProposed = "proposed" // waits for a second operator
	StateApproved = "approved" // the controller takes it next
	StateDraining = "draining" // live ranges marked out on their old shards
	StateFlipping = "flipping" // epochs checked, the version published, the map flipped
	StateSettling = "settling" // flipped; stragglers drain on their old shards
	StateDone     = "done"
	StateFailed   = "failed"
)

// Errors.
var (
	ErrInvalid    = errors.New("shardmove: invalid plan")
	ErrNotFound   = errors.New("shardmove: no such plan")
	ErrSamePerson = errors.New("shardmove: the approver must be another operator than the requester")
	ErrState      = errors.New("shardmove: the plan is not in a state that allows this")
	ErrBusy       = errors.New("shardmove: another plan is being carried out")
	ErrStale      = errors.New("shardmove: the shard map changed since the plan was proposed")
)

// Move is one range changing shard.
type Move struct {
	Range string `json:"range"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Live counts its holds and waiters on From when it was found; TTL is
	// the longest class TTL among them (how long a drain can take when no
	// holder releases early).
	Live int           `json:"live,omitempty"`
	TTL  time.Duration `json:"ttl,omitempty"`
}

// same reports whether m and o move one range between the same shards.
func (m Move) same(o Move) bool { return m.Range == o.Range && m.From == o.From && m.To == o.To }

// Plan is a proposed change of the shard map and its progress.
type Plan struct {
	ID string `json:"id"`
	// From is the map version the plan replaces; To the map it puts in
	// its place (version From+1).
	From int64         `json:"from"`
	To   *shardmap.Map `json:"to"`
	// Requester and Approver are operator identities; Reason is the
	// requester's.
	Requester string `json:"requester"`
	Approver  string `json:"approver,omitempty"`
	Reason    string `json:"reason,omitempty"`
	State     string `json:"state"`
	// Live are the moving ranges that had holds or waiters when the drain
	// began; Stragglers those granted on their old shard after it began,
	// waited out after the flip; Remaining counts the holds and waiters
	// still in them at the last look.
	Live       []Move `json:"live,omitempty"`
	Stragglers []Move `json:"stragglers,omitempty"`
	Remaining  int    `json:"remaining,omitempty"`
	// Blocked says why the plan cannot go on now (it goes on by itself
	// once that is fixed); Err why it failed.
	Blocked  string    `json:"blocked,omitempty"`
	Err      string    `json:"err,omitempty"`
	Proposed time.Time `json:"proposed"`
	Updated  time.Time `json:"updated"`
	// DrainStarted is when the live ranges were marked out; Flipped when
	// the map was flipped (the stragglers' drain began).
	DrainStarted time.Time `json:"drainStarted,omitzero"`
	Flipped      time.Time `json:"flipped,omitzero"`
	// rev is the plan's mod revision when read.
	rev int64
}

// Active reports whether the plan is being carried out.
func (p *Plan) Active() bool {
	return slices.Contains([]string{StateApproved, StateDraining, StateFlipping, StateSettling}, p.State)
}

func planKey(id string) string { return PlanPrefix + id }

func newID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// Propose records a plan replacing the stored map with to (whose version
// must be the stored one's plus one), proposed by requester.
func Propose(ctx context.Context, coord clientv3.KV, to *shardmap.Map, requester, reason string, now time.Time) (*Plan, error) {
	cur, err := shardmap.Get(ctx, coord)
	if err != nil {
		return nil, err
	}
	if to.Version != cur.Version()+1 {
		return nil, fmt.Errorf("%w: to.version: must be %d (the stored map's plus one), got %d", ErrInvalid, cur.Version()+1, to.Version)
	}
	if err := to.Validate(); err != nil {
		return nil, fmt.Errorf("%w: to: %w", ErrInvalid, err)
	}
	p := &Plan{ID: newID(now), From: cur.Version(), To: to, Requester: requester, Reason: reason, State: StateProposed, Proposed: now, Updated: now}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	resp, err := coord.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(planKey(p.ID)), "=", 0)).
		Then(clientv3.OpPut(planKey(p.ID), string(b))).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("%w: plan id %s taken; propose again", ErrInvalid, p.ID)
	}
	p.rev = resp.Header.Revision
	return p, nil
}

// Approve approves plan id for approver, who must not be its requester;
// it is refused while another plan is being carried out, and when the map
// changed since the plan was proposed.
func Approve(ctx context.Context, coord clientv3.KV, id, approver string, now time.Time) (*Plan, error) {
	plans, err := List(ctx, coord)
	if err != nil {
		return nil, err
	}
	var p *Plan
	for _, q := range plans {
		if q.ID == id {
			p = q
		} else if q.Active() {
			return nil, fmt.Errorf("%w: plan %s is %s", ErrBusy, q.ID, q.State)
		}
	}
	switch {
	case p == nil:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case p.State != StateProposed:
		return nil, fmt.Errorf("%w: plan %s is %s, not %s", ErrState, id, p.State, StateProposed)
	case p.Requester == approver:
		return nil, ErrSamePerson
	}
	cur, err := shardmap.Get(ctx, coord)
	if err != nil {
		return nil, err
	}
	if cur.Version() != p.From {
		return nil, fmt.Errorf("%w: the plan replaces version %d, the map is at %d; propose again", ErrStale, p.From, cur.Version())
	}
	p.Approver, p.State, p.Updated = approver, StateApproved, now
	if err := save(ctx, coord, p, nil); err != nil {
		return nil, err
	}
	return p, nil
}

// List reads every plan, oldest first.
func List(ctx context.Context, coord clientv3.KV) ([]*Plan, error) {
	resp, err := coord.Get(ctx, PlanPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]*Plan, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p Plan
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		p.rev = kv.ModRevision
		out = append(out, &p)
	}
	return out, nil
}

// Get reads plan id.
func Get(ctx context.Context, coord clientv3.KV, id string) (*Plan, error) {
	if id == "" || strings.Contains(id, "/") {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	plans, err := List(ctx, coord)
	if err != nil {
		return nil, err
	}
	for _, p := range plans {
		if p.ID == id {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
}

// save writes p over the version read (its mod revision), and only while
// guard holds (the controller's leadership).
func save(ctx context.Context, coord clientv3.KV, p *Plan, guard []clientv3.Cmp) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	resp, err := coord.Txn(ctx).If(append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(planKey(p.ID)), "=", p.rev)}, guard...)...).
		Then(clientv3.OpPut(planKey(p.ID), string(b))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: plan %s changed meanwhile (or this controller lost its election)", ErrState, p.ID)
	}
	p.rev = resp.Header.Revision
	return nil
}
