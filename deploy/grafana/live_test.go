package grafana_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/internal/testserver"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// zeroIsData are the panels (uid/title) and panel targets
// (uid/title/refId) whose every value may be 0 in the test, with why; every
// other target must show a value above 0, i.e. the test's traffic. A zero
// on these is still a series the query must return.
var zeroIsData = map[string]string{
	"lockd-overview/Sealed":                                    "the store was never restored: serving",
	"lockd-overview/Epoch grace":                               "no epoch advance",
	"lockd-overview/Epoch read age (quorum)":                   "etcd has quorum: the age stays near 0",
	"lockd-overview/Audit lag vs half the compaction window/A": "the tailer keeps up",
	"lockd-overview/Audit gaps":                                "nothing is compacted before the tailer reads it",
	"lockd-overview/Audit rows stored and sink errors/B":       "the SQLite sink does not fail",
	"lockd-overview/Class reload failures":                     "the classes are never changed",
	// lockd counts a keepalive failure when etcd answers a keepalive of a
	// session it still knows with TTL 0: a race between the lease's expiry
	// and the session watch the test cannot drive; no quorum loss either.
	"lockd-overview/Keepalive failures and uncredited keepalives": "no keepalive races a session's expiry; etcd keeps quorum",
	"lockd-etcd-health/Leader changes":                            "the one election happened before the first scrape",
	"lockd-etcd-health/Raft proposals committed and failed/B":     "no proposal fails on a healthy etcd",
	"lockd-etcd-health/Proposals pending":                         "one member commits at once",
	"lockd-etcd-health/Slow applies and failed read indexes":      "a healthy etcd",
	"lockd-etcd-health/gRPC errors by code":                       "a healthy etcd answers OK",
}

// drivenNamespace is the namespace $namespace stands for: the one the
// traffic below drives every kind of event in.
const drivenNamespace = "t"

func fence(*client.Lock) {}

