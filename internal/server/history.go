package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/pkg/lockkey"
	"github.com/lockd-dev/lockd/pkg/token"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// ErrHistoryOff: this lockd serves no audit history (it runs without
// --audit, or with a sink only another lockd writes).
var ErrHistoryOff = errors.New("server: the audit history is off on this lockd; start it with --audit (and a sink)")

// History limits.
const (
	historyDefaultLimit = 1000
	historyMaxLimit     = 10000
)

// ServeHistory makes History answer from sink (nil: History is refused
// with HISTORY_OFF).
func (s *Server) ServeHistory(sink audit.Sink) { s.history = sink }

// History implements lock.v1.
func (s *Server) History(ctx context.Context, req *lockv1.HistoryRequest) (*lockv1.HistoryResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if s.history == nil {
		return nil, toStatus(ErrHistoryOff)
	}
	key := req.GetKey()
	if err := validateHistoryKey(key); err != nil {
		return nil, toStatus(err)
	}
	if !s.arb.MayReadHistory(id, key) {
		return nil, toStatus(fmt.Errorf("%w: history of %s", authz.ErrDenied, key))
	}
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > historyMaxLimit:
		return nil, toStatus(fmt.Errorf("%w: limit: must be between 0 and %d, got %d", arbiter.ErrInvalid, historyMaxLimit, limit))
	case limit == 0:
		limit = historyDefaultLimit
	}
	kinds, err := historyKinds(req.GetKinds())
	if err != nil {
		return nil, toStatus(err)
	}
	f := audit.Filter{Key: key, Identity: req.GetIdentity(), Class: req.GetClass(), Kinds: kinds, Limit: limit + 1}
	if req.GetSince() != nil {
		f.Since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		f.Until = req.GetUntil().AsTime()
	}
	rows, err := s.history.Query(ctx, f)
	// The sink stopped at its limit: rows past it were not read, so an
	// answer that leaves rows out for this caller cannot say it is whole.
	unread := len(rows) == f.Limit
	if err == nil {
		// Gaps belong to every key's history: what is missing is said.
		var gaps []audit.Event
		gaps, err = s.history.Query(ctx, audit.Filter{Kinds: []audit.Kind{audit.KindGap}, Since: f.Since, Until: f.Until})
		rows = mergeRows(rows, gaps)
	}
	if err == nil && (len(kinds) == 0 || slices.Contains(kinds, audit.KindMove)) {
		// A move of a range the key is in belongs to the key's history
		// (the query above finds only the ranges under a prefix asked).
		var moves []audit.Event
		moves, err = s.history.Query(ctx, audit.Filter{Kinds: []audit.Kind{audit.KindMove}, Since: f.Since, Until: f.Until, Limit: historyMaxLimit})
		rows = mergeRows(rows, covering(moves, key))
	}
	if err != nil {
		s.log.Warn("history query failed", "err", err)
		return nil, toStatus(fmt.Errorf("%w: the audit history did not answer: %v", arbiter.ErrUnavailable, err))
	}
	operator := s.arb.IsOperator(id)
	resp := &lockv1.HistoryResponse{}
	for _, r := range rows {
		switch {
		case operator, r.Kind == audit.KindGap:
		case r.Kind == audit.KindMove:
			if !strings.HasPrefix(key, r.Key) && !s.arb.MayReadHistory(id, r.Key) {
				continue // a range under the prefix the caller may not read
			}
		case !s.arb.MayRead(id, r.Key):
			continue // under the prefix, but not a key this caller may lock
		}
		if len(resp.Events) == limit {
			resp.Truncated = true
			break
		}
		resp.Events = append(resp.Events, historyProto(r, operator))
	}
	resp.Truncated = resp.Truncated || unread
	return resp, nil
}

