package top

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Source is what `lockctl top` reads from lockd and asks of it. The
// console takes one, so tests can render it over fixed data.
type Source interface {
	// Fetch reads one refresh: classes, class statistics, holds and the
	// epoch state.
	Fetch(ctx context.Context) (Data, error)
	// Inspect describes one key, with its holder's session time left and
	// its waiters in order.
	Inspect(ctx context.Context, key string) (*lockv1.InspectResponse, error)
	// RequestForceRelease records a force-release request for key; a
	// second operator approves it.
	RequestForceRelease(ctx context.Context, key, reason string) (*lockv1.ForceRelease, error)
}

// clientSource reads a lockd through lockctl's client.
type clientSource struct {
	c      *client.Client
	prefix string
	limit  int

	// The history's last hour, read at most every historyEvery.
	history   *lockv1.HistoryStatsResponse
	historyAt time.Time
}

// historyEvery is how often top reads the history's last hour: it is an
// aggregate over many rows, and an hour moves slowly.
const historyEvery = 30 * time.Second

// NewSource returns the Source for a lockd client: holds under prefix, or
// with no prefix, under each namespace the caller may see (ListHolds needs a
// prefix), at most limit per namespace.
func NewSource(c *client.Client, prefix string, limit int) Source {
	return &clientSource{c: c, prefix: prefix, limit: limit}
}

// Fetch implements Source.
func (s *clientSource) Fetch(ctx context.Context) (Data, error) {
	lock := s.c.LockService()
	classes, err := lock.ListClasses(ctx, &lockv1.ListClassesRequest{})
	if err != nil {
		return Data{}, err
	}
	stats, err := lock.ClassStats(ctx, &lockv1.ClassStatsRequest{})
	if err != nil {
		return Data{}, err
	}
	d := Data{Classes: classes, Stats: stats, Holds: &lockv1.ListHoldsResponse{}}
	for _, p := range s.prefixes(classes, stats) {
		// A caller granted part of a namespace (t/carol/) may list the whole
		// namespace: lockd leaves out the keys it may not read.
		resp, err := lock.ListHolds(ctx, &lockv1.ListHoldsRequest{Prefix: p, Limit: int32(s.limit)})
		if err != nil {
			return Data{}, err
		}
		d.Holds.Holds = append(d.Holds.Holds, resp.GetHolds()...)
		d.Holds.Truncated = d.Holds.Truncated || resp.GetTruncated()
	}
	if s.prefix != "" {
		kept := stats.GetStats()[:0]
		for _, st := range stats.GetStats() {
			if inPrefix(st.GetNamespace(), s.prefix) {
				kept = append(kept, st)
			}
		}
		stats.Stats = kept
		keptClasses := classes.GetClasses()[:0]
		for _, c := range classes.GetClasses() {
			if inPrefix(c.GetNamespace(), s.prefix) {
				keptClasses = append(keptClasses, c)
			}
		}
		classes.Classes = keptClasses
	}
	// Epoch state is extra: a lockd that will not say keeps the rest.
	if ep, err := s.c.AdminService().EpochStatus(ctx, &lockv1.EpochStatusRequest{}); err == nil {
		d.Epoch = ep
	}
	// So is the history: a lockd without one leaves its columns empty.
	if now := time.Now(); now.Sub(s.historyAt) >= historyEvery {
		s.history, s.historyAt = nil, now
		if h, err := lock.HistoryStats(ctx, &lockv1.HistoryStatsRequest{Since: timestamppb.New(now.Add(-time.Hour))}); err == nil {
			s.history = h
		}
	}
	d.History = s.history
	return d, nil
}

// prefixes are the ListHolds prefixes: --prefix, or every visible namespace.
func (s *clientSource) prefixes(classes *lockv1.ListClassesResponse, stats *lockv1.ClassStatsResponse) []string {
	if s.prefix != "" {
		return []string{s.prefix}
	}
	var ps []string
	for _, c := range classes.GetClasses() {
		ps = append(ps, c.GetNamespace()+"/")
	}
	for _, st := range stats.GetStats() {
		ps = append(ps, st.GetNamespace()+"/")
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// inPrefix reports whether namespace ns overlaps prefix.
func inPrefix(ns, prefix string) bool {
	return strings.HasPrefix(ns+"/", prefix) || strings.HasPrefix(prefix, ns+"/")
}

// Inspect implements Source.
func (s *clientSource) Inspect(ctx context.Context, key string) (*lockv1.InspectResponse, error) {
	return s.c.LockService().Inspect(ctx, &lockv1.InspectRequest{Key: key})
}

// RequestForceRelease implements Source.
func (s *clientSource) RequestForceRelease(ctx context.Context, key, reason string) (*lockv1.ForceRelease, error) {
	resp, err := s.c.AdminService().RequestForceRelease(ctx, &lockv1.RequestForceReleaseRequest{Key: key, Reason: reason})
	if err != nil {
		return nil, err
	}
	return resp.GetForceRelease(), nil
}