// TestEveryPanelHasDataFromARealLockd runs two lockds on one etcd, the
// first with it embedded and the audit history on, the second connected to
// it over gRPC; drives real traffic into both (namespace t into the first,
// other into the second); scrapes both with a real Prometheus every second
// (the first's /metrics carries the embedded etcd's metrics); and evaluates
// every target of every panel of every dashboard there, its variables
// substituted: each must parse and return a series with a number in it,
// and each one not in zeroIsData a value above 0.
func TestEveryPanelHasDataFromARealLockd(t *testing.T) {
	start := time.Now()
	dashboards := loadDashboards(t)
	a := lockdtest.Start(t, lockdtest.Options{Registry: prometheus.NewRegistry(), Audit: true})
	ctx, stop := context.WithCancel(t.Context())

	// Holds that last the whole test, in both namespaces, so that the
	// store-wide session and hold gauges have something to count.
	for _, h := range []struct{ id, key string }{{lockdtest.Alice, "t/steady"}, {"spiffe://test.local/other", "other/steady"}} {
		if _, err := a.Client(t, h.id).Acquire(ctx, h.key, "std", fence); err != nil {
			t.Fatal(err)
		}
	}
	// A second lockd on the same etcd, connected to it over the network as
	// to an external cluster: its etcd calls go through etcd's gRPC server
	// (the first lockd's are in-process) and count in grpc_server_*. It
	// counts the store's sessions and holds when it starts (the first one
	// next counts 15 s after its start), and the dashboards aggregate the
	// two with max.
	ext, err := store.ConnectExternal(store.ExternalConfig{Endpoints: []string{"http://" + a.Backend.Embedded.Clients[0].Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ext.Close)
	b := lockdtest.Start(t, lockdtest.Options{Backend: ext, Registry: prometheus.NewRegistry()})

	tr := newTraffic(t, a, b)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); tr.run(ctx) }()
	t.Cleanup(func() { stop(); wg.Wait() })

	prom := testserver.StartPrometheus(t, a.MetricsAddr, b.MetricsAddr)
	query := func(expr string) ([]float64, error) {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		v, err := testserver.QueryPrometheus(qctx, prom, expr)
		if err != nil {
			return nil, err
		}
		vec, ok := v.(model.Vector)
		if !ok {
			return nil, fmt.Errorf("%s: a %s, want an instant vector", expr, v.Type())
		}
		out := make([]float64, len(vec))
		for i, s := range vec {
			out[i] = float64(s.Value)
		}
		return out, nil
	}
	waitUntil(t, 15*time.Second, "Prometheus has scraped both lockds", func() string {
		v, err := query(`up{job="lockd"} == 1`)
		if err != nil || len(v) != 2 {
			return fmt.Sprintf("%v, %v", v, err)
		}
		return ""
	})
	scraping := time.Now()

	// Every target of every panel, until all have data or the deadline.
	type check struct {
		key   string // uid/title/refId
		where string
		expr  string
	}
	var checks []check
	for _, path := range slices.Sorted(maps.Keys(dashboards)) {
		d := dashboards[path]
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				expr := expand(tg.Expr, drivenNamespace)
				if strings.Contains(expr, "$") {
					t.Fatalf("%s %q target %s: a variable is left after substitution: %s", path, p.Title, tg.RefID, expr)
				}
				checks = append(checks, check{key: d.UID + "/" + p.Title + "/" + tg.RefID,
					where: fmt.Sprintf("%s %q target %s", path, p.Title, tg.RefID), expr: expr})
			}
		}
	}
	zeroOK := func(key string) bool {
		_, target := zeroIsData[key]
		_, panel := zeroIsData[key[:strings.LastIndex(key, "/")]]
		return target || panel
	}
	for key := range zeroIsData {
		if !slices.ContainsFunc(checks, func(c check) bool { return c.key == key || strings.HasPrefix(c.key, key+"/") }) {
			t.Errorf("zeroIsData names %s, which no dashboard has", key)
		}
	}
	last := map[string][]float64{}
	pending := func() []string {
		var out []string
		for _, c := range checks {
			v, err := query(c.expr)
			last[c.key] = v
			switch {
			case err != nil:
				out = append(out, fmt.Sprintf("%s: %v", c.where, err))
			case !finite(v):
				out = append(out, fmt.Sprintf("%s: no data (%v) for %s", c.where, v, c.expr))
			case !zeroOK(c.key) && !slices.ContainsFunc(v, func(x float64) bool { return x > 0 }):
				out = append(out, fmt.Sprintf("%s: every value is 0 (%v), yet the test drives it: %s", c.where, v, c.expr))
			}
		}
		return out
	}
	var left []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if left = pending(); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Fatalf("%d panel targets without the data the traffic makes, %v after Prometheus first scraped both lockds:\n%s",
			len(left), time.Since(scraping).Round(time.Second), strings.Join(left, "\n"))
	}

	if testing.Verbose() {
		for _, c := range checks {
			t.Logf("%s: %v", c.key, last[c.key])
		}
	}

	// The etcd metrics come from the lockd with the embedded etcd only:
	// one connected to an etcd over the network leaves them to etcd's own
	// /metrics.
	res, err := testserver.QueryPrometheus(ctx, prom, `count by (instance) (etcd_server_has_leader)`)
	if err != nil {
		t.Fatal(err)
	}
	if vec := res.(model.Vector); len(vec) != 1 || string(vec[0].Metric["instance"]) != a.MetricsAddr {
		t.Errorf("etcd_server_has_leader by instance = %v, want only the embedded lockd's %s", vec, a.MetricsAddr)
	}

	// The namespace variable lists the namespaces the traffic used.
	for path, d := range dashboards {
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			m := labelValues.FindStringSubmatch(v.Query)
			if m == nil {
				t.Fatalf("%s: variable %s: query %q is not label_values(metric, label)", path, v.Name, v.Query)
			}
			got := map[string]bool{}
			res, err := testserver.QueryPrometheus(ctx, prom, fmt.Sprintf("group by (%s) (%s)", m[2], m[1]))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range res.(model.Vector) {
				got[string(s.Metric[model.LabelName(m[2])])] = true
			}
			if !got[drivenNamespace] || !got["other"] {
				t.Errorf("%s: variable %s = %v, want both namespaces the test drove (t, other)", path, v.Name, got)
			}
		}
	}
	t.Logf("%d panel targets of %d dashboards have data %v after Prometheus first scraped both lockds (%v in all); traffic: %s",
		len(checks), len(dashboards), time.Since(scraping).Round(time.Second), time.Since(start).Round(time.Second), tr.summary())
}

