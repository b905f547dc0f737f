package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	"github.com/lockd-dev/lockd/pkg/token"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tokenForms are the patterns a token t would take in text: decimal, hex
// (either case, with or without 0x) and epoch:revision, each not part of a
// longer number.
func tokenForms(t uint64) []*regexp.Regexp {
	e, r := token.Unpack(t)
	dec, hex := fmt.Sprint(t), fmt.Sprintf("%x", t)
	return []*regexp.Regexp{
		regexp.MustCompile(`(^|[^0-9])` + dec + `($|[^0-9])`),
		regexp.MustCompile(`(?i)(^|[^0-9a-z])(0x)?` + hex + `($|[^0-9a-z])`),
		regexp.MustCompile(fmt.Sprintf(`(^|[^0-9])%d:%d($|[^0-9])`, e, r)),
	}
}

// spanText is everything an exported span says: name, attributes, events
// with their attributes, status, links and resource.
func spanText(s tracetest.SpanStub) string {
	var b strings.Builder
	fmt.Fprintf(&b, "span %q kind=%s status=%s %q", s.Name, s.SpanKind, s.Status.Code, s.Status.Description)
	for _, kv := range s.Attributes {
		fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
	}
	for _, ev := range s.Events {
		fmt.Fprintf(&b, " event %q", ev.Name)
		for _, kv := range ev.Attributes {
			fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
		}
	}
	for _, l := range s.Links {
		for _, kv := range l.Attributes {
			fmt.Fprintf(&b, " link %s=%s", kv.Key, kv.Value.String())
		}
	}
	if s.Resource != nil {
		for _, kv := range s.Resource.Attributes() {
			fmt.Fprintf(&b, " resource %s=%s", kv.Key, kv.Value.String())
		}
	}
	return b.String()
}

