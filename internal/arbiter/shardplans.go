package arbiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/internal/shardmap"
	"github.com/lockd-dev/lockd/internal/shardmove"
	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// ShardChange is an operator's change of the shard map: shards to add
// (or re-weigh) and remove, prefixes to pin to a shard and to unpin.
type ShardChange struct {
	Add    []shardmap.Shard
	Remove []string
	Pin    []shardmap.Override
	Unpin  []string
}

// ShardLoad is one shard as this arbiter sees it now.
type ShardLoad struct {
	Name            string
	Weight          float64
	Epoch           uint32
	Sessions, Holds int64
	GrantsPerSecond float64
	Err             error
}

// ShardStatus is the entity tier's shards: the map routed by, each
// shard's load and the move plans.
type ShardStatus struct {
	Map    *shardmap.Map
	Shards []ShardLoad
	Plans  []*shardmove.Plan
}

// mover is the move controller's view of the clusters, for previews and
// plans (the running controller is lockd's).
func (a *Arbiter) mover() (*shardmove.Controller, error) {
	if len(a.shards) == 0 {
		return nil, fmt.Errorf("%w: the entity tier is not split across shards: list several clusters serving entity in the topology (docs/operating.md, Entity shards)", ErrInvalid)
	}
	shards := map[string]*clientv3.Client{}
	for _, c := range a.shards {
		shards[c.name] = c.cli
	}
	return &shardmove.Controller{Coord: a.home.cli, Shards: shards, First: a.shards[0].name, Now: a.now, TTL: a.ttlOf}, nil
}

// MoveController is the shard move controller lockd runs (nil when the
// entity tier is not split): it campaigns as name, and ends the holds
// left in a range whose drain reached its bound as force-releases by the
// plan's operators.
func (a *Arbiter) MoveController(name string, log *slog.Logger) *shardmove.Controller {
	mv, err := a.mover()
	if err != nil {
		return nil
	}
	mv.Name, mv.Log, mv.EndHold = name, log, a.endHoldForMove
	return mv
}

// ttlOf is the TTL of key's class (0 when no class owns it).
func (a *Arbiter) ttlOf(key string) time.Duration {
	if cls, ok := a.policy.Load().Classes.Owner(key); ok {
		return cls.TTL
	}
	return 0
}

