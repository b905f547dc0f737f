package prometheus_test

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// family is a metric family as lockd registers it.
type family struct {
	typ     dto.MetricType
	labels  []string // sorted, without le
	help    string
	buckets []float64                  // a histogram's upper bounds
	values  map[string]map[string]bool // label name -> the values gathered
	// zeroInit: a counter vec whose series lockd exports at 0, before
	// any increment (a series created by its first increment is at 1).
	zeroInit bool
}

// gatherLockd starts lockd with the audit history and drives the traffic
// that makes its labelled families appear: a grant, a queued acquire, a
// leak refusal, ValidateToken calls until one is rate-limited, and a
// session that expires.
func gatherLockd(t *testing.T) map[string]family {
	t.Helper()
	reg := prometheus.NewRegistry()
	env := lockdtest.Start(t, lockdtest.Options{Registry: reg, Audit: true})
	ctx := t.Context()
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	open := func(lc lockv1.LockServiceClient, ttl time.Duration) int64 {
		t.Helper()
		resp, err := lc.OpenSession(ctx, &lockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)})
		if err != nil {
			t.Fatalf("OpenSession: %v", err)
		}
		return resp.GetSessionId()
	}
	acquire := func(lc lockv1.LockServiceClient, sid int64, key string, wait time.Duration) (*lockv1.AcquireResponse, error) {
		return lc.Acquire(ctx, &lockv1.AcquireRequest{SessionId: sid, Key: key, Class: "std", Wait: durationpb.New(wait)})
	}
	// A session that is never renewed expires after the minimum TTL.
	open(alice, 5*time.Second)

	sid := open(alice, 15*time.Second)
	g, err := acquire(alice, sid, "t/alerts/1", 0)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if _, err := acquire(bob, open(bob, 15*time.Second), "t/alerts/1", 100*time.Millisecond); status.Code(err) != codes.Aborted {
		t.Fatalf("a queued acquire of a held key: %v, want ABORTED (WAIT_TIMEOUT)", err)
	}
	if _, err := acquire(alice, open(alice, 15*time.Second), "t/alerts/1", 0); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the holder's identity under another session: %v, want ALREADY_EXISTS (LEAK)", err)
	}
	limited := false
	for range 1000 {
		_, err := alice.ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: "t/alerts/1", Token: g.GetToken().GetValue()})
		if status.Code(err) == codes.ResourceExhausted {
			limited = true
			break
		}
		if err != nil {
			t.Fatalf("ValidateToken: %v", err)
		}
	}
	if !limited {
		t.Fatal("1000 ValidateToken calls in a row were not rate-limited")
	}

	// Wait for the families that come later: the expiry, and the audit
	// tailer's gauges and its gap counter (exported at 0 once it tails a
	// cluster). With these, every family the rules name has appeared.
	later := []string{"lockd_expiries_without_release_total", "lockd_audit_lag_seconds",
		"lockd_audit_lag_past_half_window", "lockd_audit_compaction_window_seconds", "lockd_audit_gaps_total"}
	var fams map[string]family
	lockdtest.WaitFor(t, 15*time.Second, fmt.Sprintf("lockd to export %v", later), func() bool {
		fams = gather(t, reg)
		for _, n := range later {
			if _, ok := fams[n]; !ok {
				return false
			}
		}
		return true
	})
	// The code label is the gRPC code's Go name, as the rules match it.
	for fam, code := range map[string]string{"lockd_acquires_total": "AlreadyExists", "lockd_token_validations_total": "ResourceExhausted"} {
		if !fams[fam].values["code"][code] {
			t.Errorf("%s has no series with code=%q after that traffic; it has %v", fam, code, keys(fams[fam].values["code"]))
		}
	}
	return fams
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]family {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		f := family{typ: mf.GetType(), help: mf.GetHelp(), values: map[string]map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if f.values[lp.GetName()] == nil {
					f.values[lp.GetName()] = map[string]bool{}
				}
				f.values[lp.GetName()][lp.GetValue()] = true
			}
			if c := m.GetCounter(); c != nil && len(m.GetLabel()) > 0 && c.GetValue() == 0 {
				f.zeroInit = true
			}
			if h := m.GetHistogram(); h != nil && f.buckets == nil {
				for _, b := range h.GetBucket() {
					f.buckets = append(f.buckets, b.GetUpperBound())
				}
			}
		}
		f.labels = keys(f.values)
		out[mf.GetName()] = f
	}
	return out
}

