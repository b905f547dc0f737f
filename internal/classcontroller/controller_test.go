package classcontroller_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/classcontroller"
	"github.com/lockd-dev/lockd/internal/kubetest"
)

// These tests run the controller against a real kube-apiserver with the
// project's CRDs (internal/kubetest), on a fake clock where time matters.

// waitTimeout bounds every wait for the controller to act.
const waitTimeout = 20 * time.Second

// t0 is the fake clock's start: the results' ranAt and expires are set
// around it, the API server's own clock is not involved.
var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

type env struct {
	api *kubetest.APIServer
	dyn dynamic.Interface
	kc  kubernetes.Interface
}

// startEnv starts an API server with the CRDs applied.
func startEnv(t *testing.T) *env {
	t.Helper()
	api := kubetest.Start(t)
	api.ApplyCRDs(t, kubetest.CRDDir(t))
	dyn, err := dynamic.NewForConfig(api.RESTConfig())
	require.NoError(t, err)
	kc, err := kubernetes.NewForConfig(api.RESTConfig())
	require.NoError(t, err)
	return &env{api: api, dyn: dyn, kc: kc}
}

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

func (e *env) namespace(t *testing.T, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	_, err := e.dyn.Resource(namespaces).Create(t.Context(), ns, metav1.CreateOptions{})
	require.NoError(t, err)
}

// createClass creates a fenced LockClass ns/name guarding ledger-db at
// schema version 3, changed by mutate.
func (e *env) createClass(t *testing.T, ns, name string, mutate func(spec map[string]any)) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{"keys": []any{ns + "/" + name + "/"}, "purpose": "correctness", "enforcement": "fenced",
		"ttl": "10s", "tier": "entity", "resource": "ledger-db", "resourceSchemaVersion": "3"}
	if mutate != nil {
		mutate(spec)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": class.APIVersion, "kind": class.KindLockClass,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}}
	got, err := e.dyn.Resource(classcontroller.LockClasses).Namespace(ns).Create(t.Context(), obj, metav1.CreateOptions{})
	require.NoError(t, err)
	return got
}