// ShardStatus reports the shards, their load and the plans. Operators
// only.
func (a *Arbiter) ShardStatus(ctx context.Context, caller identity.Caller) (ShardStatus, error) {
	if !a.IsOperator(caller) {
		return ShardStatus{}, ErrNotOperator
	}
	if _, err := a.mover(); err != nil {
		return ShardStatus{}, err
	}
	cctx, cancel := a.home.callCtx(ctx)
	defer cancel()
	stored, err := shardmap.Get(cctx, a.home.cli)
	if err != nil {
		return ShardStatus{}, storeErr(ctx, err)
	}
	m := stored.Map
	if m == nil {
		m = shardmap.Implicit(a.shards[0].name)
	}
	st := ShardStatus{Map: m}
	if st.Plans, err = shardmove.List(cctx, a.home.cli); err != nil {
		return ShardStatus{}, storeErr(ctx, err)
	}
	for _, c := range a.shards {
		l := ShardLoad{Name: c.name, GrantsPerSecond: c.grantRate.perSecond(a.now())}
		if i := slices.IndexFunc(m.Shards, func(s shardmap.Shard) bool { return s.Name == c.name }); i >= 0 {
			l.Weight = max(m.Shards[i].Weight, 1)
		}
		cs := c.status(ctx)
		l.Epoch, l.Sessions, l.Err = cs.Epoch.Epoch, cs.Sessions, cs.Err
		if l.Err == nil {
			hctx, hcancel := c.callCtx(ctx)
			resp, err := c.cli.Get(hctx, keyspace.HoldPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			hcancel()
			if err != nil {
				l.Err = storeErr(ctx, err)
			} else {
				l.Holds = resp.Count
			}
		}
		st.Shards = append(st.Shards, l)
	}
	return st, nil
}

// ProposeShardPlan proposes the stored map changed by ch, for caller (an
// operator), and previews it: the live ranges it moves and why it would be
// blocked.
func (a *Arbiter) ProposeShardPlan(ctx context.Context, caller identity.Caller, ch ShardChange, reason string) (*shardmove.Plan, error) {
	if !a.IsOperator(caller) {
		return nil, ErrNotOperator
	}
	if strings.TrimSpace(reason) == "" {
		return nil, fmt.Errorf("%w: reason: required (it is recorded with the plan)", ErrInvalid)
	}
	mv, err := a.mover()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.home.callCtx(ctx)
	defer cancel()
	stored, err := shardmap.Get(cctx, a.home.cli)
	if err != nil {
		return nil, storeErr(ctx, err)
	}
	to, err := a.applyChange(stored, ch)
	if err != nil {
		return nil, err
	}
	live, blocked, err := mv.Preview(cctx, to)
	if err != nil {
		return nil, planErr(ctx, err)
	}
	p, err := shardmove.Propose(cctx, a.home.cli, to, caller.String(), reason, a.now())
	if err != nil {
		return nil, planErr(ctx, err)
	}
	p.Live, p.Blocked = live, blocked // the preview (not stored: the drain finds its own)
	return p, nil
}

// applyChange is the map after ch, version stored+1. Every shard named must
// be one of this lockd's entity shards.
func (a *Arbiter) applyChange(stored shardmap.Stored, ch ShardChange) (*shardmap.Map, error) {
	cur := stored.Map
	if cur == nil {
		cur = shardmap.Implicit(a.shards[0].name)
	}
	known := func(field, name string) error {
		if !slices.ContainsFunc(a.shards, func(c *cell) bool { return c.name == name }) {
			return fmt.Errorf("%w: %s: %q is not an entity shard of this lockd's topology (%s)", ErrInvalid, field, name, strings.Join(a.Shards(), ", "))
		}
		return nil
	}
	to := &shardmap.Map{Version: cur.Version + 1, Shards: slices.Clone(cur.Shards), Overrides: slices.Clone(cur.Overrides), Depth: cur.Depth}
	for i, s := range ch.Add {
		if err := known(fmt.Sprintf("add[%d]", i), s.Name); err != nil {
			return nil, err
		}
		if j := slices.IndexFunc(to.Shards, func(x shardmap.Shard) bool { return x.Name == s.Name }); j >= 0 {
			to.Shards[j].Weight = s.Weight
		} else {
			to.Shards = append(to.Shards, s)
		}
	}
	for i, name := range ch.Remove {
		j := slices.IndexFunc(to.Shards, func(x shardmap.Shard) bool { return x.Name == name })
		if j < 0 {
			return nil, fmt.Errorf("%w: remove[%d]: %q is not in the map", ErrInvalid, i, name)
		}
		to.Shards = slices.Delete(to.Shards, j, j+1)
	}
	for i, o := range ch.Pin {
		if err := lockkey.ValidatePrefix(o.Prefix); err != nil {
			return nil, fmt.Errorf("%w: pin[%d].prefix: %w", ErrInvalid, i, err)
		}
		if err := known(fmt.Sprintf("pin[%d].shard", i), o.Shard); err != nil {
			return nil, err
		}
		to.Overrides = slices.DeleteFunc(to.Overrides, func(x shardmap.Override) bool { return x.Prefix == o.Prefix })
		to.Overrides = append(to.Overrides, o)
	}
	for i, prefix := range ch.Unpin {
		n := len(to.Overrides)
		to.Overrides = slices.DeleteFunc(to.Overrides, func(x shardmap.Override) bool { return x.Prefix == prefix })
		if len(to.Overrides) == n {
			return nil, fmt.Errorf("%w: unpin[%d]: %q is not pinned", ErrInvalid, i, prefix)
		}
	}
	if slices.Equal(to.Shards, cur.Shards) && slices.Equal(to.Overrides, cur.Overrides) {
		return nil, fmt.Errorf("%w: the change leaves the map as it is", ErrInvalid)
	}
	if err := to.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return to, nil
}

// ApproveShardPlan approves plan id for caller, an operator other than
// its requester; lockd's move controller then carries it out.
func (a *Arbiter) ApproveShardPlan(ctx context.Context, caller identity.Caller, id string) (*shardmove.Plan, error) {
	if !a.IsOperator(caller) {
		return nil, ErrNotOperator
	}
	if _, err := a.mover(); err != nil {
		return nil, err
	}
	cctx, cancel := a.home.callCtx(ctx)
	defer cancel()
	p, err := shardmove.Approve(cctx, a.home.cli, id, caller.String(), a.now())
	if err != nil {
		return nil, planErr(ctx, err)
	}
	return p, nil
}

// planErr maps shardmove's errors to the arbiter's.
func planErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, shardmove.ErrSamePerson):
		return ErrSamePerson
	case errors.Is(err, shardmove.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrPlanNotFound, err)
	case errors.Is(err, shardmove.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, shardmove.ErrState), errors.Is(err, shardmove.ErrBusy), errors.Is(err, shardmove.ErrStale):
		return fmt.Errorf("%w: %w", ErrPlanState, err)
	}
	return storeErr(ctx, err)
}
