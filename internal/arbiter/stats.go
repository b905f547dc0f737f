package arbiter

import (
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockd-dev/lockd/internal/identity"
)

// ClassStats is what this arbiter has measured for one class since it
// started: grants and their latency (from Acquire to grant, waiting
// included), and the namespace's sessions that ended by expiry.
type ClassStats struct {
	Namespace, Class string
	Grants           uint64
	// P50 and P99 are bucket upper bounds of the grant latency histogram:
	// "at most", not exact.
	P50, P99               time.Duration
	ExpiriesWithoutRelease uint64
	// Unprotected counts the grants among Grants made without an etcd
	// quorum (token 0; a class with onQuorumLoss: open).
	Unprotected uint64
}

// Stats returns per-class statistics for the namespaces the caller has grants
// in (all, for an operator). They are this arbiter's own, from its metrics.
func (a *Arbiter) Stats(caller identity.Caller) []ClassStats {
	who := caller.String()
	pol := a.policy.Load()
	op := a.IsOperator(caller)
	mine := pol.Authz.NamespacesOf(who)
	visible := func(ns string) bool { return op || slices.Contains(mine, ns) }

	expiries := map[string]uint64{}
	for _, m := range collect(a.metrics.ExpiriesWithoutRelease) {
		expiries[label(m, "namespace")] = uint64(m.GetCounter().GetValue())
	}
	unprotected := map[[2]string]uint64{}
	for _, m := range collect(a.metrics.unprotectedGrants) {
		unprotected[[2]string{label(m, "namespace"), label(m, "class")}] = uint64(m.GetCounter().GetValue())
	}
	var out []ClassStats
	for _, m := range collect(a.metrics.grantLatency) {
		ns, cls := label(m, "namespace"), label(m, "class")
		if !visible(ns) || cls == "-" {
			continue
		}
		h := m.GetHistogram()
		out = append(out, ClassStats{Namespace: ns, Class: cls, Grants: h.GetSampleCount(),
			P50: quantile(h, 0.5), P99: quantile(h, 0.99), ExpiriesWithoutRelease: expiries[ns], Unprotected: unprotected[[2]string{ns, cls}]})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Class < out[j].Namespace+"/"+out[j].Class
	})
	return out
}

func collect(c prometheus.Collector) []*dto.Metric {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	var out []*dto.Metric
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			out = append(out, &d)
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantile is the upper bound of the first bucket holding quantile q.
func quantile(h *dto.Histogram, q float64) time.Duration {
	n := h.GetSampleCount()
	if n == 0 {
		return 0
	}
	want := uint64(q * float64(n))
	if want == 0 {
		want = 1
	}
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() >= want {
			return time.Duration(b.GetUpperBound() * float64(time.Second))
		}
	}
	return time.Duration(h.GetBucket()[len(h.GetBucket())-1].GetUpperBound() * float64(time.Second))
}