// rateInterval and rangeWindow stand in for Grafana's $__rate_interval
// and $__range: 30 s of 1 s scrapes is what $__rate_interval is at its
// smallest (four scrape intervals) many times over.
const (
	rateInterval = "30s"
	rangeWindow  = "5m"
)

// expand substitutes the dashboard variables in expr the way Grafana does
// before it sends the query: ns for $namespace.
func expand(expr, ns string) string {
	return strings.NewReplacer(
		"$__rate_interval", rateInterval, "${__rate_interval}", rateInterval,
		"$__range", rangeWindow, "${__range}", rangeWindow,
		"$namespace", ns, "${namespace}", ns,
	).Replace(expr)
}

// finite reports whether v has a sample that is a number (not NaN, which
// Grafana shows as no data).
func finite(vs []float64) bool {
	return slices.ContainsFunc(vs, func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) })
}

var labelValues = regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)

// waitUntil polls cond (which says what is missing, "" when done) every
// 250 ms and fails the test if it is not done within d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, d, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// traffic drives every kind of event the dashboards show into lockd, in
// rounds: grants and releases in two namespaces and three classes,
// contention (a second worker waiting for a held key), ValidateToken,
// leak refusals, sessions left to expire with a hold, and force releases
// requested and approved by two operators.
type traffic struct {
	t                *testing.T
	w0, w1, other    *client.Client
	alice, forceHold lockv1.LockServiceClient
	op1, op2         lockv1.AdminServiceClient
	// abandon are the identities of sessions left to expire, one per
	// session, so that no identity's session quota fills.
	abandon []lockv1.LockServiceClient

	mu     sync.Mutex
	counts map[string]int
}

// newTraffic makes the clients (on the test's goroutine: they can fail it):
// namespace t's on env, namespace other's on second.
func newTraffic(t *testing.T, env, second *lockdtest.Env) *traffic {
	tr := &traffic{t: t, counts: map[string]int{},
		w0: env.Client(t, lockdtest.Worker(0)), w1: env.Client(t, lockdtest.Worker(1)),
		other: second.Client(t, "spiffe://test.local/other")}
	tr.alice, _ = env.Raw(t, lockdtest.Alice)
	tr.forceHold, _ = env.Raw(t, lockdtest.Worker(63))
	_, tr.op1 = env.Raw(t, lockdtest.Operator)
	_, tr.op2 = env.Raw(t, lockdtest.Operator2)
	for i := 2; i < 63; i++ {
		lc, _ := env.Raw(t, lockdtest.Worker(i))
		tr.abandon = append(tr.abandon, lc)
	}
	return tr
}

func (tr *traffic) count(what string) {
	tr.mu.Lock()
	tr.counts[what]++
	tr.mu.Unlock()
}

func (tr *traffic) summary() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var parts []string
	for k, v := range tr.counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// run drives rounds every 300 ms until ctx ends. A step that fails for any
