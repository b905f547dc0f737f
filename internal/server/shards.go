package server

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/shardmap"
	"github.com/lockd-dev/lockd/internal/shardmove"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// ShardStatus implements lock.v1 AdminService.
func (s *Server) ShardStatus(ctx context.Context, _ *lockv1.ShardStatusRequest) (*lockv1.ShardStatusResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.arb.ShardStatus(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &lockv1.ShardStatusResponse{Version: st.Map.Version, MapJson: mapJSON(st.Map)}
	for _, l := range st.Shards {
		sl := &lockv1.ShardLoad{Name: l.Name, Weight: l.Weight, Epoch: l.Epoch, Sessions: l.Sessions, Holds: l.Holds, GrantsPerSecond: l.GrantsPerSecond}
		if l.Err != nil {
			sl.Error = l.Err.Error()
		}
		resp.Shards = append(resp.Shards, sl)
	}
	for _, p := range st.Plans {
		resp.Plans = append(resp.Plans, planProto(p))
	}
	return resp, nil
}

// ProposeShardPlan implements lock.v1 AdminService.
func (s *Server) ProposeShardPlan(ctx context.Context, req *lockv1.ProposeShardPlanRequest) (*lockv1.ProposeShardPlanResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	var ch arbiter.ShardChange
	for _, a := range req.GetAdd() {
		ch.Add = append(ch.Add, shardmap.Shard{Name: a.GetName(), Weight: a.GetWeight()})
	}
	ch.Remove, ch.Unpin = req.GetRemove(), req.GetUnpin()
	for _, p := range req.GetPin() {
		ch.Pin = append(ch.Pin, shardmap.Override{Prefix: p.GetPrefix(), Shard: p.GetShard()})
	}
	p, err := s.arb.ProposeShardPlan(ctx, id, ch, req.GetReason())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.ProposeShardPlanResponse{Plan: planProto(p)}, nil
}

// ApproveShardPlan implements lock.v1 AdminService.
func (s *Server) ApproveShardPlan(ctx context.Context, req *lockv1.ApproveShardPlanRequest) (*lockv1.ApproveShardPlanResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.arb.ApproveShardPlan(ctx, id, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.ApproveShardPlanResponse{Plan: planProto(p)}, nil
}

func mapJSON(m *shardmap.Map) string {
	b, err := json.Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

func planProto(p *shardmove.Plan) *lockv1.ShardPlan {
	out := &lockv1.ShardPlan{Id: p.ID, FromVersion: p.From, MapJson: mapJSON(p.To), State: p.State, Requester: p.Requester,
		Approver: p.Approver, Reason: p.Reason, Remaining: int32(p.Remaining), Blocked: p.Blocked, Error: p.Err,
		UpdatedAt: timestamppb.New(p.Updated)}
	var drain time.Duration
	conv := func(ms []shardmove.Move) []*lockv1.RangeMove {
		var out []*lockv1.RangeMove
		for _, m := range ms {
			out = append(out, &lockv1.RangeMove{Range: m.Range, From: m.From, To: m.To, Live: int32(m.Live)})
			drain = max(drain, m.TTL)
		}
		return out
	}
	out.Moves, out.Stragglers = conv(p.Live), conv(p.Stragglers)
	out.ExpectedDrain = durationpb.New(drain)
	return out
}
