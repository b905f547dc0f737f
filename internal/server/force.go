package server

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/arbiter"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func forceToProto(f arbiter.ForceRelease) *lockv1.ForceRelease {
	return &lockv1.ForceRelease{
		Id: f.ID, Key: f.Key, Holder: f.Holder, SessionId: f.Session, HoldRevision: f.HoldRevision,
		Class: f.Class, Enforcement: f.Enforcement, Requester: f.Requester, Reason: f.Reason,
		RevokeSession: f.RevokeSession, HoldAcquiredAt: timestamppb.New(f.HoldAcquired),
		RequestedAt: timestamppb.New(f.RequestedAt), ExpiresAt: timestamppb.New(f.ExpiresAt),
	}
}

// RequestForceRelease implements lock.v1.
func (s *Server) RequestForceRelease(ctx context.Context, req *lockv1.RequestForceReleaseRequest) (*lockv1.RequestForceReleaseResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	f, err := s.arb.RequestForceRelease(ctx, id, req.GetKey(), req.GetReason(), req.GetRevokeSession())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.RequestForceReleaseResponse{ForceRelease: forceToProto(f)}, nil
}

// ApproveForceRelease implements lock.v1.
func (s *Server) ApproveForceRelease(ctx context.Context, req *lockv1.ApproveForceReleaseRequest) (*lockv1.ApproveForceReleaseResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	ap, err := s.arb.ApproveForceRelease(ctx, id, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.ApproveForceReleaseResponse{ForceRelease: forceToProto(ap.ForceRelease), Approver: id.String(), RecordKey: ap.RecordKey}, nil
}

// DenyForceRelease implements lock.v1.
func (s *Server) DenyForceRelease(ctx context.Context, req *lockv1.DenyForceReleaseRequest) (*lockv1.DenyForceReleaseResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	f, err := s.arb.DenyForceRelease(ctx, id, req.GetId(), req.GetReason())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.DenyForceReleaseResponse{ForceRelease: forceToProto(f)}, nil
}

// ListForceReleases implements lock.v1.
func (s *Server) ListForceReleases(ctx context.Context, _ *lockv1.ListForceReleasesRequest) (*lockv1.ListForceReleasesResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	fs, err := s.arb.ListForceReleases(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &lockv1.ListForceReleasesResponse{}
	for _, f := range fs {
		out.ForceReleases = append(out.ForceReleases, forceToProto(f))
	}
	return out, nil
}
