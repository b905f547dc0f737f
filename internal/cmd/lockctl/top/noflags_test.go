package top

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// devIdentity is the README's lockctl identity, granted demo/.
const devIdentity = "spiffe://lockd.local/dev"

// repoClasses reads the repository's classes/ directory, the classes the
// README's lockd loads.
func repoClasses(t *testing.T) map[string]string {
	t.Helper()
	root := filepath.Join("..", "..", "..", "..", "classes")
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[rel] = string(b)
		return err
	}))
	require.Contains(t, files, filepath.Join("demo", "grants.yaml"))
	return files
}

// factory is a lockctl Factory dialling addr as id, with -o output.
func factory(addr, id string, output printer.Format) (*cmdutil.Factory, *bytes.Buffer) {
	ios, _, out, _ := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Now: time.Now, Output: output}
	f.Client = func() (*client.Client, error) {
		return client.New(client.WithTarget(addr), client.WithInsecureIdentity(id))
	}
	return f, out
}

func once(t *testing.T, addr, id string, output printer.Format, args ...string) string {
	t.Helper()
	f, out := factory(addr, id, output)
	cmd := NewCmdTop(f, nil)
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	require.NoError(t, cmd.ExecuteContext(t.Context()))
	return out.String()
}

// syncBuffer is the console's terminal: written by the program, read by
// the test.
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

// tui runs `lockctl top args` as on a terminal. keys are typed one after
// the other, each once the screen shows what comes with it; q is typed
// last and the command must exit cleanly.
func tui(t *testing.T, addr, id string, steps [][2]string, args ...string) string {
	t.Helper()
	f, _ := factory(addr, id, printer.FormatTable)
	in, typing := io.Pipe()
	out := &syncBuffer{}
	f.IOStreams.In, f.IOStreams.Out = in, out
	f.IOStreams.SetStdoutTTY(true)
	cmd := NewCmdTop(f, nil)
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(t.Context()) }()
	for _, s := range steps {
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(out.String(), s[0]); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the console never showed %q; it showed:\n%s", s[0], out.String())
			}
		}
		if s[1] != "" {
			_, err := typing.Write([]byte(s[1]))
			require.NoError(t, err)
		}
	}
	_, err := typing.Write([]byte("q"))
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("q did not quit the console")
	}
	_ = typing.Close()
	return out.String()
}

// TestNoFlagsREADMELockd: `lockctl top` and `lockctl top --once` with no
// flags, as the README's dev identity against a lockd loading the
// repository's classes/, show the demo namespace and its holds. Before,
// both failed: ListHolds needs a prefix.
func TestNoFlagsREADMELockd(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{Classes: repoClasses(t)})
	dev := env.Client(t, devIdentity)
	_, err := dev.Acquire(t.Context(), "demo/x", "demo", func(*client.Lock) {})
	require.NoError(t, err)

	table := once(t, env.Addr, devIdentity, printer.FormatTable, "--once")
	require.Contains(t, table, "demo\tdemo\t1\t0\t0%", "the held class, with its hold")
	require.Contains(t, table, "demo\tdemo-fast\t0\t", "an idle class the caller may see")
	require.NotContains(t, table, "payments", "a namespace the dev identity has no grant in")

	var s Snapshot
	require.NoError(t, json.Unmarshal([]byte(once(t, env.Addr, devIdentity, printer.FormatJSON, "--once")), &s))
	require.Equal(t, "demo/x", s.Hot[0].Key)
	require.Equal(t, devIdentity, s.Hot[0].Holder)

	screen := tui(t, env.Addr, devIdentity, [][2]string{{"demo-fast", "/demo\r"}, {"filter: demo", "\r"}, {"demo/x", "\r"},
		{"history: lockctl history ", ""}})
	require.Contains(t, screen, "holder         "+devIdentity)
	require.NotContains(t, screen, "invalid key")
}

// TestNoFlagsPerNamespace: with no --prefix, holds are listed per
// namespace the caller may see: every namespace for an operator; for an
// identity granted only part of a namespace, the classes and a note
// instead of an error.
func TestNoFlagsPerNamespace(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice := env.Client(t, lockdtest.Alice)
	_, err := alice.Acquire(t.Context(), "t/a", "std", func(*client.Lock) {})
	require.NoError(t, err)
	other := env.Client(t, "spiffe://test.local/other")
	_, err = other.Acquire(t.Context(), "other/cache/o", "cache", func(*client.Lock) {})
	require.NoError(t, err)

	var s Snapshot
	require.NoError(t, json.Unmarshal([]byte(once(t, env.Addr, lockdtest.Operator, printer.FormatJSON, "--once")), &s))
	var keys []string
	for _, h := range s.Hot {
		keys = append(keys, h.Key)
	}
	require.ElementsMatch(t, []string{"t/a", "other/cache/o"}, keys, "the operator sees both namespaces' holds")

	require.NoError(t, json.Unmarshal([]byte(once(t, env.Addr, lockdtest.Alice, printer.FormatJSON, "--once")), &s))
	require.Len(t, s.Hot, 1)
	require.Equal(t, "t/a", s.Hot[0].Key, "alice sees t/ only")

	carol := env.Client(t, lockdtest.Carol)
	_, err = carol.Acquire(t.Context(), "t/carol/c", "std", func(*client.Lock) {})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(once(t, env.Addr, lockdtest.Carol, printer.FormatJSON, "--once")), &s))
	require.Len(t, s.Hot, 1, "carol, granted t/carol/ only, sees her key and not t/a")
	require.Equal(t, "t/carol/c", s.Hot[0].Key)

	screen := tui(t, env.Addr, lockdtest.Operator, [][2]string{{"cache", ""}})
	require.Contains(t, screen, "other")
}

// TestConsoleAgainstLockd: the console on a real lockd, as an operator:
// the contended class, its key, the holder and the waiter, then a
// force-release request whose id a second operator approves.
func TestConsoleAgainstLockd(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice := env.Client(t, lockdtest.Alice)
	_, err := alice.Acquire(t.Context(), "t/hot", "std", func(*client.Lock) {})
	require.NoError(t, err)
	bob := env.Client(t, lockdtest.Bob)
	go func() {
		_, _ = bob.Acquire(context.Background(), "t/hot", "std", func(*client.Lock) {}, client.Wait(time.Minute))
	}()
	require.Eventually(t, func() bool { return env.Arbiter.QueueLen("t/hot") == 1 }, 5*time.Second, 20*time.Millisecond)

	screen := tui(t, env.Addr, lockdtest.Operator, [][2]string{
		{"std", "\r"},                    // the contended class sorts first
		{"t/hot", "\r"},                  // its hottest key
		{"1 waiting", "fINC-9 wedged\r"}, // ask for a force-release
		{"lockctl force-release approve", ""},
	})
	require.Contains(t, screen, lockdtest.Alice+" (session")
	match := regexp.MustCompile(`requested: id ([0-9a-f]+)\.`).FindStringSubmatch(screen)
	require.Len(t, match, 2, screen)
	id := match[1]

	_, admin := env.Raw(t, lockdtest.Operator2)
	_, err = admin.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: id})
	require.NoError(t, err, "the id on screen is the request a second operator approves")
}
