package fencedstore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockd-dev/lockd/internal/pgserver"
)

// step is one operation of a case table run against a fresh store whose
// key "k" is at fence 0, value 0.
type step struct {
	read     bool
	tok      uint64
	value    int64
	accepted bool   // for a write
	fence    uint64 // for a read
}

func write(tok uint64, value int64, accepted bool) step {
	return step{tok: tok, value: value, accepted: accepted}
}

func read(fence uint64, value int64) step {
	return step{read: true, fence: fence, value: value}
}

const near62 = uint64(1) << 62

// storeCases are run on every backend; fenced selects the mode the
// store must be set up in.
var storeCases = []struct {
	name   string
	fenced bool
	steps  []step
}{
	{"fenced/higher-equal-lower", true, []step{
		read(0, 0),
		write(10, 1, true),
		read(10, 1),
		write(10, 2, false), // equal token: rejected
		write(9, 3, false),  // lower token: rejected
		write(0, 4, false),
		read(10, 1),
		write(11, 5, true),
		read(11, 5),
	}},
	{"fenced/near-2^62", true, []step{
		write(near62+1, -(1<<62)-3, true),
		read(near62+1, -(1<<62)-3),
		write(near62, 7, false),
		write(near62+1, 7, false),
		write(near62+2, 1<<62+5, true),
		read(near62+2, 1<<62+5),
		write(MaxToken, -1, true),
		read(MaxToken, -1),
		write(MaxToken, -2, false),
	}},
	{"unfenced/stale-accepted", false, []step{
		write(10, 1, true),
		write(10, 2, true), // equal token: accepted
		write(9, 3, true),  // lower token: accepted, the negative control's point
		read(9, 3),
		write(1, 4, true),
		read(1, 4),
	}},
	{"unfenced/near-2^62", false, []step{
		write(near62+3, 1<<62+3, true),
		read(near62+3, 1<<62+3),
		write(near62-1, -5, true),
		read(near62-1, -5),
	}},
}

func runSteps(t *testing.T, reg Store, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		if s.read {
			fence, value, err := reg.Read(ctx, "k")
			if err != nil {
				t.Fatalf("step %d: read: %v", i, err)
			}
			if fence != s.fence || value != s.value {
				t.Fatalf("step %d: read = (%d, %d), want (%d, %d)", i, fence, value, s.fence, s.value)
			}
			continue
		}
		accepted, err := reg.Write(ctx, "k", s.tok, s.value)
		if err != nil {
			t.Fatalf("step %d: write(%d, %d): %v", i, s.tok, s.value, err)
		}
		if accepted != s.accepted {
			t.Fatalf("step %d: write(%d, %d) accepted = %v, want %v", i, s.tok, s.value, accepted, s.accepted)
		}
	}
}

// checkTokenRange checks that a token above MaxToken is a definite error.
func checkTokenRange(t *testing.T, reg Store) {
	t.Helper()
	_, err := reg.Write(context.Background(), "k", MaxToken+1, 1)
	if !errors.Is(err, ErrTokenRange) || IsUnknown(err) {
		t.Fatalf("write(MaxToken+1) = %v, want definite ErrTokenRange", err)
	}
}

func TestMemoryDirect(t *testing.T) {
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) {
			m := NewMemory(c.fenced)
			runSteps(t, m, c.steps)
			checkTokenRange(t, m)
		})
	}
}

func TestMemoryHTTP(t *testing.T) {
	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(NewMemory(c.fenced).Handler())
			defer srv.Close()
			reg := OpenHTTP(srv.URL + "/")
			defer reg.Close()
			runSteps(t, reg, c.steps)
			checkTokenRange(t, reg)
		})
	}
}