// createResult creates PauseTestResult ns/name for class at schema
// version 3 of ledger-db.
func (e *env) createResult(t *testing.T, ns, name, className string, ranAt, expires time.Time, mutate func(spec map[string]any)) {
	t.Helper()
	spec := map[string]any{"class": className, "resource": "ledger-db", "resourceSchemaVersion": "3", "outcome": "pass",
		"ranAt": ranAt.UTC().Format(time.RFC3339), "expires": expires.UTC().Format(time.RFC3339),
		"tokens": map[string]any{"first": "281474976710664", "second": "281474976710666"}}
	if mutate != nil {
		mutate(spec)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": class.APIVersion, "kind": class.KindPauseTestResult,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}}
	_, err := e.dyn.Resource(classcontroller.PauseTestResults).Namespace(ns).Create(t.Context(), obj, metav1.CreateOptions{})
	require.NoError(t, err)
}

// waitStatus polls LockClass ns/name until its status satisfies ok, and
// returns it.
func (e *env) waitStatus(t *testing.T, ns, name, what string, ok func(class.ClassStatus) bool) class.ClassStatus {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last string
	for {
		obj, err := e.dyn.Resource(classcontroller.LockClasses).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		if st, found := class.ClassStatusOf(obj.Object); found {
			if ok(st) {
				return st
			}
			last = fmt.Sprintf("%+v", st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("class %s/%s: %s: not within %s; last status %s", ns, name, what, waitTimeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fencedWith waits for the Fenced condition of ns/name to have status
// (True or False) and reason.
func (e *env) fencedWith(t *testing.T, ns, name, status, reason string) class.ClassStatus {
	t.Helper()
	return e.waitStatus(t, ns, name, "Fenced "+status+" "+reason, func(st class.ClassStatus) bool {
		return len(st.Conditions) == 1 && st.Conditions[0].Status == status && st.Conditions[0].Reason == reason
	})
}

// logBuffer collects a controller's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count returns how many lines hold every one of parts.
func (l *logBuffer) count(parts ...string) int {
	n := 0
	for line := range strings.SplitSeq(l.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all && line != "" {
			n++
		}
	}
	return n
}

func newController(t *testing.T, e *env, cfg classcontroller.Config) (*classcontroller.Controller, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg.Client = e.dyn
	cfg.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Resync == 0 {
		cfg.Resync = time.Hour // no resync within a test: what happens is driven by events and the clock
	}
	c, err := classcontroller.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", logs.String())
		}
	})
	return c, logs
}

// run runs c until the test ends.
func run(t *testing.T, c *classcontroller.Controller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func TestAClassIsFencedOnlyWithACurrentPauseTestResult(t *testing.T) {
	e := startEnv(t)
	clk := clocktesting.NewFakeClock(t0)
	c, _ := newController(t, e, classcontroller.Config{Clock: clk})
	run(t, c)
	day := 24 * time.Hour

	t.Run("a current result: fenced until it expires", func(t *testing.T) {
		e.namespace(t, "current")
		e.createResult(t, "current", "ledger-2026", "ledger", t0.Add(-day), t0.Add(300*day), nil)
		obj := e.createClass(t, "current", "ledger", nil)
		st := e.fencedWith(t, "current", "ledger", "True", class.ReasonPauseTestCurrent)
		require.True(t, st.Fenced)
		require.Equal(t, t0.Add(300*day).Format(time.RFC3339), st.FencedUntil)
		require.Equal(t, "current/ledger-2026", st.PauseTestResult)
		require.Equal(t, obj.GetGeneration(), st.ObservedGeneration)
		require.Equal(t, obj.GetGeneration(), st.Conditions[0].ObservedGeneration)
		require.Equal(t, t0.Format(time.RFC3339), st.Conditions[0].LastTransitionTime)
		require.Contains(t, st.Conditions[0].Message, "PauseTestResult ledger-2026")
		require.True(t, st.Proof(obj.GetGeneration()).HoldsAt(t0), "lockd reads it as proven")
	})

	t.Run("no result: not fenced", func(t *testing.T) {
		e.namespace(t, "none")
		e.createClass(t, "none", "ledger", nil)
		st := e.fencedWith(t, "none", "ledger", "False", class.ReasonNoPauseTest)
		require.False(t, st.Fenced)
		require.Empty(t, st.FencedUntil)
		require.Empty(t, st.PauseTestResult)
		require.Contains(t, st.Conditions[0].Message, "lockctl fence-test --class ledger")
	})

	t.Run("an expired result: not fenced", func(t *testing.T) {
		e.namespace(t, "expired")
		e.createResult(t, "expired", "ledger-2025", "ledger", t0.Add(-400*day), t0.Add(-35*day), nil)
		e.createClass(t, "expired", "ledger", nil)
		st := e.fencedWith(t, "expired", "ledger", "False", class.ReasonPauseTestExpired)
		require.Contains(t, st.Conditions[0].Message, "expired on")
	})

	t.Run("a result for another schema version: not fenced until the class says that version", func(t *testing.T) {
		e.namespace(t, "schema")
		e.createResult(t, "schema", "ledger-v2", "ledger", t0.Add(-day), t0.Add(day), func(s map[string]any) { s["resourceSchemaVersion"] = "2" })
		obj := e.createClass(t, "schema", "ledger", nil)
		st := e.fencedWith(t, "schema", "ledger", "False", class.ReasonSchemaVersionChanged)
		require.Contains(t, st.Conditions[0].Message, `tested schema version "2" of ledger-db, the class says "3"`)
		require.Equal(t, obj.GetGeneration(), st.ObservedGeneration)

		// The class goes back to version 2: a new generation, proven.
		classes := e.dyn.Resource(classcontroller.LockClasses).Namespace("schema")
		cur, err := classes.Get(t.Context(), "ledger", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(cur.Object, "2", "spec", "resourceSchemaVersion"))
		_, err = classes.Update(t.Context(), cur, metav1.UpdateOptions{})
		require.NoError(t, err)
		st = e.fencedWith(t, "schema", "ledger", "True", class.ReasonPauseTestCurrent)
		require.Equal(t, obj.GetGeneration()+1, st.ObservedGeneration)
	})

	t.Run("the result deleted: not fenced again", func(t *testing.T) {
		e.namespace(t, "deleted")
		e.createResult(t, "deleted", "ledger-2026", "ledger", t0.Add(-day), t0.Add(300*day), nil)
		e.createClass(t, "deleted", "ledger", nil)
		e.fencedWith(t, "deleted", "ledger", "True", class.ReasonPauseTestCurrent)
		require.NoError(t, e.dyn.Resource(classcontroller.PauseTestResults).Namespace("deleted").Delete(t.Context(), "ledger-2026", metav1.DeleteOptions{}))
		st := e.fencedWith(t, "deleted", "ledger", "False", class.ReasonNoPauseTest)
		require.Empty(t, st.PauseTestResult)
	})

	t.Run("a result moved to another class: both classes change", func(t *testing.T) {
		e.namespace(t, "moved")
		e.createResult(t, "moved", "r", "ledger", t0.Add(-day), t0.Add(day), nil)
		e.createClass(t, "moved", "ledger", nil)
		e.createClass(t, "moved", "refunds", nil)
		e.fencedWith(t, "moved", "ledger", "True", class.ReasonPauseTestCurrent)
		e.fencedWith(t, "moved", "refunds", "False", class.ReasonNoPauseTest)
		results := e.dyn.Resource(classcontroller.PauseTestResults).Namespace("moved")
		r, err := results.Get(t.Context(), "r", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(r.Object, "refunds", "spec", "class"))
		_, err = results.Update(t.Context(), r, metav1.UpdateOptions{})
		require.NoError(t, err)
		e.fencedWith(t, "moved", "refunds", "True", class.ReasonPauseTestCurrent)
		e.fencedWith(t, "moved", "ledger", "False", class.ReasonNoPauseTest)
	})

	t.Run("an advisory class: not fenced, whatever the results", func(t *testing.T) {
		e.namespace(t, "advisory")
		e.createResult(t, "advisory", "r", "ledger", t0.Add(-day), t0.Add(day), nil)
		e.createClass(t, "advisory", "ledger", func(s map[string]any) {
			s["enforcement"], s["riskOwner"], s["waiverExpires"], s["ttl"] = "advisory", "payments-oncall", "2027-06-01", "30s"
		})
		e.fencedWith(t, "advisory", "ledger", "False", class.ReasonNotDeclaredFenced)
	})

	t.Run("an invalid class: not fenced, and why", func(t *testing.T) {
		// A key outside the object's namespace: CEL cannot see the
		// namespace, the webhook (not installed here) would refuse it.
		e.namespace(t, "invalid")
		e.createResult(t, "invalid", "r", "ledger", t0.Add(-day), t0.Add(day), nil)
		e.createClass(t, "invalid", "ledger", func(s map[string]any) { s["keys"] = []any{"payments/ledger/"} })
		st := e.fencedWith(t, "invalid", "ledger", "False", class.ReasonInvalid)
		require.Contains(t, st.Conditions[0].Message, "spec.keys")
	})
}

func TestTheStatusIsWrittenOnlyWhenItChanges(t *testing.T) {
	e := startEnv(t)
	clk := clocktesting.NewFakeClock(t0)
	c, logs := newController(t, e, classcontroller.Config{Clock: clk, Resync: time.Second})
	e.namespace(t, "payments")
	e.createClass(t, "payments", "ledger", nil)
	run(t, c)
	e.fencedWith(t, "payments", "ledger", "False", class.ReasonNoPauseTest)
	obj, err := e.dyn.Resource(classcontroller.LockClasses).Namespace("payments").Get(t.Context(), "ledger", metav1.GetOptions{})
	require.NoError(t, err)
	rv := obj.GetResourceVersion()

	// Resyncs every second reconcile the class again and again; the
	// status is the same, so nothing is written.
	deadline := time.Now().Add(waitTimeout)
	for logs.count(`msg="status unchanged"`, "class=payments/ledger") < 3 {
		require.True(t, time.Now().Before(deadline), "no resyncs:\n%s", logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	obj, err = e.dyn.Resource(classcontroller.LockClasses).Namespace("payments").Get(t.Context(), "ledger", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, rv, obj.GetResourceVersion(), "an unchanged status is not written")
	require.Equal(t, 1, logs.count(`msg="status written"`, "class=payments/ledger"))

	// Another reason, the same status (False): the transition time stays.
	clk.Step(time.Hour)
	e.createResult(t, "payments", "v2", "ledger", t0.Add(-time.Hour), t0.Add(24*time.Hour), func(s map[string]any) { s["resourceSchemaVersion"] = "2" })
	st := e.fencedWith(t, "payments", "ledger", "False", class.ReasonSchemaVersionChanged)
	require.Equal(t, t0.Format(time.RFC3339), st.Conditions[0].LastTransitionTime)
}

func TestAnExpiringResultUnfencesTheClassWithNoEvent(t *testing.T) {
	e := startEnv(t)
	clk := clocktesting.NewFakeClock(t0)
	c, logs := newController(t, e, classcontroller.Config{Clock: clk})
	e.namespace(t, "payments")
	expires := t0.Add(30 * time.Second)
	e.createResult(t, "payments", "ledger-2026", "ledger", t0.Add(-time.Hour), expires, nil)
	e.createClass(t, "payments", "ledger", nil)
	run(t, c)
	st := e.fencedWith(t, "payments", "ledger", "True", class.ReasonPauseTestCurrent)
	require.Equal(t, expires.Format(time.RFC3339), st.FencedUntil)

	// The controller sees its own write come back and has nothing to do:
	// from here on no object changes, so only its clock can unfence the
	// class.
	deadline := time.Now().Add(waitTimeout)
	for logs.count(`msg="status unchanged"`, "class=payments/ledger") == 0 {
		require.True(t, time.Now().Before(deadline), "the controller did not see its write:\n%s", logs.String())
		time.Sleep(20 * time.Millisecond)
	}
	writes := logs.count(`msg="status written"`, "class=payments/ledger")

	// Advance the fake clock in steps until the class flips: a requeue
	// waits on the clock from when it was queued.
	classes := e.dyn.Resource(classcontroller.LockClasses).Namespace("payments")
	for i := 0; ; i++ {
		require.Less(t, i, 100, "still fenced at %s:\n%s", clk.Now(), logs.String())
		clk.Step(5 * time.Second)
		time.Sleep(30 * time.Millisecond)
		obj, err := classes.Get(t.Context(), "ledger", metav1.GetOptions{})
		require.NoError(t, err)
		if st, _ := class.ClassStatusOf(obj.Object); !st.Fenced {
			break
		}
	}
	st = e.fencedWith(t, "payments", "ledger", "False", class.ReasonPauseTestExpired)
	ltt, err := time.Parse(time.RFC3339, st.Conditions[0].LastTransitionTime)
	require.NoError(t, err)
	require.False(t, ltt.Before(expires.Add(time.Second)), "flipped at %s, before the result's end %s and a second", ltt, expires)
	require.Equal(t, writes+1, logs.count(`msg="status written"`, "class=payments/ledger"))
}

func TestOneOfTwoControllersWritesTheStatus(t *testing.T) {
	e := startEnv(t)
	e.namespace(t, "lockd-system")
	e.namespace(t, "payments")
	election := func(id string) classcontroller.Election {
		return classcontroller.Election{Client: e.kc, Namespace: "lockd-system", Name: "class-lint-controller", Identity: id,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond}
	}
	type replica struct {
		id     string
		logs   *logBuffer
		cancel context.CancelFunc
		done   chan struct{} // closed when RunElected has returned err
		err    error
	}
	start := func(id string) *replica {
		c, logs := newController(t, e, classcontroller.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{id: id, logs: logs, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			r.err = c.RunElected(ctx, election(id))
		}()
		t.Cleanup(func() {
			cancel()
			<-r.done
		})
		return r
	}
	a := start("replica-a")
	b := start("replica-b")

	leases := e.kc.CoordinationV1().Leases("lockd-system")
	holder := func() string {
		l, err := leases.Get(t.Context(), "class-lint-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	deadline := time.Now().Add(waitTimeout)
	for holder() == "" {
		require.True(t, time.Now().Before(deadline), "nobody took the Lease")
		time.Sleep(50 * time.Millisecond)
	}
	leader, follower := a, b
	if holder() == b.id {
		leader, follower = b, a
	}
	require.Equal(t, leader.id, holder())

	// The class's status is written once, by the leader.
	obj := e.createClass(t, "payments", "ledger", nil)
	w, err := e.dyn.Resource(classcontroller.LockClasses).Namespace("payments").Watch(t.Context(),
		metav1.ListOptions{ResourceVersion: obj.GetResourceVersion(), FieldSelector: "metadata.name=ledger"})
	require.NoError(t, err)
	defer w.Stop()
	e.fencedWith(t, "payments", "ledger", "False", class.ReasonNoPauseTest)
	modified := 0
	settle := time.After(2 * time.Second) // both replicas had time to write, had they wanted to
	for waiting := true; waiting; {
		select {
		case ev := <-w.ResultChan():
			require.Equal(t, watch.Modified, ev.Type, "%+v", ev)
			modified++
		case <-settle:
			waiting = false
		}
	}
	require.Equal(t, 1, modified, "one status write")
	require.Equal(t, 1, leader.logs.count(`msg="status written"`, "class=payments/ledger"))
	require.Zero(t, follower.logs.count(`msg="status written"`), follower.logs.String())
	require.Zero(t, follower.logs.count(`msg="reconciling lockclasses"`), "the follower does not reconcile")
	require.Equal(t, leader.id, holder())

	// The leader stops (its pod is deleted): it releases the Lease, the
	// follower takes over and writes the next change.
	leader.cancel()
	<-leader.done
	require.NoError(t, leader.err, "a stopped leader returns nil")
	deadline = time.Now().Add(waitTimeout)
	for holder() != follower.id {
		require.True(t, time.Now().Before(deadline), "the follower did not take the Lease (holder %q)", holder())
		time.Sleep(50 * time.Millisecond)
	}
	e.createResult(t, "payments", "ledger-2026", "ledger", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), nil)
	e.fencedWith(t, "payments", "ledger", "True", class.ReasonPauseTestCurrent)
	require.Equal(t, 1, follower.logs.count(`msg="status written"`, "class=payments/ledger"))
}

func TestRunElectedReturnsErrLeaseLostWhenTheLeaseIsTaken(t *testing.T) {
	e := startEnv(t)
	e.namespace(t, "lockd-system")
	c, logs := newController(t, e, classcontroller.Config{})
	done := make(chan error, 1)
	go func() {
		done <- c.RunElected(context.Background(), classcontroller.Election{Client: e.kc, Namespace: "lockd-system", Name: "ctl", Identity: "me",
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond})
	}()
	leases := e.kc.CoordinationV1().Leases("lockd-system")
	deadline := time.Now().Add(waitTimeout)
	for logs.count(`msg="reconciling lockclasses"`) == 0 {
		require.True(t, time.Now().Before(deadline), "never led:\n%s", logs.String())
		time.Sleep(20 * time.Millisecond)
	}
	// Another party takes the Lease over (an operator, or a replica whose
	// clock ran ahead): this replica cannot renew and stops.
	for {
		l, err := leases.Get(t.Context(), "ctl", metav1.GetOptions{})
		require.NoError(t, err)
		other := "someone-else"
		l.Spec.HolderIdentity = &other
		if _, err := leases.Update(t.Context(), l, metav1.UpdateOptions{}); err == nil {
			break
		}
	}
	select {
	case err := <-done:
		require.ErrorIs(t, err, classcontroller.ErrLeaseLost)
	case <-time.After(waitTimeout):
		t.Fatalf("RunElected did not return:\n%s", logs.String())
	}
	require.Contains(t, logs.String(), "stopped reconciling lockclasses")
}