// historyKinds checks the kinds a History request asks for.
func historyKinds(names []string) ([]audit.Kind, error) {
	var out []audit.Kind
	for _, n := range names {
		k := audit.Kind(n)
		if !slices.Contains(audit.Kinds, k) {
			valid := make([]string, len(audit.Kinds))
			for i, k := range audit.Kinds {
				valid[i] = string(k)
			}
			return nil, fmt.Errorf("%w: kinds: %q is not a kind of history row; kinds are %s", arbiter.ErrInvalid, n, strings.Join(valid, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}

// covering are the move rows of the ranges key is in: a range shorter
// than the key that is a prefix of it. (A range equal to or under a prefix
// asked is a row of the prefix's own query.)
func covering(moves []audit.Event, key string) []audit.Event {
	var out []audit.Event
	for _, m := range moves {
		if len(m.Key) < len(key) && strings.HasPrefix(key, m.Key) {
			out = append(out, m)
		}
	}
	return out
}

// mergeRows merges two row lists in identity order.
func mergeRows(a, b []audit.Event) []audit.Event {
	out := make([]audit.Event, 0, len(a)+len(b))
	less := func(x, y audit.Event) bool {
		if x.ClusterID != y.ClusterID {
			return x.ClusterID < y.ClusterID
		}
		if x.Epoch != y.Epoch {
			return x.Epoch < y.Epoch
		}
		if x.Revision != y.Revision {
			return x.Revision < y.Revision
		}
		return x.Key < y.Key
	}
	for len(a) > 0 && len(b) > 0 {
		if less(b[0], a[0]) {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// validateHistoryKey accepts a lock key or a listing prefix: a namespace
// alone ("payments/") is a prefix, as for Inspect's listing.
func validateHistoryKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key: required: a key, or a prefix ending in \"/\"", arbiter.ErrInvalid)
	}
	validate := lockkey.Validate
	if strings.HasSuffix(key, "/") {
		validate = lockkey.ValidatePrefix
	}
	if err := validate(key); err != nil {
		return fmt.Errorf("%w: key: %w", arbiter.ErrInvalid, err)
	}
	return nil
}

func historyProto(r audit.Event, tokens bool) *lockv1.HistoryEvent {
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	e := &lockv1.HistoryEvent{
		ClusterId: r.ClusterID, Epoch: r.Epoch, Revision: r.Revision, Key: r.Key, Kind: string(r.Kind), Class: r.Class,
		ObservedAt: ts(r.ObservedAt),
		Holder:     r.Holder, SessionId: r.Session, AcquiredAt: ts(r.AcquiredAt),
		EndedHolder: r.EndedHolder, EndedSessionId: r.EndedSession, EndedAcquiredAt: ts(r.EndedAcquiredAt),
		Requester: r.Requester, Approver: r.Approver, Reason: r.Reason,
		FromEpoch: r.FromEpoch, ToEpoch: r.ToEpoch, GapFrom: r.GapFrom, GapTo: r.GapTo,
		Unprotected: r.Unprotected, ArbiterId: r.Arbiter, SpoolSeq: r.SpoolSeq,
	}
	if r.Duration > 0 {
		e.Duration = durationpb.New(r.Duration)
	}
	if tokens {
		e.Token, e.EndedToken = tokenProto(r.Token), tokenProto(r.EndedToken)
	}
	return e
}

func tokenProto(v uint64) *lockv1.Token {
	if v == 0 {
		return nil
	}
	epoch, rev := token.Unpack(v)
	return &lockv1.Token{Value: v, Epoch: epoch, Revision: rev}
}

// HistoryStats implements lock.v1. Like ClassStats, it answers for the
// namespaces the caller has grants in (every namespace, for an operator):
// another team's class names, counts and longest hold are not the
// caller's to read.
func (s *Server) HistoryStats(ctx context.Context, req *lockv1.HistoryStatsRequest) (*lockv1.HistoryStatsResponse, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if s.history == nil {
		return nil, toStatus(ErrHistoryOff)
	}
	operator := s.arb.IsOperator(id)
	mine := s.arb.Policy().Authz.NamespacesOf(id.String())
	if !operator && len(mine) == 0 {
		return &lockv1.HistoryStatsResponse{}, nil // no namespace of its own: nothing to read
	}
	var since, until time.Time
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		until = req.GetUntil().AsTime()
	}
	stats, err := s.history.Stats(ctx, since, until)
	if err != nil {
		s.log.Warn("history stats failed", "err", err)
		return nil, toStatus(fmt.Errorf("%w: the audit history did not answer: %v", arbiter.ErrUnavailable, err))
	}
	resp := &lockv1.HistoryStatsResponse{}
	for _, c := range stats {
		ns, name, _ := strings.Cut(c.Class, "/")
		if !operator && !slices.Contains(mine, ns) {
			continue
		}
		resp.Classes = append(resp.Classes, &lockv1.ClassHistory{Namespace: ns, Class: name, Grants: c.Grants, Expiries: c.Expiries,
			Forced: c.Forced, LongestHold: durationpb.New(c.Longest)})
	}
	return resp, nil
}