// reason but ctx ending fails the test.
func (tr *traffic) run(ctx context.Context) {
	t, other := tr.t, tr.other
	fail := func(step string, err error) bool {
		if err == nil {
			return false
		}
		if ctx.Err() == nil {
			t.Errorf("traffic: %s: %v", step, err)
		}
		return true
	}
	for round := 0; ctx.Err() == nil; round++ {
		tr.contend(ctx, fail)
		for key, cls := range map[string]string{"other/cache/x": "cache", "other/std": "std"} {
			l, err := other.Acquire(ctx, key, cls, fence)
			if fail("other grant", err) {
				return
			}
			_, err = other.ValidateToken(ctx, l.Key(), l.Token())
			if fail("other validate", err) || fail("other release", l.Release(ctx)) {
				return
			}
			tr.count("grants in other")
		}
		if round%2 == 0 && tr.leak(ctx, fail) {
			return
		}
		if round%5 == 0 {
			// A session with a hold that nobody renews or closes: it
			// expires 5 s later (a worker of its own, so no quota fills).
			lc := tr.abandon[round/5%len(tr.abandon)]
			sid, err := openSession(ctx, lc, 5*time.Second)
			if fail("open a session to abandon", err) {
				return
			}
			_, err = lc.Acquire(ctx, &lockv1.AcquireRequest{SessionId: sid, Key: fmt.Sprintf("t/fast/abandoned/%d", round), Class: "fast"})
			if fail("grant to a session to abandon", err) {
				return
			}
			tr.count("sessions abandoned")
		}
		if round%7 == 3 && tr.forceRelease(ctx, round, fail) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// contend: w0 holds t/hot while w1 waits for it, then hands it over; w1
// validates its token while it holds the key and after.
func (tr *traffic) contend(ctx context.Context, fail func(string, error) bool) {
	w0, w1 := tr.w0, tr.w1
	l0, err := w0.Acquire(ctx, "t/fast/hot", "fast", fence)
	if fail("hot grant", err) {
		return
	}
	got := make(chan *client.Lock, 1)
	go func() {
		l1, err := w1.Acquire(ctx, "t/fast/hot", "fast", fence, client.Wait(5*time.Second))
		if fail("hot wait", err) {
			l1 = nil
		}
		got <- l1
	}()
	time.Sleep(100 * time.Millisecond) // w1 queues behind w0
	if fail("hot release", l0.Release(ctx)) {
		<-got
		return
	}
	l1 := <-got
	if l1 == nil {
		return
	}
	_, err = w1.ValidateToken(ctx, "t/fast/hot", l1.Token())
	fail("validate a held token", err)
	fail("hot handed-over release", l1.Release(ctx))
	_, err = w1.ValidateToken(ctx, "t/fast/hot", l1.Token())
	fail("validate a released token", err)
	tr.count("contended grants")
}

// leak: Alice holds t/leak under one session and asks for it under
// another: lockd refuses that as a leak (AlreadyExists).
func (tr *traffic) leak(ctx context.Context, fail func(string, error) bool) (stop bool) {
	alice := tr.alice
	s1, err := openSession(ctx, alice, 5*time.Second)
	if fail("leak session 1", err) {
		return true
	}
	s2, err := openSession(ctx, alice, 5*time.Second)
	if fail("leak session 2", err) {
		return true
	}
	defer func() {
		for _, s := range []int64{s1, s2} {
			_, err := alice.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: s})
			fail("close a leak session", err)
		}
	}()
	if _, err := alice.Acquire(ctx, &lockv1.AcquireRequest{SessionId: s1, Key: "t/fast/leak", Class: "fast"}); fail("leak hold", err) {
		return true
	}
	_, err = alice.Acquire(ctx, &lockv1.AcquireRequest{SessionId: s2, Key: "t/fast/leak", Class: "fast"})
	if status.Code(err) != codes.AlreadyExists {
		return fail("leak refusal", fmt.Errorf("second session's Acquire: %v, want AlreadyExists (LEAK)", err))
	}
	tr.count("leaks refused")
	return false
}

// forceRelease: a worker holds t/stuck/N; one operator requests its force
// release and the other approves it.
func (tr *traffic) forceRelease(ctx context.Context, round int, fail func(string, error) bool) (stop bool) {
	lc, op1, op2 := tr.forceHold, tr.op1, tr.op2
	sid, err := openSession(ctx, lc, 15*time.Second)
	if fail("force: open session", err) {
		return true
	}
	defer func() {
		_, err := lc.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: sid})
		fail("force: close session", err)
	}()
	key := fmt.Sprintf("t/stuck/%d", round)
	if _, err := lc.Acquire(ctx, &lockv1.AcquireRequest{SessionId: sid, Key: key, Class: "std"}); fail("force: hold", err) {
		return true
	}
	req, err := op1.RequestForceRelease(ctx, &lockv1.RequestForceReleaseRequest{Key: key, Reason: "dashboard test"})
	if fail("force: request", err) {
		return true
	}
	_, err = op2.ApproveForceRelease(ctx, &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()})
	if fail("force: approve", err) {
		return true
	}
	tr.count("force releases")
	return false
}

func openSession(ctx context.Context, lc lockv1.LockServiceClient, ttl time.Duration) (int64, error) {
	resp, err := lc.OpenSession(ctx, &lockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)})
	if err != nil {
		return 0, fmt.Errorf("OpenSession: %w", err)
	}
	return resp.GetSessionId(), nil
}