// TestNoTokenInTelemetry is the token canary: it issues tokens and drives
// every call that handles one (acquire, contention, release, a release
// with a wrong token, ValidateToken allowed and refused, force-release, an
// epoch advance) through lockd and the Go client, with tracing and debug
// logging on, and fails if any token shows up, in any form, in a span, a
// log line of lockd or the client, or an error. Built with -tags tokenleak
// lockd puts the token in a span attribute, and this test must fail (CI
// checks that it does).
func TestNoTokenInTelemetry(t *testing.T) {
	var lockdLog, clientLog syncBuffer
	env, exp, tp := tracedEnv(t, lockdtest.Options{Audit: true, LogOutput: &lockdLog})
	clog := slog.New(slog.NewJSONHandler(&clientLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newClient := func(id string) *client.Client {
		return env.Client(t, id, client.WithTracerProvider(tp), client.WithLogger(clog))
	}
	alice, bob, carol := newClient(lockdtest.Alice), newClient(lockdtest.Bob), newClient(lockdtest.Carol)
	op1, op2 := newClient(lockdtest.Operator), newClient(lockdtest.Operator2)
	tracer := tp.Tracer("canary")
	var errs []string
	var tokens []uint64
	note := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	step := func(name string, f func(ctx context.Context)) {
		ctx, span := tracer.Start(t.Context(), name)
		defer span.End()
		f(ctx)
	}
	noFence := func(*client.Lock) {}

	var a, b *client.Lock
	step("acquire", func(ctx context.Context) {
		var err error
		if a, err = alice.Acquire(ctx, "t/canary/1", "std", noFence); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, a.Token())
	})
	step("contention", func(ctx context.Context) {
		_, err := bob.Acquire(ctx, "t/canary/1", "std", noFence)
		if !errors.Is(err, client.ErrHeld) {
			t.Fatalf("bob's acquire of a held key: %v", err)
		}
		note(err)
		_, err = bob.Acquire(ctx, "t/canary/1", "std", noFence, client.Wait(300*time.Millisecond))
		note(err)
	})
	step("validate", func(ctx context.Context) {
		for _, tok := range []uint64{a.Token(), a.Token() + 1, a.Token() ^ 1<<40} {
			_, err := alice.LockService().ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: "t/canary/1", Token: tok})
			note(err)
			tokens = append(tokens, tok)
		}
		_, err := carol.LockService().ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: "t/canary/1", Token: a.Token()})
		if err == nil {
			t.Fatal("carol may not read t/canary/1, yet ValidateToken answered")
		}
		note(err)
	})
	step("wrong release", func(ctx context.Context) {
		_, err := alice.LockService().Release(ctx, &lockv1.ReleaseRequest{Key: "t/canary/1", Token: a.Token() + 7})
		note(err)
		tokens = append(tokens, a.Token()+7)
	})
	step("release", func(ctx context.Context) {
		note(a.Release(ctx))
	})
	step("regrant", func(ctx context.Context) {
		var err error
		fenced := make(chan struct{})
		if b, err = bob.Acquire(ctx, "t/canary/1", "std", func(*client.Lock) { close(fenced) }); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, b.Token())
		_ = fenced
	})
	step("force-release", func(ctx context.Context) {
		req, err := op1.AdminService().RequestForceRelease(ctx, &lockv1.RequestForceReleaseRequest{Key: "t/canary/1", Reason: "canary"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = op1.AdminService().ApproveForceRelease(ctx, &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()})
		note(err) // the requester may not approve
		if _, err = op2.AdminService().ApproveForceRelease(ctx, &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.Done():
			note(b.Err())
		case <-time.After(20 * time.Second):
			t.Fatal("bob was not told of the force-release")
		}
		note(b.Release(ctx))
	})
	step("inspect and history", func(ctx context.Context) {
		c, err := op1.Acquire(ctx, "t/canary/2", "std", noFence)
		note(err) // the operator holds no grant in t/
		if c != nil {
			tokens = append(tokens, c.Token())
		}
		_, err = op1.LockService().Inspect(ctx, &lockv1.InspectRequest{Key: "t/canary/1"})
		note(err)
		lockdtest.WaitFor(t, 10*time.Second, "the history to have the force-release", func() bool {
			h, err := op1.LockService().History(ctx, &lockv1.HistoryRequest{Key: "t/canary/1"})
			return err == nil && len(h.GetEvents()) >= 3
		})
	})
	step("epoch advance", func(context.Context) {
		c, err := alice.Acquire(t.Context(), "t/canary/3", "std", noFence)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, c.Token())
		env.AdvanceEpoch(t, 1, "canary")
		select {
		case <-c.Done():
			note(c.Err())
		case <-time.After(20 * time.Second):
			t.Fatal("alice was not told of the epoch advance")
		}
	})
	for _, c := range []*client.Client{alice, bob, carol, op1, op2} {
		note(c.Close())
	}

	spans := exp.GetSpans()
	if len(spans) < 20 {
		t.Fatalf("only %d spans exported: the canary must see lockd's and the client's spans", len(spans))
	}
	var kinds = map[trace.SpanKind]int{}
	for _, s := range spans {
		kinds[s.SpanKind]++
	}
	if kinds[trace.SpanKindServer] == 0 || kinds[trace.SpanKindClient] == 0 {
		t.Fatalf("spans by kind %v: want lockd's server spans and client spans", kinds)
	}
	if lockdLog.String() == "" || !strings.Contains(lockdLog.String(), `"level":"DEBUG"`) {
		t.Fatal("lockd wrote no debug log: the canary needs debug logging on")
	}
	if len(errs) < 6 {
		t.Fatalf("only %d errors collected: %q", len(errs), errs)
	}
	sources := map[string][]string{"lockd log": strings.Split(lockdLog.String(), "\n"), "client log": strings.Split(clientLog.String(), "\n"), "error": errs}
	for _, s := range spans {
		sources["span"] = append(sources["span"], spanText(s))
	}
	checked := 0
	for _, tok := range tokens {
		for _, re := range tokenForms(tok) {
			for src, lines := range sources {
				for _, line := range lines {
					checked++
					if re.MatchString(line) {
						t.Errorf("a token in %s (pattern %s): %s", src, re, line)
					}
				}
			}
		}
	}
	t.Logf("%d tokens in 3 forms checked against %d spans, %d lockd and %d client log lines and %d errors (%d checks)",
		len(tokens), len(spans), len(sources["lockd log"]), len(sources["client log"]), len(errs), checked)
}