func TestMemoryHTTPUnknownKey(t *testing.T) {
	srv := httptest.NewServer(NewMemory(true).Handler())
	defer srv.Close()
	reg := OpenHTTP(srv.URL)
	defer reg.Close()
	fence, value, err := reg.Read(context.Background(), "never written/&?")
	if err != nil || fence != 0 || value != 0 {
		t.Fatalf("read unknown key = (%d, %d, %v), want (0, 0, nil)", fence, value, err)
	}
	ok, err := reg.Write(context.Background(), "never written/&?", 1, 2)
	if err != nil || !ok {
		t.Fatalf("first write to unknown key = (%v, %v), want accepted", ok, err)
	}
}

// TestMemoryHTTPWire checks that numbers travel as exact decimal strings.
func TestMemoryHTTPWire(t *testing.T) {
	srv := httptest.NewServer(NewMemory(true).Handler())
	defer srv.Close()
	const tok = "4611686018427387905" // 2^62+1: not a float64
	resp, err := http.Post(srv.URL+"/write", "application/json",
		strings.NewReader(`{"key":"k","token":"`+tok+`","value":"-4611686018427387907"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"accepted":true}` {
		t.Fatalf("write: %s %s", resp.Status, body)
	}
	resp, err = http.Get(srv.URL + "/read?key=k")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"fence":"` + tok + `","value":"-4611686018427387907"}`; strings.TrimSpace(string(body)) != want {
		t.Fatalf("read = %s, want %s", body, want)
	}

	for _, bad := range []string{
		`{"key":"k","token":"9223372036854775808","value":"1"}`, // > MaxToken
		`{"key":"","token":"5","value":"1"}`,
		`{"key":"k","token":5,"value":"1"}`,
		`not json`,
	} {
		resp, err := http.Post(srv.URL+"/write", "application/json", strings.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("write %s: %s, want 400", bad, resp.Status)
		}
	}
}

func TestMemoryHTTPOutcomes(t *testing.T) {
	ctx := context.Background()

	// A server that takes the request and never answers in time: unknown.
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer slow.Close()
	defer close(release)
	reg := OpenHTTP(slow.URL)
	defer reg.Close()
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := reg.Write(tctx, "k", 5, 1)
	cancel()
	if !IsUnknown(err) {
		t.Fatalf("write to a hung server: %v, want unknown", err)
	}

	// A server that is gone: the connection is refused, nothing was sent.
	gone := httptest.NewServer(http.NotFoundHandler())
	url := gone.URL
	gone.Close()
	reg2 := OpenHTTP(url)
	defer reg2.Close()
	_, err = reg2.Write(ctx, "k", 5, 1)
	if err == nil || IsUnknown(err) {
		t.Fatalf("write to a closed port: %v, want definite error", err)
	}

	// A server dropping the connection after reading the request: unknown.
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer drop.Close()
	reg3 := OpenHTTP(drop.URL)
	defer reg3.Close()
	_, err = reg3.Write(ctx, "k", 5, 1)
	if !IsUnknown(err) {
		t.Fatalf("write with the connection dropped: %v, want unknown", err)
	}

	// An already cancelled context: nothing sent.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	_, err = reg3.Write(cctx, "k", 5, 1)
	if err == nil || IsUnknown(err) {
		t.Fatalf("write with a cancelled context: %v, want definite error", err)
	}
}

// postgresDir makes a directory the postgres user can reach: t.TempDir's
// parent is private to root.
func postgresDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencedstore-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPostgres runs a real PostgreSQL server. It fails, not skips, when
// PostgreSQL is missing: CI installs it.
func TestPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	url, stop, err := pgserver.Start(ctx, postgresDir(t), true)
	if err != nil {
		t.Fatalf("StartPostgres: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	t.Logf("PostgreSQL up at %s in %v", url, time.Since(start).Round(time.Millisecond))

	open := func(t *testing.T, keys []string, fenced bool) Store {
		t.Helper()
		if err := SetupPostgres(ctx, url, keys, fenced); err != nil {
			t.Fatalf("SetupPostgres: %v", err)
		}
		reg, err := OpenPostgres(ctx, url)
		if err != nil {
			t.Fatalf("OpenPostgres: %v", err)
		}
		t.Cleanup(func() { _ = reg.Close() })
		return reg
	}

	for _, c := range storeCases {
		t.Run(c.name, func(t *testing.T) {
			reg := open(t, []string{"k", "other", "k"}, c.fenced)
			runSteps(t, reg, c.steps)
			checkTokenRange(t, reg)
			// The other key was not touched.
			if fence, value, err := reg.Read(ctx, "other"); err != nil || fence != 0 || value != 0 {
				t.Fatalf("read other = (%d, %d, %v), want (0, 0, nil)", fence, value, err)
			}
		})
	}

	t.Run("unknown-key", func(t *testing.T) {
		reg := open(t, []string{"k"}, true)
		if _, _, err := reg.Read(ctx, "nope"); !errors.Is(err, ErrUnknownKey) || IsUnknown(err) {
			t.Fatalf("read unknown key: %v, want definite ErrUnknownKey", err)
		}
		if _, err := reg.Write(ctx, "nope", 1, 1); !errors.Is(err, ErrUnknownKey) || IsUnknown(err) {
			t.Fatalf("write unknown key: %v, want definite ErrUnknownKey", err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		reg := open(t, []string{"k"}, true)
		const workers, each = 8, 40
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					tok := uint64(i*workers + g + 1)
					if _, err := reg.Write(ctx, "k", tok, int64(tok)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		fence, value, err := reg.Read(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		const maxTok = workers * each
		if fence != maxTok || value != maxTok {
			t.Fatalf("after concurrent writes: (%d, %d), want (%d, %d)", fence, value, maxTok, maxTok)
		}
	})

	t.Run("outcomes", func(t *testing.T) {
		reg := open(t, []string{"k"}, true)
		// Hold the row lock from another session so the write blocks until
		// the deadline: it was sent, so the outcome is unknown.
		blocker, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer blocker.Close(ctx)
		tx, err := blocker.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1 FROM gate_store WHERE id = 'k' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		tctx, tcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = reg.Write(tctx, "k", 5, 5)
		tcancel()
		if !IsUnknown(err) {
			t.Fatalf("write blocked past its deadline: %v, want unknown", err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}

		// A cancelled context: nothing sent, definite.
		cctx, ccancel := context.WithCancel(ctx)
		ccancel()
		if _, err := reg.Write(cctx, "k", 6, 6); err == nil || IsUnknown(err) {
			t.Fatalf("write with a cancelled context: %v, want definite error", err)
		}

		// The store still works after the broken connection.
		if ok, err := reg.Write(ctx, "k", 7, 7); err != nil || !ok {
			t.Fatalf("write after unknown outcome = (%v, %v), want accepted", ok, err)
		}

		// Closed: definite.
		_ = reg.Close()
		if _, err := reg.Write(ctx, "k", 8, 8); !errors.Is(err, ErrClosed) || IsUnknown(err) {
			t.Fatalf("write after Close: %v, want definite ErrClosed", err)
		}
	})

	t.Run("not-set-up", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE DATABASE empty"); err != nil {
			t.Fatal(err)
		}
		emptyURL := strings.Replace(url, "/postgres?", "/empty?", 1)
		if _, err := OpenPostgres(ctx, emptyURL); !errors.Is(err, ErrNotSetUp) {
			t.Fatalf("OpenPostgres on an empty database: %v, want ErrNotSetUp", err)
		}
	})
}

func TestIsUnknown(t *testing.T) {
	if IsUnknown(nil) || IsUnknown(errors.New("x")) || IsUnknown(ErrTokenRange) {
		t.Fatal("IsUnknown true for a definite error")
	}
	if !IsUnknown(classifyPostgres("write", "k", context.DeadlineExceeded)) {
		t.Fatal("a deadline from pgx is not unknown")
	}
}
