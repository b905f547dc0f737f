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

// TestHistoryPageOfRowsTheCallerMayNotSeeIsTruncated: when the rows of a
// page are all of keys the caller may not lock, and rows it may see come
// after them, the answer says it is truncated instead of claiming to be
// the whole history.
func TestHistoryPageOfRowsTheCallerMayNotSeeIsTruncated(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	alice := env.Client(t, lockdtest.Alice)
	ctx := t.Context()
	// Three holds of a key Carol may not lock, then one of hers: six rows
	// she may not see before the two she may.
	for _, key := range []string{"t/hist-a", "t/hist-a", "t/hist-a", "t/carol/x"} {
		l, err := alice.Acquire(ctx, key, "std", func(*client.Lock) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	op, _ := env.Raw(t, lockdtest.Operator)
	lockdtest.WaitFor(t, 10*time.Second, "all eight rows in the history", func() bool {
		resp, err := op.History(ctx, &lockv1.HistoryRequest{Key: "t/"})
		return err == nil && len(resp.GetEvents()) == 8
	})

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
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	alice := env.Client(t, lockdtest.Alice)
	ctx := t.Context()
	for range 2 {
		l, err := alice.Acquire(ctx, "t/kinds", "std", func(*client.Lock) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	op, _ := env.Raw(t, lockdtest.Operator)
	lockdtest.WaitFor(t, 10*time.Second, "four rows in the history", func() bool {
		resp, err := op.History(ctx, &lockv1.HistoryRequest{Key: "t/kinds"})
		return err == nil && len(resp.GetEvents()) == 4
	})
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
