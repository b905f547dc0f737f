package server_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// historyOf starts a lockd with the audit history on, where Alice takes
// and releases each of keys in turn, and waits until the history under
// prefix has their rows (a grant and a release each); it returns the
// lockd and an operator's client.
func historyOf(t *testing.T, prefix string, keys ...string) (*lockdtest.Env, lockv1.LockServiceClient) {
	t.Helper()
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	alice := env.Client(t, lockdtest.Alice)
	for _, key := range keys {
		l, err := alice.Acquire(t.Context(), key, "std", func(*client.Lock) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	op, _ := env.Raw(t, lockdtest.Operator)
	lockdtest.WaitFor(t, 10*time.Second, "every row in the history", func() bool {
		resp, err := op.History(t.Context(), &lockv1.HistoryRequest{Key: prefix})
		return err == nil && len(resp.GetEvents()) == 2*len(keys)
	})
	return env, op
}

// TestHistoryPageOfRowsTheCallerMayNotSeeIsTruncated: when the rows of a
// page are all of keys the caller may not lock, and rows it may see come
// after them, the answer says it is truncated instead of claiming to be
// the whole history.
func TestHistoryPageOfRowsTheCallerMayNotSeeIsTruncated(t *testing.T) {
	// Three holds of a key Carol may not lock, then one of hers: six rows
	// she may not see before the two she may.
	env, _ := historyOf(t, "t/", "t/hist-a", "t/hist-a", "t/hist-a", "t/carol/x")
	ctx := t.Context()

	carol, _ := env.Raw(t, lockdtest.Carol)
	resp, err := carol.History(ctx, &lockv1.HistoryRequest{Key: "t/", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.GetEvents() {
		if e.GetKey() != "t/carol/x" {
			t.Errorf("Carol sees a row of %s", e.GetKey())
		}
	}
	if len(resp.GetEvents()) < 2 && !resp.GetTruncated() {
		t.Errorf("%d of Carol's 2 rows, and not truncated: the answer claims to be her whole history", len(resp.GetEvents()))
	}
	// Asked for all of it, she gets both rows and no truncation.
	resp, err = carol.History(ctx, &lockv1.HistoryRequest{Key: "t/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEvents()) != 2 || resp.GetTruncated() {
		t.Errorf("Carol's whole history: %d rows, truncated %v; want 2, false", len(resp.GetEvents()), resp.GetTruncated())
	}
}

// TestHistoryKindsSelectsRowsAndRefusesUnknownKinds: kinds keeps only the
// rows of those kinds; a kind that is not one is refused, naming the field
// and the kinds there are.
func TestHistoryKindsSelectsRowsAndRefusesUnknownKinds(t *testing.T) {
	_, op := historyOf(t, "t/kinds", "t/kinds", "t/kinds")
	ctx := t.Context()
	resp, err := op.History(ctx, &lockv1.HistoryRequest{Key: "t/kinds", Kinds: []string{"release"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEvents()) != 2 {
		t.Fatalf("kinds release: %d rows, want the 2 releases", len(resp.GetEvents()))
	}
	for _, e := range resp.GetEvents() {
		if e.GetKind() != "release" {
			t.Errorf("kinds release: a %s row", e.GetKind())
		}
	}
	_, err = op.History(ctx, &lockv1.HistoryRequest{Key: "t/kinds", Kinds: []string{"grant", "acquire"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an unknown kind: %v, want InvalidArgument", err)
	}
	for _, want := range []string{"kinds", `"acquire"`, "unprotected-grant"} {
		if !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("the refusal %q does not say %s", status.Convert(err).Message(), want)
		}
	}
}
