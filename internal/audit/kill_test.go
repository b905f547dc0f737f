package audit_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/audit/clickhouse"
	"github.com/lockd-dev/lockd/internal/audit/sqlite"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// The test binary runs as a tailer process when these are set (see
// TestMain): the tailer the kill test SIGKILLs.
const (
	childEnv     = "AUDIT_TEST_TAILER"
	childEtcd    = "AUDIT_TEST_ETCD"
	childSinkURL = "AUDIT_TEST_SINK"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChildTailer())
	}
	os.Exit(m.Run())
}

func openSinkURL(ctx context.Context, u string) (audit.Sink, error) {
	if strings.HasPrefix(u, "clickhouse://") {
		return clickhouse.Open(ctx, u)
	}
	return sqlite.Open(ctx, u)
}

// runChildTailer tails until killed, in small, frequent batches.
func runChildTailer() int {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv(childEtcd)}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sink, err := openSinkURL(ctx, os.Getenv(childSinkURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tl, err := audit.New(audit.Config{Client: cli, Sink: sink, Name: fmt.Sprint(os.Getpid()), BatchRows: 25, BatchWait: 150 * time.Millisecond,
		ElectionTTL: time.Second, Retry: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = tl.Run(ctx)
	return 0
}

// TestKilledTailerLosesNothingAndDuplicatesNothing SIGKILLs the tailer
// process again and again while holders grant and release, restarts it
// each time, and then checks the history against what the holders saw:
// every grant and every release exactly once, on SQLite and on a real
// ClickHouse read with FINAL.
func TestKilledTailerLosesNothingAndDuplicatesNothing(t *testing.T) {
	forEachSink(t, func(t *testing.T, sinkURL string) {
		env := lockdtest.Start(t, lockdtest.Options{})
		etcdURL := env.Backend.Embedded.Config().ListenClientUrls[0].String()
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(t.TempDir() + "/tailer.log")
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		start := func() *exec.Cmd {
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), childEnv+"=1", childEtcd+"="+etcdURL, childSinkURL+"="+sinkURL)
			cmd.Stderr = logf
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return cmd
		}
		child := start()
		defer func() { _ = child.Process.Kill(); _, _ = child.Process.Wait() }()
		time.Sleep(time.Second) // elected, its snapshot taken

		// Holders: grant and release as fast as they can.
		var mu sync.Mutex
		// A hold is its key and token: keys granted in one batch (group
		// commit) share a token.
		type hold struct {
			key string
			tok uint64
		}
		granted, released := map[hold]bool{}, map[hold]bool{}
		ctx, stop := context.WithTimeout(context.Background(), 6*time.Second)
		defer stop()
		var wg sync.WaitGroup
		for w := range 6 {
			c := env.Client(t, lockdtest.Worker(w))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					key := fmt.Sprintf("t/kill/%d", (w+i)%4)
					l, err := c.Acquire(ctx, key, "std", func(*client.Lock) {}, client.Wait(2*time.Second))
					if err != nil {
						continue
					}
					mu.Lock()
					granted[hold{key, l.Token()}] = true
					mu.Unlock()
					if err := l.Release(context.Background()); err == nil {
						mu.Lock()
						released[hold{key, l.Token()}] = true
						mu.Unlock()
					}
				}
			}()
		}
		kills := 0
		for ctx.Err() == nil {
			time.Sleep(time.Duration(250+rand.IntN(500)) * time.Millisecond)
			_ = child.Process.Signal(syscall.SIGKILL)
			_, _ = child.Process.Wait()
			kills++
			child = start()
		}
		wg.Wait()

		sink, err := openSinkURL(t.Context(), sinkURL)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		var rows []audit.Event
		lockdtest.WaitFor(t, 60*time.Second, "every release in the history", func() bool {
			rows, err = sink.Query(t.Context(), audit.Filter{Key: "t/kill/"})
			if err != nil {
				return false
			}
			n := 0
			for _, r := range rows {
				if r.Kind == audit.KindRelease || r.Kind == audit.KindHandoff {
					n++
				}
			}
			return n >= len(released)
		})
		type id struct {
			c   uint64
			e   uint32
			rev int64
			key string
		}
		seen := map[id]bool{}
		starts, ends := map[hold]int{}, map[hold]int{}
		for _, r := range rows {
			k := id{r.ClusterID, r.Epoch, r.Revision, r.Key}
			if seen[k] {
				t.Errorf("duplicate row %+v", k)
			}
			seen[k] = true
			if r.Kind == audit.KindGrant || r.Kind == audit.KindHandoff {
				starts[hold{r.Key, r.Token}]++
			}
			if r.Kind == audit.KindRelease || r.Kind == audit.KindHandoff {
				ends[hold{r.Key, r.EndedToken}]++
			}
		}
		for h := range granted {
			if starts[h] != 1 {
				t.Errorf("grant of %s (token %d) is in the history %d times, want once", h.key, h.tok, starts[h])
			}
		}
		for h := range released {
			if ends[h] != 1 {
				t.Errorf("release of %s (token %d) is in the history %d times, want once", h.key, h.tok, ends[h])
			}
		}
		if len(granted) < 50 || kills < 5 {
			t.Fatalf("too little to show anything: %d grants, %d kills", len(granted), kills)
		}
		t.Logf("%d grants, %d releases, %d rows, %d tailer kills: none lost, none twice", len(granted), len(released), len(rows), kills)
	})
}