var (
	// A lockd metric name, not part of a recorded name (lockd:…) or of
	// another identifier, with its selector if it has one.
	metricRef = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(lockd_[a-zA-Z0-9_]+|up)\b\s*(\{[^}]*\})?`)
	recordRef = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(lockd:[a-zA-Z0-9_:]+)`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	grouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	seriesRe  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$`)
)

// TestRulesNameRealSeries: every metric the rules and the promtool tests
// name is one lockd registers, selected and grouped by labels it has; every
// test series has exactly lockd's labels plus job and instance, and values
// shaped like lockd's (counters that only go up but across a restart,
// 0/1 gauges, histogram buckets that lockd has).
func TestRulesNameRealSeries(t *testing.T) {
	t.Parallel()
	rules := loadRules(t)
	tests := loadTests(t)
	fams := gatherLockd(t)

	fams["up"] = family{typ: dto.MetricType_GAUGE, help: "1 when Prometheus scraped the target, else 0."}

	// base resolves a series name to its family: a histogram's _bucket,
	// _count and _sum are the histogram's.
	base := func(name string) (string, string, bool) {
		if _, ok := fams[name]; ok {
			return name, "", true
		}
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suf); ok {
				if f, ok := fams[b]; ok && f.typ == dto.MetricType_HISTOGRAM {
					return b, suf, true
				}
			}
		}
		return "", "", false
	}
	allowedLabels := func(fam, suffix string) map[string]bool {
		out := map[string]bool{}
		for _, l := range append(slices.Clone(fams[fam].labels), promLabels...) {
			out[l] = true
		}
		if suffix == "_bucket" {
			out["le"] = true
		}
		return out
	}
	anyLabel := map[string]bool{"le": true}
	for _, l := range promLabels {
		anyLabel[l] = true
	}
	for n, f := range fams {
		if strings.HasPrefix(n, "lockd_") {
			for _, l := range f.labels {
				anyLabel[l] = true
			}
		}
	}

	recorded := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	used := map[string]bool{}
	for _, r := range rules {
		what := r.Alert + r.Record
		for _, m := range metricRef.FindAllStringSubmatch(r.Expr, -1) {
			fam, suffix, ok := base(m[1])
			if !ok {
				t.Errorf("%s: %s is not a metric lockd exports", what, m[1])
				continue
			}
			used[fam] = true
			allowed := allowedLabels(fam, suffix)
			for _, mm := range matcher.FindAllStringSubmatch(m[2], -1) {
				if !allowed[mm[1]] {
					t.Errorf("%s: %s{%s…}: %s has no label %s (it has %v)", what, m[1], mm[1], fam, mm[1], keys(allowed))
				}
				checkLabelValue(t, what, fam, fams[fam], mm[1], mm[2], mm[3])
			}
		}
		for _, m := range recordRef.FindAllStringSubmatch(r.Expr, -1) {
			if !recorded[m[1]] {
				t.Errorf("%s: %s is recorded by no rule", what, m[1])
			}
		}
		for _, m := range grouping.FindAllStringSubmatch(r.Expr, -1) {
			for l := range strings.SplitSeq(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !anyLabel[l] {
					t.Errorf("%s: groups by %q, a label no lockd series has", what, l)
				}
			}
		}
	}

	for file, tf := range tests {
		for i, ut := range tf.Tests {
			hist := map[string]map[string][]sample{} // histogram series without le -> le -> values
			for _, in := range ut.InputSeries {
				where := fmt.Sprintf("%s: test %d: %s", file, i+1, in.Series)
				m := seriesRe.FindStringSubmatch(in.Series)
				if m == nil {
					t.Errorf("%s: not name{labels}", where)
					continue
				}
				fam, suffix, ok := base(m[1])
				if !ok {
					t.Errorf("%s: %s is not a metric lockd exports", where, m[1])
					continue
				}
				used[fam] = true
				got := map[string]string{}
				for _, mm := range matcher.FindAllStringSubmatch(m[2], -1) {
					if mm[2] != "=" {
						t.Errorf("%s: a series has label values, not matchers", where)
					}
					got[mm[1]] = mm[3]
				}
				if want := keys(allowedLabels(fam, suffix)); !slices.Equal(keys(got), want) {
					t.Errorf("%s: labels %v, want exactly %v (lockd's, plus job and instance)", where, keys(got), want)
				}
				for l, v := range got {
					checkLabelValue(t, where, fam, fams[fam], l, "=", v)
				}
				vals, err := expandValues(in.Values)
				if err != nil {
					t.Errorf("%s: values %q: %v", where, in.Values, err)
					continue
				}
				checkShape(t, where, fams[fam], suffix, len(fams[fam].labels) > 0, vals)
				if fams[fam].typ == dto.MetricType_HISTOGRAM {
					le := got["le"]
					delete(got, "le")
					key := fmt.Sprintf("%s %v", fam, got)
					if hist[key] == nil {
						hist[key] = map[string][]sample{}
					}
					hist[key][suffix+le] = vals
				}
			}
			for key, series := range hist {
				checkHistogram(t, fmt.Sprintf("%s: test %d: %s", file, i+1, key), series)
			}
		}
	}
	for _, n := range []string{"lockd_grant_latency_seconds", "lockd_acquires_total", "lockd_leaks_total",
		"lockd_token_validations_total", "lockd_expiries_without_release_total", "lockd_audit_gaps_total"} {
		if !used[n] {
			t.Errorf("no rule or test uses %s: is this check still reading the files?", n)
		}
	}
}

// checkLabelValue checks the values of the labels whose values lockd
// fixes: le (a bucket lockd has) and the code of acquires and ValidateToken
// calls (a gRPC code, or a ValidateToken answer).
func checkLabelValue(t *testing.T, where, fam string, f family, label, op, value string) {
	t.Helper()
	var ok func(string) bool
	switch {
	case label == "le":
		ok = func(v string) bool {
			if v == "+Inf" {
				return true
			}
			x, err := strconv.ParseFloat(v, 64)
			return err == nil && slices.Contains(f.buckets, x)
		}
	case label == "code" && (fam == "lockd_acquires_total" || fam == "lockd_token_validations_total"):
		valid := map[string]bool{}
		for c := codes.OK; c <= codes.Unauthenticated; c++ {
			valid[c.String()] = true
		}
		if fam == "lockd_token_validations_total" {
			for _, s := range []string{"current", "superseded", "not_held", "other_epoch"} {
				valid[s] = true
			}
		}
		ok = func(v string) bool { return valid[v] }
	default:
		return
	}
	vals := []string{value}
	if op == "=~" || op == "!~" {
		vals = strings.Split(value, "|")
	}
	for _, v := range vals {
		if !ok(v) {
			t.Errorf("%s: %s %s%s%q: %q is no value lockd gives %s", where, fam, label, op, value, v, label)
		}
	}
}

// sample is one step of a promtool input series.
type sample struct {
	v      float64
	absent bool // "_": no sample
	stale  bool // "stale": a staleness marker (the series went away)
}

var (
	expanding = regexp.MustCompile(`^([+-]?\d+(?:\.\d+)?)(?:([+-])(\d+(?:\.\d+)?))?x(\d+)$`)
	number    = regexp.MustCompile(`^[+-]?\d+(?:\.\d+)?$`)
)

// expandValues reads promtool's expanding notation: "a+bxn" is n+1 values
// from a in steps of b, "axn" a n+1 times, "_xn" n missing samples, "_" one,
// "stale" a staleness marker.
func expandValues(s string) ([]sample, error) {
	var out []sample
	for tok := range strings.FieldsSeq(s) {
		switch {
		case tok == "_":
			out = append(out, sample{absent: true})
		case tok == "stale":
			out = append(out, sample{stale: true})
		case strings.HasPrefix(tok, "_x"):
			n, err := strconv.Atoi(tok[2:])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", tok, err)
			}
			for range n {
				out = append(out, sample{absent: true})
			}
		case number.MatchString(tok):
			v, _ := strconv.ParseFloat(tok, 64)
			out = append(out, sample{v: v})
		default:
			m := expanding.FindStringSubmatch(tok)
			if m == nil {
				return nil, fmt.Errorf("%q is not a, a+bxn, axn, _, _xn or stale", tok)
			}
			a, _ := strconv.ParseFloat(m[1], 64)
			b := 0.0
			if m[3] != "" {
				b, _ = strconv.ParseFloat(m[3], 64)
				if m[2] == "-" {
					b = -b
				}
			}
			n, _ := strconv.Atoi(m[4])
			for i := 0; i <= n; i++ {
				out = append(out, sample{v: a + float64(i)*b})
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no values")
	}
	return out, nil
}

// checkShape: a counter (or a histogram's parts) never goes down except
// after a staleness marker (lockd restarted), and a counter vec's series
// appears only with its first increment; a gauge whose help says "1 when"
// or "1 while" is 0 or 1.
func checkShape(t *testing.T, where string, f family, suffix string, vec bool, vals []sample) {
	t.Helper()
	counter := f.typ == dto.MetricType_COUNTER || f.typ == dto.MetricType_HISTOGRAM
	boolean := f.typ == dto.MetricType_GAUGE && (strings.HasPrefix(f.help, "1 when") || strings.HasPrefix(f.help, "1 while"))
	prev, havePrev, gone, present := 0.0, false, false, false
	for i, s := range vals {
		switch {
		case s.stale:
			gone = true
			continue
		case s.absent:
			if havePrev {
				gone = true // missing after present: only after a restart
			}
			continue
		}
		if boolean && s.v != 0 && s.v != 1 {
			t.Errorf("%s: sample %d is %v; this gauge is 0 or 1", where, i, s.v)
		}
		if counter {
			if havePrev && !gone && s.v < prev {
				t.Errorf("%s: sample %d goes down from %v to %v without a restart (a staleness marker) between", where, i, prev, s.v)
			}
			// A counter vec's series is created by its first increment: one
			// that appears mid-test (after missing samples or a restart)
			// starts above 0, unless lockd exports it at 0 beforehand.
			// (Histogram parts start at the first grant.)
			if vec && !f.zeroInit && suffix == "" && f.typ == dto.MetricType_COUNTER && (!havePrev && i > 0 || gone) && s.v <= 0 {
				t.Errorf("%s: sample %d: the series appears at %v; a counter vec's series appears with its first increment", where, i, s.v)
			}
		}
		prev, havePrev, gone, present = s.v, true, false, true
	}
	if !present {
		t.Errorf("%s: no sample at all", where)
	}
}

// checkHistogram: at every step, buckets grow with le, none is above
// _count, and le="+Inf" equals _count.
func checkHistogram(t *testing.T, where string, series map[string][]sample) {
	t.Helper()
	count, ok := series["_count"]
	if !ok {
		t.Errorf("%s: buckets without _count", where)
		return
	}
	type bucket struct {
		le   float64
		vals []sample
	}
	var buckets []bucket
	for k, vals := range series {
		le, ok := strings.CutPrefix(k, "_bucket")
		if !ok {
			continue
		}
		x := math.Inf(1)
		if le != "+Inf" {
			x, _ = strconv.ParseFloat(le, 64)
		}
		buckets = append(buckets, bucket{x, vals})
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	for i := range count {
		prev := 0.0
		for _, b := range buckets {
			if i >= len(b.vals) || b.vals[i].absent || b.vals[i].stale || count[i].absent || count[i].stale {
				continue
			}
			v := b.vals[i].v
			if v < prev {
				t.Errorf("%s: step %d: bucket le=%v (%v) below a smaller bucket (%v)", where, i, b.le, v, prev)
			}
			if v > count[i].v {
				t.Errorf("%s: step %d: bucket le=%v (%v) above _count (%v)", where, i, b.le, v, count[i].v)
			}
			if math.IsInf(b.le, 1) && v != count[i].v {
				t.Errorf("%s: step %d: le=+Inf (%v) is not _count (%v)", where, i, v, count[i].v)
			}
			prev = v
		}
	}
}
