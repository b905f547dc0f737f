package class

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for concurrent use.
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

func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
		panic("unreachable")
	}
}

func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"payments/a.yaml": classYAML("a")})

	var logs syncBuffer
	rejected := make(chan error, 10)
	w, err := NewWatcher(dir, func() time.Time { return testNow },
		slog.New(slog.NewTextHandler(&logs, nil)), func(err error) { rejected <- err })
	require.NoError(t, err)
	defer w.Close()
	changed := make(chan *Set, 10)
	w.OnChange(func(s *Set) { changed <- s })

	first := w.Current()
	_, ok := first.Class("payments", "a")
	require.True(t, ok)

	t.Run("invalid change is rejected", func(t *testing.T) {
		writeFiles(t, dir, map[string]string{"payments/b.yaml": classYAML("b", "ttl: 1s")})
		err := receive(t, rejected)
		require.ErrorIs(t, err, ErrInvalid)
		require.Contains(t, err.Error(), "spec.ttl")
		require.Same(t, first, w.Current())
		require.Empty(t, changed)
		require.Equal(t, 1, strings.Count(logs.String(), "class set rejected"))
		require.Equal(t, 1, strings.Count(strings.TrimSpace(logs.String()), "\n")+1, "one log line")
	})

	t.Run("fix is served", func(t *testing.T) {
		writeFiles(t, dir, map[string]string{"payments/b.yaml": classYAML("b")})
		s := receive(t, changed)
		require.Same(t, s, w.Current())
		_, ok := s.Class("payments", "b")
		require.True(t, ok)
	})

	t.Run("new namespace folder is watched", func(t *testing.T) {
		writeFiles(t, dir, map[string]string{"billing/x.txt": "not yaml"})
		time.Sleep(3 * debounceDelay) // let the watcher see the folder
		writeFiles(t, dir, map[string]string{"billing/c.yaml": strings.ReplaceAll(classYAML("c"), "payments", "billing")})
		s := receive(t, changed)
		require.True(t, s.HasNamespace("billing"))
	})

	t.Run("removal is served", func(t *testing.T) {
		require.NoError(t, os.Remove(filepath.Join(dir, "payments", "b.yaml")))
		s := receive(t, changed)
		_, ok := s.Class("payments", "b")
		require.False(t, ok)
	})

	require.Empty(t, rejected)
	require.NoError(t, w.Close())
	require.NoError(t, w.Close())
}

func TestWatcherRescan(t *testing.T) {
	old := rescanInterval
	rescanInterval = 50 * time.Millisecond
	defer func() { rescanInterval = old }()

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"demo/a.yaml": strings.ReplaceAll(classYAML("a", advisory("waiverExpires: 2027-01-01")...), "payments", "demo")})
	var mu sync.Mutex
	now := testNow
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	rejected := make(chan error, 10)
	w, err := NewWatcher(dir, clock, slog.New(slog.DiscardHandler), func(err error) { rejected <- err })
	require.NoError(t, err)
	defer w.Close()
	good := w.Current()

	// The waiver lapses: the periodic re-scan rejects the set once, and
	// the last good set keeps serving.
	mu.Lock()
	now = time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC)
	mu.Unlock()
	err = receive(t, rejected)
	require.Contains(t, err.Error(), "spec.waiverExpires")
	time.Sleep(5 * rescanInterval)
	require.Empty(t, rejected, "the same rejection is reported once")
	require.Same(t, good, w.Current())
}

func TestNewWatcherInvalid(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"payments/a.yaml": classYAML("a", "tier: x")})
	_, err := NewWatcher(dir, nil, nil, nil)
	require.ErrorIs(t, err, ErrInvalid)
}
