// Package server is lockd's gRPC and HTTP boundary: it authenticates the
// caller, calls the arbiter and maps its errors to gRPC status codes in one
// place.
package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/operator"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Server implements lock.v1 LockService and AdminService.
type Server struct {
	lockv1.UnsafeLockServiceServer
	lockv1.UnsafeAdminServiceServer

	arb    *arbiter.Arbiter
	ids    identity.Extractor
	log    *slog.Logger
	health *health.Server
	// opv, when set, verifies operators' OIDC tokens for the admin calls
	// that change state; without it operators are SPIFFE identities.
	opv *operator.Verifier
	// history answers History (nil: off).
	history audit.Sink
}

// RequireOperatorTokens makes force-release and epoch-advance calls carry
// an OIDC operator token ("authorization: Bearer …"), verified by v. The
// arbiter must be built with OIDCOperators.
func (s *Server) RequireOperatorTokens(v *operator.Verifier) { s.opv = v }

// operatorCaller is the caller of an admin call that changes state: the
// verified OIDC operator when tokens are required, the caller's SPIFFE
// identity otherwise. The mTLS identity is required either way.
func (s *Server) operatorCaller(ctx context.Context) (identity.Caller, error) {
	via, err := s.caller(ctx)
	if err != nil || s.opv == nil {
		return via, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	raw := ""
	if vals := md.Get("authorization"); len(vals) == 1 {
		raw, _ = strings.CutPrefix(vals[0], "Bearer ")
	}
	op, err := s.opv.Verify(ctx, raw)
	switch {
	case errors.Is(err, operator.ErrMissingRole), errors.Is(err, operator.ErrNoMFA):
		return identity.Caller{}, status.Error(codes.PermissionDenied, err.Error())
	case err != nil:
		return identity.Caller{}, status.Error(codes.Unauthenticated, err.Error())
	}
	s.log.Info("operator call", "operator", op.Name, "subject", op.Subject, "via", via.String())
	return identity.Operator(op.Subject, op.Name, via.ID), nil
}

// New returns a server for arb. ids says how callers are identified.
func New(arb *arbiter.Arbiter, ids identity.Extractor, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{arb: arb, ids: ids, log: log, health: health.NewServer()}
}

// Register adds the lock.v1 services, gRPC health and reflection to g.
func (s *Server) Register(g *grpc.Server) {
	lockv1.RegisterLockServiceServer(g, s)
	lockv1.RegisterAdminServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(lockv1.LockService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// Shutdown marks the health service as not serving.
func (s *Server) Shutdown() { s.health.Shutdown() }

func (s *Server) caller(ctx context.Context) (identity.Caller, error) {
	c, err := s.ids.Caller(ctx)
	if err != nil {
		return identity.Caller{}, status.Error(codes.Unauthenticated, err.Error())
	}
	return c, nil
}

// OpenSession implements lock.v1.
func (s *Server) OpenSession(ctx context.Context, req *lockv1.OpenSessionRequest) (*lockv1.OpenSessionResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetTtl() == nil {
		return nil, statusWithReason(codes.InvalidArgument, ReasonInvalid, "arbiter: invalid argument: ttl: required", nil)
	}
	ttl := req.GetTtl().AsDuration()
	sid, err := s.arb.OpenSession(ctx, id, ttl)
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.OpenSessionResponse{SessionId: sid, Ttl: durationpb.New(ttl)}, nil
}

// CloseSession implements lock.v1.
func (s *Server) CloseSession(ctx context.Context, req *lockv1.CloseSessionRequest) (*lockv1.CloseSessionResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.arb.CloseSession(ctx, id, req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.CloseSessionResponse{}, nil
}

// KeepAlive implements lock.v1: one etcd keepalive per request, answered in
// order; a session that is gone is answered with TTL zero.
func (s *Server) KeepAlive(stream lockv1.LockService_KeepAliveServer) error {
	ctx := stream.Context()
	id, err := s.caller(ctx)
	if err != nil {
		return err
	}
	ka, err := s.arb.OpenKeepAlive(ctx, id)
	if err != nil {
		return toStatus(err)
	}
	defer ka.Close()
	var sendMu sync.Mutex
	sendResp := func(resp *lockv1.KeepAliveResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(resp)
	}
	send := func(a arbiter.KeepAliveAnswer) error {
		return sendResp(&lockv1.KeepAliveResponse{SessionId: a.Session, Ttl: durationpb.New(a.TTL), Epoch: a.Epoch, Uncredited: a.Uncredited,
			UnprotectedEnded: a.UnprotectedEnded, Removed: removedProto(a.Removed)})
	}
	leases := newLeaseRenewer(ctx, s.arb, id, sendResp)
	defer leases.stop()
	recvErr := make(chan error, 1)
	go func() {
		for {
			ans, err := ka.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if err := send(ans); err != nil {
				recvErr <- err
				return
			}
		}
	}()
	reqs := make(chan *lockv1.KeepAliveRequest)
	clientErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				clientErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case err := <-recvErr:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return toStatus(err)
		case err := <-clientErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case err := <-leases.failed:
			return err
		case req := <-reqs:
			if req.GetCluster() != "" {
				leases.renew(req)
				continue
			}
			local, err := ka.Send(ctx, req.GetSessionId())
			if local != nil {
				if err := send(*local); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				if errors.Is(err, arbiter.ErrSessionNotFound) {
					if err := send(ka.Expired(req.GetSessionId())); err != nil {
						return err
					}
					continue
				}
				return toStatus(err)
			}
		}
	}
}

// DescribeClass implements lock.v1. A caller sees classes of namespaces it
// has grants in; others get the same PermissionDenied as an absent one.
func (s *Server) DescribeClass(ctx context.Context, req *lockv1.DescribeClassRequest) (*lockv1.DescribeClassResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.arb.DescribeClass(id, req.GetNamespace(), req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.DescribeClassResponse{Class: ClassProto(c)}, nil
}

// ClassProto converts a class as served to its wire form.
func ClassProto(sc arbiter.ServedClass) *lockv1.LockClass {
	c := sc.Class
	pc := &lockv1.LockClass{
		Namespace: c.Namespace, Name: c.Name, Purpose: string(c.Purpose), Enforcement: string(sc.Served),
		DeclaredEnforcement: string(c.Enforcement),
		Ttl:                 durationpb.New(c.TTL), Tier: string(c.Tier), OnQuorumLoss: string(c.OnQuorumLoss),
		Fairness: string(c.Fairness), Resource: c.Resource, RiskOwner: c.RiskOwner,
		Keys: slices.Clone(c.Keys), NestedIn: slices.Clone(c.NestedIn),
	}
	if !c.WaiverExpires.IsZero() {
		pc.WaiverExpires = timestamppb.New(c.WaiverExpires)
	}
	if c.Enforcement == class.EnforcementFenced {
		pc.FenceProof = &lockv1.FenceProof{Proven: sc.Served == class.EnforcementFenced, Reason: sc.Proof.Reason,
			Message: sc.Proof.Message, Result: sc.Proof.Result}
		if !sc.Proof.Until.IsZero() {
			pc.FenceProof.Until = timestamppb.New(sc.Proof.Until)
		}
	}
	return pc
}

// ClassStats implements lock.v1.
func (s *Server) ClassStats(ctx context.Context, _ *lockv1.ClassStatsRequest) (*lockv1.ClassStatsResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	out := &lockv1.ClassStatsResponse{}
	for _, st := range s.arb.Stats(id) {
		out.Stats = append(out.Stats, &lockv1.ClassStat{Namespace: st.Namespace, Class: st.Class, Grants: st.Grants,
			GrantLatencyP50: durationpb.New(st.P50), GrantLatencyP99: durationpb.New(st.P99),
			ExpiriesWithoutRelease: st.ExpiriesWithoutRelease, UnprotectedGrants: st.Unprotected})
	}
	return out, nil
}

// ListClasses implements lock.v1.
func (s *Server) ListClasses(ctx context.Context, req *lockv1.ListClassesRequest) (*lockv1.ListClassesResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	out := &lockv1.ListClassesResponse{}
	for _, c := range s.arb.ListClasses(id, req.GetNamespace()) {
		out.Classes = append(out.Classes, ClassProto(c))
	}
	return out, nil
}

// Acquire implements lock.v1.
func (s *Server) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	g, err := s.arb.Acquire(ctx, arbiter.AcquireRequest{
		Caller: id, Session: req.GetSessionId(), Key: req.GetKey(), Class: req.GetClass(),
		Wait: req.GetWait().AsDuration(), ClusterLeases: req.GetClusterLeases(), RetiredLeases: req.GetRetiredLeases(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	leakToken(ctx, g.Token)
	return &lockv1.AcquireResponse{
		Token:       &lockv1.Token{Value: g.Token, Epoch: g.Epoch, Revision: g.Revision},
		AcquiredAt:  timestamppb.New(g.AcquiredAt),
		Unprotected: g.Unprotected, ArbiterId: g.Arbiter, SpoolSeq: g.SpoolSeq, Class: g.Class,
		Cluster: g.Cluster, ClusterLease: g.ClusterLease, ClusterTtl: durationpb.New(g.ClusterTTL),
	}, nil
}

// Release implements lock.v1.
func (s *Server) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	released, err := s.arb.Release(ctx, id, req.GetSessionId(), req.GetKey(), req.GetToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.ReleaseResponse{Released: released}, nil
}

// holdProto is h on the wire. SessionTtlLeft is left to Inspect, the one
// call that reads the holder's lease.
func holdProto(h arbiter.HoldInfo) *lockv1.Hold {
	out := &lockv1.Hold{
		Key: h.Key, Holder: h.Holder, SessionId: h.Session, Class: h.Class,
		AcquiredAt: timestamppb.New(h.AcquiredAt), Age: durationpb.New(h.Age), Waiters: int32(h.Waiters), Cluster: h.Cluster,
	}
	if h.Token != 0 {
		out.Token = &lockv1.Token{Value: h.Token, Epoch: h.Epoch, Revision: h.Revision}
	}
	return out
}

// Inspect implements lock.v1.
func (s *Server) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	in, err := s.arb.Inspect(ctx, id, req.GetKey())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &lockv1.InspectResponse{Held: in.Held, Waiters: int32(in.Hold.Waiters), Class: in.Class, Tier: in.Tier, Cluster: in.Cluster,
		Range: in.Range, ShardMapVersion: in.ShardMapVersion}
	if in.Held {
		resp.Hold = holdProto(in.Hold)
		// Only Inspect reads the lease (ListHolds leaves it unset); zero
		// here means the lease is gone.
		resp.Hold.SessionTtlLeft = durationpb.New(in.Hold.SessionTTLLeft)
		resp.Hold.HomeSessionId = in.Hold.HomeSession
	}
	for _, w := range in.Queue {
		resp.Queue = append(resp.Queue, &lockv1.Waiter{
			Identity: w.Identity, SessionId: w.Session, Waited: durationpb.New(w.Waited), Position: int32(w.Position), Durable: w.Durable,
		})
	}
	return resp, nil
}

// ListHolds implements lock.v1.
func (s *Server) ListHolds(ctx context.Context, req *lockv1.ListHoldsRequest) (*lockv1.ListHoldsResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	list, err := s.arb.ListHolds(ctx, id, req.GetPrefix(), int(req.GetLimit()))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &lockv1.ListHoldsResponse{Truncated: list.Truncated}
	for _, h := range list.Holds {
		resp.Holds = append(resp.Holds, holdProto(h))
	}
	return resp, nil
}

// ListSessions implements lock.v1.
func (s *Server) ListSessions(ctx context.Context, _ *lockv1.ListSessionsRequest) (*lockv1.ListSessionsResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := s.arb.ListSessions(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &lockv1.ListSessionsResponse{}
	for _, x := range ss {
		p := &lockv1.Session{SessionId: x.ID, Identity: x.Identity, Ttl: durationpb.New(x.TTL),
			Holds: int32(x.Holds), OpenedAt: timestamppb.New(x.OpenedAt), Remaining: durationpb.New(x.Remaining)}
		if !x.LastKeepAlive.IsZero() {
			p.LastKeepalive = timestamppb.New(x.LastKeepAlive)
		}
		resp.Sessions = append(resp.Sessions, p)
	}
	return resp, nil
}

// EpochStatus implements lock.v1 AdminService.
func (s *Server) EpochStatus(ctx context.Context, req *lockv1.EpochStatusRequest) (*lockv1.EpochStatusResponse, error) {
	if _, err := s.caller(ctx); err != nil {
		return nil, err
	}
	if req.GetCluster() != "" {
		st, err := s.arb.EpochStatus(ctx, req.GetCluster())
		if err != nil {
			return nil, toStatus(err)
		}
		return epochStatusProto(st), nil
	}
	// Every cluster, read once; the home (coord) cluster's is also the
	// top level, as before there were several.
	all := s.arb.EpochStatuses(ctx)
	if err := all[0].Err; err != nil {
		return nil, toStatus(err)
	}
	resp := epochStatusProto(all[0].EpochStatus)
	for _, c := range all {
		pc := epochStatusProto(c.EpochStatus)
		if c.Err != nil {
			pc.Error = c.Err.Error()
		}
		resp.Clusters = append(resp.Clusters, pc)
	}
	return resp, nil
}

func epochStatusProto(st arbiter.EpochStatus) *lockv1.EpochStatusResponse {
	return &lockv1.EpochStatusResponse{Epoch: st.Epoch, RecordClusterId: st.RecordClusterID,
		StoreClusterId: st.StoreClusterID, Sealed: st.Sealed, Revision: st.Revision,
		SealedReason: st.SealedReason, RecordMissing: st.RecordMissing, HighestEpoch: st.Highest,
		Cluster: st.Cluster, AllocatedEpoch: st.Allocated}
}

// ListClusters implements lock.v1 AdminService.
func (s *Server) ListClusters(ctx context.Context, _ *lockv1.ListClustersRequest) (*lockv1.ListClustersResponse, error) {
	if _, err := s.caller(ctx); err != nil {
		return nil, err
	}
	resp := &lockv1.ListClustersResponse{}
	for _, c := range s.arb.Clusters(ctx) {
		pc := &lockv1.Cluster{Name: c.Name, Reachable: c.Err == nil, Leader: c.Leader, Revision: c.Epoch.Revision,
			Epoch: c.Epoch.Epoch, Sealed: c.Epoch.Sealed, SealedReason: c.Epoch.SealedReason, Sessions: c.Sessions,
			ClusterId: c.Epoch.StoreClusterID, Posture: c.Posture}
		for _, t := range c.Tiers {
			pc.Tiers = append(pc.Tiers, string(t))
		}
		if c.Err != nil {
			pc.Error = c.Err.Error()
		}
		resp.Clusters = append(resp.Clusters, pc)
	}
	return resp, nil
}

// AdvanceEpoch implements lock.v1 AdminService: refused, since an advance
// takes two operators.
func (s *Server) AdvanceEpoch(ctx context.Context, _ *lockv1.AdvanceEpochRequest) (*lockv1.AdvanceEpochResponse, error) {
	if _, err := s.caller(ctx); err != nil {
		return nil, err
	}
	return nil, statusWithReason(codes.FailedPrecondition, ReasonNotOperator,
		"arbiter: an epoch advance takes two operators: RequestEpochAdvance, then ApproveEpochAdvance by another operator", nil)
}

// RequestEpochAdvance implements lock.v1 AdminService.
func (s *Server) RequestEpochAdvance(ctx context.Context, req *lockv1.RequestEpochAdvanceRequest) (*lockv1.RequestEpochAdvanceResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.arb.RequestEpochAdvance(ctx, id, req.GetCluster(), req.GetFromEpoch(), req.GetToEpoch(), req.GetReason())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.RequestEpochAdvanceResponse{Id: r.ID, FromEpoch: r.From, ToEpoch: r.To, Requester: r.Requester, Reason: r.Reason,
		ExpiresAt: timestamppb.New(r.ExpiresAt), Cluster: r.Cluster}, nil
}

// ApproveEpochAdvance implements lock.v1 AdminService.
func (s *Server) ApproveEpochAdvance(ctx context.Context, req *lockv1.ApproveEpochAdvanceRequest) (*lockv1.ApproveEpochAdvanceResponse, error) {
	id, err := s.operatorCaller(ctx)
	if err != nil {
		return nil, err
	}
	adv, err := s.arb.ApproveEpochAdvance(ctx, id, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.ApproveEpochAdvanceResponse{Epoch: adv.Status.Epoch, ClusterId: adv.Status.RecordClusterID,
		HoldsDeleted: adv.HoldsDeleted, Requester: adv.Request.Requester, Approver: id.String(),
		GrantsResumeIn: durationpb.New(adv.Grace), Cluster: adv.Request.Cluster}, nil
}

// HTTPHandler serves /metrics, /healthz and /readyz. /readyz fails while the
// arbiter is sealed or etcd does not answer, and says which; in the open
// posture, with a class open on quorum loss loaded, it is ready and says
// that only those classes are granted, unprotected.
//
// notes add lines to /readyz's answer (an empty line is left out): what
// does not make lockd unready but an operator should see there, such as how
// old the class set is.
func (s *Server) HTTPHandler(gatherer prometheus.Gatherer, notes ...func() string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.arb.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		if s.arb.Posture() == "open" {
			_, _ = io.WriteString(w, "ok: open posture: no etcd quorum; only classes with onQuorumLoss: open are granted, unprotected (token 0)\n")
		} else {
			_, _ = io.WriteString(w, "ok\n")
		}
		for _, n := range notes {
			if line := n(); line != "" {
				_, _ = io.WriteString(w, line+"\n")
			}
		}
	})
	return mux
}

// ValidateToken implements lock.v1.
func (s *Server) ValidateToken(ctx context.Context, req *lockv1.ValidateTokenRequest) (*lockv1.ValidateTokenResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.arb.ValidateToken(ctx, id, req.GetKey(), req.GetToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &lockv1.ValidateTokenResponse{
		Valid:        c.Valid(),
		State:        lockv1.TokenState(c.State),
		Epoch:        c.Epoch,
		ReadRevision: c.ReadRevision,
	}, nil
}
