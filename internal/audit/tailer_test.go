package audit_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/testserver"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// shortClasses are lockdtest's classes with the t/ TTL at its 5s minimum,
// so an expiry takes seconds.
func shortClasses() map[string]string {
	m := map[string]string{}
	for k, v := range lockdtest.Classes {
		m[k] = strings.Replace(v, "ttl: 15s", "ttl: 5s", 1)
	}
	return m
}

// startTailer runs a tailer until the test ends (or stop is called).
func startTailer(t *testing.T, cli *clientv3.Client, sink audit.Sink, mod func(*audit.Config)) (tl *audit.Tailer, stop func()) {
	t.Helper()
	cfg := audit.Config{Client: cli, Sink: sink, Name: t.Name(), BatchWait: 100 * time.Millisecond, ElectionTTL: 2 * time.Second,
		ProbeEvery: 100 * time.Millisecond, Retry: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	if mod != nil {
		mod(&cfg)
	}
	tl, err := audit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tl.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	lockdtest.WaitFor(t, 10*time.Second, "the tailer elected and started", func() bool {
		_, rev := tl.Stored()
		return tl.Leading() && rev > 0
	})
	return tl, stop
}

// caughtUp waits until the tailer has stored everything up to the store's
// current revision.
func caughtUp(t *testing.T, cli *clientv3.Client, tl *audit.Tailer) {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/sys/epoch")
	if err != nil {
		t.Fatal(err)
	}
	head := resp.Header.Revision
	lockdtest.WaitFor(t, 20*time.Second, "the tailer caught up", func() bool {
		_, rev := tl.Stored()
		return rev >= head
	})
}

func rowsFor(t *testing.T, sink audit.Sink, key string) []audit.Event {
	t.Helper()
	rows, err := sink.Query(t.Context(), audit.Filter{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func kinds(rows []audit.Event) []audit.Kind {
	var ks []audit.Kind
	for _, r := range rows {
		ks = append(ks, r.Kind)
	}
	return ks
}

// TestTailerRecordsEveryKindOfEnd drives every kind of end through a real
// lockd and reads it back from the embedded store and from a real
// ClickHouse.
func TestTailerRecordsEveryKindOfEnd(t *testing.T) {
	forEachSink(t, func(t *testing.T, sinkURL string) {
		sink, err := openSinkURL(t.Context(), sinkURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sink.Close() })
		recordsEveryKindOfEnd(t, sink)
	})
}

// forEachSink runs f as a subtest on the embedded SQLite sink and on a
// real ClickHouse, with the URL openSinkURL opens.
func forEachSink(t *testing.T, f func(t *testing.T, sinkURL string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, t.TempDir()+"/history.db") })
	t.Run("clickhouse", func(t *testing.T) { f(t, testserver.StartClickHouse(t)) })
}

func recordsEveryKindOfEnd(t *testing.T, sink audit.Sink) {
	env := lockdtest.Start(t, lockdtest.Options{Classes: shortClasses()})
	cli := env.Backend.Client
	tl, _ := startTailer(t, cli, sink, nil)
	ctx := t.Context()
	alice, bob := env.Client(t, lockdtest.Alice), env.Client(t, lockdtest.Bob)

	// A grant and a release.
	l, err := alice.Acquire(ctx, "t/released", "std", fence)
	if err != nil {
		t.Fatal(err)
	}
	released := l.Token()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A handoff: bob waits, alice releases, one transaction moves the hold.
	first, err := alice.Acquire(ctx, "t/handoff", "std", fence)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Lock, 1)
	go func() {
		l, err := bob.Acquire(ctx, "t/handoff", "std", fence, client.Wait(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	opLock, _ := env.Raw(t, lockdtest.Operator)
	lockdtest.WaitFor(t, 5*time.Second, "bob queued", func() bool {
		r, err := opLock.Inspect(ctx, &lockv1.InspectRequest{Key: "t/handoff"})
		return err == nil && len(r.GetQueue()) == 1
	})
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		t.FailNow()
	}

	// An expiry: a session nobody renews.
	raw, _ := env.Raw(t, lockdtest.Alice)
	sess, err := raw.OpenSession(ctx, &lockv1.OpenSessionRequest{Ttl: durationpbSeconds(5)})
	if err != nil {
		t.Fatal(err)
	}
	exp, err := raw.Acquire(ctx, &lockv1.AcquireRequest{SessionId: sess.GetSessionId(), Key: "t/expired", Class: "std"})
	if err != nil {
		t.Fatal(err)
	}

	// A close: the holder ends its session on purpose.
	carolish := env.Client(t, lockdtest.Bob)
	cl, err := carolish.Acquire(ctx, "t/closed", "std", fence)
	if err != nil {
		t.Fatal(err)
	}
	closedTok := cl.Token()
	if err := carolish.Close(); err != nil {
		t.Fatal(err)
	}

	// A force-release by two operators.
	fl, err := alice.Acquire(ctx, "t/forced", "std", fence)
	if err != nil {
		t.Fatal(err)
	}
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	fr, err := op1.RequestForceRelease(ctx, &lockv1.RequestForceReleaseRequest{Key: "t/forced", Reason: "INC-42: holder wedged"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveForceRelease(ctx, &lockv1.ApproveForceReleaseRequest{Id: fr.GetForceRelease().GetId()}); err != nil {
		t.Fatal(err)
	}

	lockdtest.WaitFor(t, 15*time.Second, "the unrenewed session expired", func() bool {
		r, err := opLock.Inspect(ctx, &lockv1.InspectRequest{Key: "t/expired"})
		return err == nil && !r.GetHeld()
	})
	caughtUp(t, cli, tl)

	check := func(key string, want ...audit.Kind) []audit.Event {
		t.Helper()
		rows := rowsFor(t, sink, key)
		if g := kinds(rows); len(g) != len(want) || strings.Join(strs(g), ",") != strings.Join(strs(want), ",") {
			t.Fatalf("%s: kinds %v, want %v (rows %+v)", key, g, want, rows)
		}
		return rows
	}
	rows := check("t/released", audit.KindGrant, audit.KindRelease)
	if rows[0].Token != released || rows[1].EndedToken != released || rows[0].Holder != lockdtest.Alice || rows[0].Class != "t/std" {
		t.Errorf("grant/release rows %+v; want alice's token %d", rows, released)
	}
	rows = check("t/handoff", audit.KindGrant, audit.KindHandoff)
	if h := rows[1]; h.EndedToken != first.Token() || h.EndedHolder != lockdtest.Alice || h.Token != second.Token() || h.Holder != lockdtest.Bob {
		t.Errorf("handoff row %+v: want alice's %d ended and bob's %d started in one revision", h, first.Token(), second.Token())
	}
	rows = check("t/expired", audit.KindGrant, audit.KindExpiry)
	if rows[1].EndedToken != exp.GetToken().GetValue() || rows[1].EndedSession != sess.GetSessionId() || rows[1].Duration < 4*time.Second {
		t.Errorf("expiry row %+v", rows[1])
	}
	rows = check("t/closed", audit.KindGrant, audit.KindSessionClose)
	if rows[1].EndedToken != closedTok {
		t.Errorf("close row %+v", rows[1])
	}
	rows = check("t/forced", audit.KindGrant, audit.KindForceRelease)
	if f := rows[1]; f.EndedToken != fl.Token() || f.Requester != lockdtest.Operator || f.Approver != lockdtest.Operator2 || f.Reason != "INC-42: holder wedged" {
		t.Errorf("force row %+v: want requester, approver and reason", f)
	}

	// An epoch advance: its own row, and bob's hold of t/handoff ends by it.
	adv := env.AdvanceEpoch(t, second.Epoch(), "audit test")
	caughtUp(t, cli, tl)
	rows = check("t/handoff", audit.KindGrant, audit.KindHandoff, audit.KindEpochAdvance)
	if rows[2].EndedToken != second.Token() {
		t.Errorf("advance's hold row %+v: want bob's %d ended", rows[2], second.Token())
	}
	// The history begins where the epoch did (its creation, 0 -> 1), so
	// the advance is the second epoch row.
	adv2 := check(audit.EpochKey, audit.KindEpochAdvance, audit.KindEpochAdvance)
	if adv2[0].FromEpoch != 0 || adv2[0].ToEpoch != second.Epoch() || adv2[1].FromEpoch != second.Epoch() || adv2[1].ToEpoch != adv.GetEpoch() {
		t.Errorf("epoch rows %+v, want 0 -> %d, then %d -> %d", adv2, second.Epoch(), second.Epoch(), adv.GetEpoch())
	}

	// Per class: six holds started (one by a handoff), one expired, one forced.
	stats, err := sink.Stats(ctx, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Class != "t/std" || stats[0].Grants != 6 || stats[0].Expiries != 1 || stats[0].Forced != 1 || stats[0].Longest < 4*time.Second {
		t.Errorf("stats %+v; want t/std with 6 grants, 1 expiry, 1 forced, the longest hold the expired one (about 5s)", stats)
	}
	if later, err := sink.Stats(ctx, time.Now().Add(time.Hour), time.Time{}); err != nil || len(later) != 0 {
		t.Errorf("stats of a window after every row: %+v, %v", later, err)
	}
}

func fence(*client.Lock) {}

func strs(ks []audit.Kind) []string {
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return s
}

var _ = prometheus.NewRegistry

func durationpbSeconds(n int64) *durationpb.Duration {
	return durationpb.New(time.Duration(n) * time.Second)
}

// testWriter sends the tailer's log to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestFirstTailBeginsAtTheEpochsStart: a tailer that first meets a store
// after its epoch advanced (a restore or a rebuild it reconnected to late)
// still records the advance and the holds it deleted.
func TestFirstTailBeginsAtTheEpochsStart(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice := env.Client(t, lockdtest.Alice)
	l, err := alice.Acquire(t.Context(), "t/before-the-advance", "std", fence)
	if err != nil {
		t.Fatal(err)
	}
	adv := env.AdvanceEpoch(t, l.Epoch(), "restore drill")

	sink, err := openSinkURL(t.Context(), t.TempDir()+"/history.db")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	tl, _ := startTailer(t, env.Backend.Client, sink, nil)
	caughtUp(t, env.Backend.Client, tl)
	own := rowsFor(t, sink, audit.EpochKey)
	if len(own) != 1 || own[0].FromEpoch != l.Epoch() || own[0].ToEpoch != adv.GetEpoch() {
		t.Fatalf("the advance's own row: %+v; want %d -> %d", own, l.Epoch(), adv.GetEpoch())
	}
	rows := rowsFor(t, sink, "t/before-the-advance")
	if len(rows) != 1 || rows[0].Kind != audit.KindEpochAdvance || rows[0].EndedToken != l.Token() {
		t.Fatalf("the deleted hold: %+v; want one epoch-advance row ending token %d", rows, l.Token())
	}
}
