package contract_test

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/server"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/internal/tcpproxy"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// suiteClasses are lockdtest's classes plus namespace nc, whose only class
// owns nc/owned/ while Alice may lock all of nc/: nc/free/… is a key no
// class owns (NO_CLASS).
func suiteClasses() map[string]string {
	c := maps.Clone(lockdtest.Classes)
	c["nc/classes.yaml"] = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: owned, namespace: nc}
spec:
  keys: ["nc/owned/"]
  purpose: efficiency
  enforcement: advisory
  ttl: 30s
  tier: entity
  riskOwner: contract-suite
  waiverExpires: "2099-01-01"
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: alice, namespace: nc}
spec:
  spiffeID: ` + lockdtest.Alice + `
  prefixes: ["nc/"]
`
	return c
}

// Class fast's TTL (keys t/fast/…), the one the timing cases use.
const (
	fastTTL      = 5 * time.Second
	fastInterval = fastTTL / 3 // keepalive interval: TTL/3
	answerWithin = time.Second // min(TTL/3, 1s): a keepalive not answered by then failed
	fenceMargin  = time.Second // the local deadline is the send time + TTL − 1s
	// timerTolerance is how late a timer may run on a loaded machine and
	// still count as on time (the control is 2 s late).
	timerTolerance = 500 * time.Millisecond
)

// lockd is the lockd a driver's cases share (each case uses its own keys).
type lockd struct {
	env *lockdtest.Env
}

func (l *lockd) raw(t *testing.T, id string) (lockv1.LockServiceClient, lockv1.AdminServiceClient) {
	t.Helper()
	return l.env.Raw(t, id)
}

func (l *lockd) inspect(t *testing.T, key string) *lockv1.InspectResponse {
	t.Helper()
	lc, _ := l.raw(t, lockdtest.Operator)
	r, err := lc.Inspect(t.Context(), &lockv1.InspectRequest{Key: key})
	if err != nil {
		t.Fatalf("inspect %s: %v", key, err)
	}
	return r
}

// proxy starts a TCP proxy to lockd, closed at cleanup.
func (l *lockd) proxy(t *testing.T) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(l.env.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// holdGone returns when the store deletes key's hold (its session's lease
// expired, or it was released), as etcd's watch reports it to the suite
// directly, not through any proxy.
func holdGone(t *testing.T, cli *clientv3.Client, key string) <-chan time.Time {
	t.Helper()
	gone := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wch := cli.Watch(ctx, "/l/"+key, clientv3.WithFilterPut())
	go func() {
		for resp := range wch {
			if len(resp.Events) > 0 {
				gone <- time.Now()
				return
			}
		}
	}()
	return gone
}

// contractCase is one promise of the contract.
type contractCase struct {
	name string
	run  func(t *testing.T, l *lockd, d *driver)
	// own: the case starts its own lockd (l is nil).
	own bool
}

// cases are the contract, each named for what it promises; docs/client.md
// lists them.
var cases = []contractCase{
	{name: "GrantCarriesATokenThatIncreases", run: grantCarriesATokenThatIncreases},
	{name: "ReentrantAcquireIsCountedAndReleasedAtZero", run: reentrantAcquireIsCountedAndReleasedAtZero},
	{name: "CanStartIsFalseFromTheFirstFailedKeepalive", run: canStartIsFalseFromTheFirstFailedKeepalive},
	{name: "OnFenceRunsByTheSendTimeDeadlineBeforeTheStoreExpires", run: onFenceRunsByTheSendTimeDeadlineBeforeTheStoreExpires},
	{name: "ForceReleaseTellsWhoRequestedWhoApprovedAndWhy", run: forceReleaseTellsWhoRequestedWhoApprovedAndWhy},
	{name: "TheSameIdentityUnderAnotherSessionIsALeak", run: theSameIdentityUnderAnotherSessionIsALeak},
	{name: "AWaitInLineEndsAtItsDeadline", run: aWaitInLineEndsAtItsDeadline},
	{name: "EveryRefusalDrivenForRealIsTheLibrarysOwnError", run: everyRefusalDrivenForRealIsTheLibrarysOwnError},
	{name: "EveryReasonInTheTableIsTheLibrarysOwnError", run: everyReasonInTheTableIsTheLibrarysOwnError},
	{name: "UnprotectedGrantsAreMarked", run: unprotectedGrantsAreMarked, own: true},
	{name: "TheClassIsTakenFromTheKey", run: theClassIsTakenFromTheKey},
}

// drivers are the drivers TestContract runs: LOCKD_CONTRACT_DRIVERS, or go
// and python.
func drivers(t *testing.T) []driverKind {
	names := os.Getenv("LOCKD_CONTRACT_DRIVERS")
	if names == "" {
		names = "go,python"
	}
	var ks []driverKind
	for _, n := range strings.Split(names, ",") {
		k, ok := driverKinds[strings.TrimSpace(n)]
		if !ok {
			t.Fatalf("LOCKD_CONTRACT_DRIVERS: no driver %q (known: go, python, go-late-fence)", n)
		}
		ks = append(ks, k)
	}
	return ks
}

// TestContract runs every case against every driver, on a real lockd: one
// per driver, shared by its cases (each on its own keys and its own driver
// process), and one more for a case that needs its own.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, k := range drivers(t) {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			shared := &lockd{env: lockdtest.Start(t, lockdtest.Options{Classes: suiteClasses()})}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					l := shared
					if c.own {
						l = nil
					}
					c.run(t, l, startDriver(t, k))
				})
			}
		})
	}
}

// TestLateFenceControlFailsTheDeadlineCase runs the deadline case against
// the control driver, a library that reports a loss 2 s after the Go
// client did (as a fence at the last answer + TTL + grace would): the case
// must fail it, by finding the fence after the send-time deadline or
// after the store expired the session.
func TestLateFenceControlFailsTheDeadlineCase(t *testing.T) {
	t.Parallel()
	goDriver(t) // built here, reported here if it does not build
	cmd := exec.Command(os.Args[0], "-test.run", "^TestContract$/^go-late-fence$/^OnFenceRunsByTheSendTimeDeadlineBeforeTheStoreExpires$",
		"-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOCKD_CONTRACT_DRIVERS=go-late-fence")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the deadline case passed against a driver that fences 2 s late:\n%s", out)
	}
	caught := false
	for _, why := range []string{"later than the send-time deadline", "after the store expired"} {
		if strings.Contains(string(out), why) {
			caught = true
			t.Logf("control caught: %s", why)
		}
	}
	if !caught {
		t.Fatalf("the deadline case failed against the late driver, but not by finding the fence late:\n%s", out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "margin") || strings.Contains(l, "on_fence ran") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

func grantCarriesATokenThatIncreases(t *testing.T, l *lockd, d *driver) {
	d.open("alice", lockdtest.Alice, l.env.Addr)
	key := "t/contract/grant"
	first := d.must("acquire", map[string]any{"client": "alice", "lock": "a", "key": key})
	tok1 := token(t, first)
	if tok1 == 0 {
		t.Fatal("a protected grant carried token 0")
	}
	if got := token(t, d.must("token", map[string]any{"lock": "a"})); got != tok1 {
		t.Fatal("the lock's token is not the one its acquire returned")
	}
	if op := l.inspect(t, key); !op.GetHeld() || op.GetHold().GetToken().GetValue() != tok1 {
		t.Fatal("the token the library hands out is not the one lockd granted")
	}
	if r := d.must("release", map[string]any{"lock": "a"}); !boolean(t, r, "held") {
		t.Fatal("release of a live hold reported it was no longer held")
	}
	second := d.must("acquire", map[string]any{"client": "alice", "lock": "b", "key": key})
	if tok2 := token(t, second); tok2 <= tok1 {
		t.Fatal("the second grant's token is not greater than the first's")
	}
	d.must("release", map[string]any{"lock": "b"})
}

func token(t *testing.T, r map[string]any) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(str(t, r, "token"), 10, 64)
	if err != nil {
		t.Fatal("the token is not a decimal uint64")
	}
	return v
}

func reentrantAcquireIsCountedAndReleasedAtZero(t *testing.T, l *lockd, d *driver) {
	p := l.proxy(t)
	d.open("alice", lockdtest.Alice, p.Addr())
	key := "t/reentrant/k"
	outer := d.must("acquire", map[string]any{"client": "alice", "lock": "outer", "key": key})
	// Every byte towards lockd is held: an acquire that calls lockd cannot
	// return.
	p.Stall(tcpproxy.ToTarget)
	began := time.Now()
	ch := d.send("acquire", map[string]any{"client": "alice", "lock": "inner", "key": key})
	var inner reply
	select {
	case inner = <-ch:
	case <-time.After(3 * time.Second):
		p.Resume()
		t.Fatal("the re-entrant acquire did not return while nothing could reach lockd: it called lockd")
	}
	p.Resume()
	if !inner.OK {
		t.Fatalf("re-entrant acquire: %s", inner.Error)
	}
	t.Logf("re-entrant acquire returned in %s with nothing reaching lockd", time.Since(began).Round(time.Millisecond))
	if token(t, inner.Result) != token(t, outer) {
		t.Fatal("the re-entrant acquire has another token than the hold it re-entered")
	}
	lc, _ := l.raw(t, lockdtest.Operator)
	holds, err := lc.ListHolds(t.Context(), &lockv1.ListHoldsRequest{Prefix: "t/reentrant/"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(holds.GetHolds()); n != 1 {
		t.Fatalf("lockd has %d holds of the key after two acquires; want 1", n)
	}
	if r := d.must("release", map[string]any{"lock": "inner"}); !boolean(t, r, "held") {
		t.Fatal("the inner release reported the hold gone")
	}
	if !l.inspect(t, key).GetHeld() {
		t.Fatal("the key was released at lockd while the outer acquirer still holds it")
	}
	if !boolean(t, d.must("can_start", map[string]any{"lock": "outer"}), "value") {
		t.Fatal("the outer lock cannot start after the inner release")
	}
	d.must("release", map[string]any{"lock": "outer"})
	if l.inspect(t, key).GetHeld() {
		t.Fatal("the key is still held at lockd after the last release")
	}
	d.noFence("released normally")
}

func canStartIsFalseFromTheFirstFailedKeepalive(t *testing.T, l *lockd, d *driver) {
	p := l.proxy(t)
	d.open("alice", lockdtest.Alice, p.Addr())
	d.must("acquire", map[string]any{"client": "alice", "lock": "a", "key": "t/fast/drain"})
	if !boolean(t, d.must("can_start", map[string]any{"lock": "a"}), "value") {
		t.Fatal("a fresh grant cannot start")
	}
	stalled := time.Now()
	p.Stall(tcpproxy.Both)
	// The next keepalive is sent within an interval and fails when not
	// answered within answerWithin: then, and no later, CanStart is false.
	limit := fastInterval + answerWithin + 500*time.Millisecond
	for boolean(t, d.must("can_start", map[string]any{"lock": "a"}), "value") {
		if time.Since(stalled) > limit {
			p.Resume()
			t.Fatalf("can_start still true %s after the connection stalled (keepalive every %s, failed after %s)", limit, fastInterval, answerWithin)
		}
		time.Sleep(50 * time.Millisecond)
	}
	drained := time.Since(stalled)
	st := d.must("state", map[string]any{"lock": "a"})
	left := num(t, d.must("remaining_ttl", map[string]any{"lock": "a"}), "seconds")
	p.Resume()
	t.Logf("can_start false %s after the stall, %.2fs before the local deadline", drained.Round(10*time.Millisecond), left)
	if s := str(t, st, "state"); s != "jeopardy" {
		t.Fatalf("state %q when can_start turned false; want jeopardy (drain, not fence)", s)
	}
	if left <= 0 {
		t.Fatal("can_start turned false only at the deadline, not at the first failed keepalive")
	}
	d.noFence("drain")
	// The connection is back: the next answered keepalive makes it safe again.
	back := time.Now()
	for !boolean(t, d.must("can_start", map[string]any{"lock": "a"}), "value") {
		if time.Since(back) > 2*fastInterval+answerWithin {
			t.Fatal("can_start did not come back after keepalives were answered again")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.noFence("after the connection came back")
	d.must("release", map[string]any{"lock": "a"})
}

func onFenceRunsByTheSendTimeDeadlineBeforeTheStoreExpires(t *testing.T, l *lockd, d *driver) {
	p := l.proxy(t)
	d.open("alice", lockdtest.Alice, p.Addr())
	key := "t/fast/deadline"
	d.must("acquire", map[string]any{"client": "alice", "lock": "a", "key": key})
	gone := holdGone(t, l.env.Backend.Client, key)
	toSuite, uncertainty := d.clock()
	// Wait out a keepalive so the stall is not right after the grant.
	time.Sleep(fastInterval + 200*time.Millisecond)
	stalled := time.Now()
	p.Stall(tcpproxy.Both)
	// Every keepalive answered was sent before the stall: the send-time
	// deadline is at most stall + TTL − 1s.
	byDeadline := stalled.Add(fastTTL - fenceMargin)
	e, ok := d.fenced(fastTTL + 5*time.Second)
	if !ok {
		t.Fatalf("on_fence did not run within %s of the stall (TTL %s)", fastTTL+5*time.Second, fastTTL)
	}
	fence := toSuite(e.Mono)
	var expiry time.Time
	select {
	case expiry = <-gone:
	case <-time.After(fastTTL + 10*time.Second):
		t.Fatal("the store never expired the stalled session's hold")
	}
	t.Logf("%s driver, after the stall: on_fence at +%s (its own deadline +%s), the store expired the session at +%s; margin %s (clock mapping ±%s)",
		d.name, fence.Sub(stalled).Round(time.Millisecond), toSuite(e.Deadline).Sub(stalled).Round(time.Millisecond),
		expiry.Sub(stalled).Round(time.Millisecond), expiry.Sub(fence).Round(time.Millisecond), uncertainty.Round(time.Microsecond))
	if e.Lost == nil || e.Lost.Kind != "deadline" {
		t.Errorf("lost with %+v; want the local deadline", e.Lost)
	}
	if e.CanStart {
		t.Error("can_start was true in on_fence")
	}
	if late := fence.Sub(byDeadline); late > timerTolerance+uncertainty {
		t.Errorf("on_fence ran %s later than the send-time deadline (the stall + TTL − 1s)", late.Round(time.Millisecond))
	}
	if !fence.Add(uncertainty).Before(expiry) {
		t.Errorf("on_fence ran %s after the store expired the session", fence.Sub(expiry).Round(time.Millisecond))
	}
	st := d.must("state", map[string]any{"lock": "a"})
	if s := str(t, st, "state"); s != "ended" {
		t.Errorf("state %q after on_fence; want ended", s)
	}
}

func forceReleaseTellsWhoRequestedWhoApprovedAndWhy(t *testing.T, l *lockd, d *driver) {
	d.open("alice", lockdtest.Alice, l.env.Addr)
	key := "t/fast/forced"
	first := d.must("acquire", map[string]any{"client": "alice", "lock": "a", "key": key})
	_, op1 := l.raw(t, lockdtest.Operator)
	_, op2 := l.raw(t, lockdtest.Operator2)
	const why = "contract: the holder is wedged"
	req, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: key, Reason: why})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()}); err != nil {
		t.Fatal(err)
	}
	approved := time.Now()
	e, ok := d.fenced(fastInterval + 2*time.Second)
	if !ok {
		t.Fatalf("the holder was not told within a keepalive interval (%s) of the force-release", fastInterval)
	}
	t.Logf("told %s after the approval", e.at.Sub(approved).Round(time.Millisecond))
	if e.Lost == nil || e.Lost.Kind != "forced" {
		t.Fatalf("lost with %+v; want forced", e.Lost)
	}
	if e.Lost.Requester != lockdtest.Operator || e.Lost.Approver != lockdtest.Operator2 || e.Lost.Why != why {
		t.Fatalf("told requester %q, approver %q, reason %q; want %q, %q, %q",
			e.Lost.Requester, e.Lost.Approver, e.Lost.Why, lockdtest.Operator, lockdtest.Operator2, why)
	}
	if boolean(t, d.must("can_start", map[string]any{"lock": "a"}), "value") {
		t.Fatal("can_start after the force-release")
	}
	again := d.must("acquire", map[string]any{"client": "alice", "lock": "b", "key": key})
	if token(t, again) <= token(t, first) {
		t.Fatal("the acquire after the force-release returned the old hold, not a new grant")
	}
	d.must("release", map[string]any{"lock": "b"})
}

// normalized is a type or reason name with a prefix "Err" and a suffix
// "Error" removed, underscores and case ignored.
func normalized(s string) string {
	s = strings.TrimPrefix(s, "Err")
	s = strings.TrimSuffix(s, "Error")
	return strings.ToLower(strings.ReplaceAll(s, "_", ""))
}

// isReason fails the test unless e is the library's own error for reason.
func isReason(t *testing.T, e *libError, reason string) {
	t.Helper()
	if e == nil {
		t.Fatalf("no error; want %s", reason)
	}
	if normalized(e.Type) != normalized(reason) {
		t.Errorf("reason %s: the library's error is %s; want the type named after the reason", reason, e)
	}
	if e.Reason != reason {
		t.Errorf("reason %s: the library reports reason %q", reason, e.Reason)
	}
	if want := reason != "UNAVAILABLE"; e.Definite != want {
		t.Errorf("reason %s: definite %v; want %v", reason, e.Definite, want)
	}
}

func theSameIdentityUnderAnotherSessionIsALeak(t *testing.T, l *lockd, d *driver) {
	d.open("first", lockdtest.Alice, l.env.Addr)
	d.open("second", lockdtest.Alice, l.env.Addr) // another process with the same SPIFFE ID
	d.open("bob", lockdtest.Bob, l.env.Addr)
	key := "t/leak/k"
	d.must("acquire", map[string]any{"client": "first", "lock": "a", "key": key})
	began := time.Now()
	e := d.refused("acquire", map[string]any{"client": "second", "lock": "b", "key": key, "wait": 3.0})
	isReason(t, e, "LEAK")
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the leak was refused after %s: it queued behind itself", took.Round(time.Millisecond))
	}
	// Another identity is contention, not a leak.
	isReason(t, d.refused("acquire", map[string]any{"client": "bob", "lock": "c", "key": key}), "HELD")
	d.must("release", map[string]any{"lock": "a"})
}

func aWaitInLineEndsAtItsDeadline(t *testing.T, l *lockd, d *driver) {
	d.open("alice", lockdtest.Alice, l.env.Addr)
	d.open("bob", lockdtest.Bob, l.env.Addr)
	key := "t/line/k"
	held := d.must("acquire", map[string]any{"client": "bob", "lock": "b", "key": key})
	began := time.Now()
	e := d.refused("acquire", map[string]any{"client": "alice", "lock": "a", "key": key, "wait": 1.0})
	waited := time.Since(began)
	t.Logf("a wait of 1s ended after %s", waited.Round(time.Millisecond))
	isReason(t, e, "WAIT_TIMEOUT")
	if !slices.ContainsFunc(e.Kinds, func(k string) bool { return normalized(k) == "held" }) {
		t.Errorf("a wait timeout is not also the library's held error: kinds %v", e.Kinds)
	}
	if waited < 900*time.Millisecond || waited > 3*time.Second {
		t.Errorf("a wait of 1s ended after %s", waited)
	}
	// A waiter in line is granted when the holder releases.
	ch := d.send("acquire", map[string]any{"client": "alice", "lock": "a2", "key": key, "wait": 10.0})
	time.Sleep(500 * time.Millisecond)
	d.must("release", map[string]any{"lock": "b"})
	released := time.Now()
	r := d.await(ch, "acquire")
	if !r.OK {
		t.Fatalf("the waiter was not granted after the release: %s", r.Error)
	}
	t.Logf("the waiter was granted %s after the release", time.Since(released).Round(time.Millisecond))
	if token(t, r.Result) <= token(t, held) {
		t.Fatal("the waiter's token is not greater than the released hold's")
	}
	d.must("release", map[string]any{"lock": "a2"})
}

func everyRefusalDrivenForRealIsTheLibrarysOwnError(t *testing.T, l *lockd, d *driver) {
	d.open("alice", lockdtest.Alice, l.env.Addr)
	d.open("alice2", lockdtest.Alice, l.env.Addr)
	d.open("bob", lockdtest.Bob, l.env.Addr)
	d.open("carol", lockdtest.Carol, l.env.Addr)
	d.must("acquire", map[string]any{"client": "bob", "lock": "held", "key": "t/refuse/held"})
	d.must("acquire", map[string]any{"client": "alice2", "lock": "mine", "key": "t/refuse/leak"})
	for _, c := range []struct {
		reason string
		step   map[string]any
	}{
		{"HELD", map[string]any{"client": "alice", "key": "t/refuse/held"}},
		{"WAIT_TIMEOUT", map[string]any{"client": "alice", "key": "t/refuse/held", "wait": 0.3}},
		{"LEAK", map[string]any{"client": "alice", "key": "t/refuse/leak"}},
		{"DENIED", map[string]any{"client": "carol", "key": "t/refuse/denied"}},
		{"INVALID", map[string]any{"client": "alice", "key": "t/refuse//empty-segment"}},
		{"CLASS_MISMATCH", map[string]any{"client": "alice", "key": "t/fast/refuse", "class": "std"}},
		{"NO_CLASS", map[string]any{"client": "alice", "key": "nc/free/x"}},
	} {
		c.step["lock"] = "x"
		isReason(t, d.refused("acquire", c.step), c.reason)
	}
}

// tableReasons are the reasons lockd's one error table can send, checked
// against lock.v1's ErrorReason: the two must name the same reasons.
func tableReasons(t *testing.T) []string {
	t.Helper()
	table := server.Reasons()
	var proto []string
	for v, name := range lockv1.ErrorReason_name {
		if v != 0 {
			proto = append(proto, strings.TrimPrefix(name, "ERROR_REASON_"))
		}
	}
	slices.Sort(table)
	slices.Sort(proto)
	if !slices.Equal(table, proto) {
		t.Fatalf("lockd's error table sends %v; lock.v1's ErrorReason names %v", table, proto)
	}
	return table
}

func everyReasonInTheTableIsTheLibrarysOwnError(t *testing.T, _ *lockd, d *driver) {
	reasons := tableReasons(t)
	for _, r := range reasons {
		code := "FAILED_PRECONDITION"
		if r == "UNAVAILABLE" {
			code = "UNAVAILABLE"
		}
		res := d.must("decode", map[string]any{"reason": r, "code": code, "message": "decoded by the contract suite"})
		isReason(t, decoded(t, res), r)
	}
	t.Logf("%d reasons, each the library's own error", len(reasons))
	held := decoded(t, d.must("decode", map[string]any{"reason": "WAIT_TIMEOUT", "code": "ABORTED"}))
	if !slices.ContainsFunc(held.Kinds, func(k string) bool { return normalized(k) == "held" }) {
		t.Errorf("WAIT_TIMEOUT is not also the library's held error: kinds %v", held.Kinds)
	}
	// Without a reason (a timeout, a broken connection) the outcome is unknown.
	for _, code := range []string{"DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED"} {
		if e := decoded(t, d.must("decode", map[string]any{"reason": "", "code": code})); e.Definite {
			t.Errorf("%s without a reason is a definite refusal for the library (%s); want an unknown outcome", code, e)
		}
	}
	// A reason this library does not know yet is still lockd's refusal.
	if e := decoded(t, d.must("decode", map[string]any{"reason": "SOMETHING_NEW", "code": "FAILED_PRECONDITION"})); !e.Definite || e.Reason != "SOMETHING_NEW" {
		t.Errorf("an unknown reason: %s; want a definite refusal reporting the reason", e)
	}
}

func decoded(t *testing.T, r map[string]any) *libError {
	t.Helper()
	m, ok := r["error"].(map[string]any)
	if !ok {
		t.Fatalf("decode returned no error: %v", r)
	}
	e := &libError{}
	e.Type, _ = m["type"].(string)
	e.Reason, _ = m["reason"].(string)
	e.Definite, _ = m["definite"].(bool)
	e.Message, _ = m["message"].(string)
	kinds, _ := m["kinds"].([]any)
	for _, k := range kinds {
		s, _ := k.(string)
		e.Kinds = append(e.Kinds, s)
	}
	return e
}

func unprotectedGrantsAreMarked(t *testing.T, _ *lockd, d *driver) {
	cluster := lockdtest.StartCluster(t, t.TempDir())
	b, err := store.ConnectExternal(store.ExternalConfig{Endpoints: cluster.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	env := lockdtest.Start(t, lockdtest.Options{Backend: b, FreshStore: true, Classes: lockdtest.OpenClasses(),
		OpenAfter: 2 * time.Second, RequestTimeout: time.Second})
	d.open("alice", lockdtest.Alice, env.Addr)
	protected := d.must("acquire", map[string]any{"client": "alice", "lock": "p", "key": "t/closed/before"})
	if boolean(t, protected, "unprotected") || token(t, protected) == 0 {
		t.Fatal("a grant with quorum is marked unprotected")
	}
	d.must("release", map[string]any{"lock": "p"})
	cluster.Stop(1)
	cluster.Stop(2)
	lost := time.Now()
	lockdtest.WaitFor(t, 30*time.Second, "the open posture", func() bool { return env.Arbiter.Posture() == "open" })
	t.Logf("open posture %s after the quorum was lost", time.Since(lost).Round(100*time.Millisecond))
	u := d.must("acquire", map[string]any{"client": "alice", "lock": "u", "key": "t/cache/during"})
	if !boolean(t, u, "unprotected") {
		t.Fatal("a grant made without quorum is not marked unprotected")
	}
	if token(t, u) != 0 {
		t.Fatal("an unprotected grant carries a token other than 0")
	}
	if boolean(t, u, "can_start") || boolean(t, d.must("can_start", map[string]any{"lock": "u"}), "value") {
		t.Fatal("can_start is true under an unprotected lock")
	}
	if s := str(t, d.must("state", map[string]any{"lock": "u"}), "state"); s != "safe" {
		t.Fatalf("an unprotected lock whose keepalives are answered is %q; want safe", s)
	}
}

func theClassIsTakenFromTheKey(t *testing.T, l *lockd, d *driver) {
	id := lockdtest.Worker(1) // an identity of this case alone: its sessions are the driver's
	d.open("alice", id, l.env.Addr)
	for _, c := range []struct {
		key, class string
		ttl        time.Duration
	}{
		{"t/fast/class", "t/fast", 5 * time.Second},
		{"t/class", "t/std", 15 * time.Second},
	} {
		r := d.must("acquire", map[string]any{"client": "alice", "lock": c.key, "key": c.key})
		if got := str(t, r, "class"); got != c.class {
			t.Errorf("%s was granted under class %q; want the key's class %s", c.key, got, c.class)
		}
		// The session is the class's TTL: the local deadline is TTL − 1s away.
		left := time.Duration(num(t, r, "remaining_ttl") * float64(time.Second))
		if left > c.ttl-fenceMargin || left < c.ttl-fenceMargin-2*time.Second {
			t.Errorf("%s: remaining_ttl %s right after the grant; want just under %s (class TTL %s − 1s)", c.key, left, c.ttl-fenceMargin, c.ttl)
		}
		if h := l.inspect(t, c.key).GetHold(); h.GetClass() != c.class {
			t.Errorf("lockd holds %s under class %q; want %s", c.key, h.GetClass(), c.class)
		}
	}
	lc, _ := l.raw(t, id)
	ss, err := lc.ListSessions(t.Context(), &lockv1.ListSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ttls []time.Duration
	for _, s := range ss.GetSessions() {
		ttls = append(ttls, s.GetTtl().AsDuration())
	}
	slices.Sort(ttls)
	if !slices.Equal(ttls, []time.Duration{5 * time.Second, 15 * time.Second}) {
		t.Errorf("the client's sessions have TTLs %v; want one per class TTL, 5s and 15s", ttls)
	}
	for _, k := range []string{"t/fast/class", "t/class"} {
		d.must("release", map[string]any{"lock": k})
	}
}
