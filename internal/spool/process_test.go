//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package spool_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/childproc"
	"github.com/lockd-dev/lockd/internal/spool"
)

// The test binary acts as a child process when childModeEnv is set: see
// TestSpoolChildProcess.
const (
	childModeEnv = "SPOOL_TEST_CHILD" // "append", "group" or "hold"
	childDirEnv  = "SPOOL_TEST_DIR"   // the spool directory
	seedEnv      = "SPOOL_KILL_SEED"  // set to repeat a kill test's choices

	groupWriters = 4
	// childMaxAppends bounds a child that is never killed.
	childMaxAppends = 100_000
)

// TestSpoolChildProcess is not a test: the other tests in this file run the
// test binary again with -test.run=^TestSpoolChildProcess$ and
// childModeEnv set, and this is then the child's body. Without the variable
// it does nothing.
//
//   - append: open the spool, append dataFor(seq) in a loop and, after each
//     Append returns, write the sequence number as a line to stdout (the
//     acknowledgement), until killed.
//   - group: the same from groupWriters goroutines at once, so that appends
//     share fsyncs; each appends groupData(w, n) for n = 0, 1, ... and
//     acknowledges with the line "seq w n".
//   - hold: open the spool, write "ready", and hold it until stdin closes.
func TestSpoolChildProcess(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		return
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...)
		os.Exit(2)
	}
	s, rec, err := spool.Open(os.Getenv(childDirEnv))
	if err != nil {
		fail("%v", err)
	}
	switch mode {
	case "append":
		for seq := rec.LastSeq + 1; seq <= childMaxAppends; seq++ {
			got, err := s.Append(dataFor(seq))
			if err != nil || got != seq {
				fail("Append(entry %d) = %d, %v", seq, got, err)
			}
			if _, err := fmt.Fprintf(os.Stdout, "%d\n", got); err != nil {
				fail("acknowledging %d: %v", got, err)
			}
		}
	case "group":
		var wg sync.WaitGroup
		for w := range groupWriters {
			wg.Go(func() {
				for n := range childMaxAppends / groupWriters {
					seq, err := s.Append(groupData(w, n))
					if err != nil {
						fail("writer %d, entry %d: %v", w, n, err)
					}
					// One write per line: os.File serialises writes, so lines do
					// not interleave.
					if _, err := fmt.Fprintf(os.Stdout, "%d %d %d\n", seq, w, n); err != nil {
						fail("acknowledging %d: %v", seq, err)
					}
				}
			})
		}
		wg.Wait()
	case "hold":
		fmt.Fprintln(os.Stdout, "ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
	default:
		fail("unknown mode %q", mode)
	}
	if err := s.Close(); err != nil {
		fail("%v", err)
	}
}

// groupData is what writer w appends as its entry n in group mode.
func groupData(w, n int) []byte { return fmt.Appendf(nil, "writer %d entry %d", w, n) }

// startChild starts the test binary as a child in mode on dir.
func startChild(t *testing.T, mode, dir string) (*exec.Cmd, io.ReadCloser, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSpoolChildProcess$")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childDirEnv+"="+dir)
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	childproc.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A no-op for a child that has been waited for.
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, stdout, stdin, stderr
}

// TestOpenLockedByAnotherProcess has a child process hold the spool: Open
// fails with ErrLocked naming the directory until the child closes it.
func TestOpenLockedByAnotherProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	cmd, stdout, stdin, stderr := startChild(t, "hold", dir)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("child said %q, %v; stderr: %s", line, err, stderr)
	}
	requireLocked(t, dir, "another process holds the spool")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v; stderr: %s", err, stderr)
	}
	s, _ := open(t, dir)
	closeSpool(t, s)
}

// TestKill9LosesNoAcknowledgedEntry SIGKILLs a child appending in a loop
// after a random number of acknowledgements, five times, and checks that
// every acknowledged entry is in the spool with its data, and that the
// entries are dense from 1.
func TestKill9LosesNoAcknowledgedEntry(t *testing.T) {
	killRounds(t, "append", 5)
}

// TestKill9GroupCommitLosesNoAcknowledgedEntry is the same with
// groupWriters goroutines appending at once, so that the kill lands among
// appends that share an fsync.
func TestKill9GroupCommitLosesNoAcknowledgedEntry(t *testing.T) {
	killRounds(t, "group", 5)
}

func killRounds(t *testing.T, mode string, rounds int) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(seedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
	}
	t.Logf("seed %d (%s=%d repeats the kill points)", seed, seedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := 1; round <= rounds; round++ {
		killAt := 50 + rng.IntN(451)
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			killRound(t, mode, killAt)
		})
	}
}

// killRound runs one child in a fresh directory, SIGKILLs it after killAt
// acknowledgements and checks the spool.
func killRound(t *testing.T, mode string, killAt int) {
	dir := filepath.Join(t.TempDir(), "spool")
	cmd, stdout, _, stderr := startChild(t, mode, dir)

	acked := make(map[uint64][]byte) // seq -> the data acknowledged for it
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		seq, data, err := parseAck(mode, sc.Text())
		if err != nil {
			t.Fatalf("acknowledgement %d: %v; stderr: %s", len(acked)+1, err, stderr)
		}
		if _, dup := acked[seq]; dup {
			t.Fatalf("seq %d acknowledged twice", seq)
		}
		acked[seq] = data
		if !killed && len(acked) == killAt {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	// The pipe reached EOF, so the child is gone; the acknowledgements it
	// wrote before the signal landed have been read too.
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !killed || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v after %d acknowledgements, before or other than by the SIGKILL after %d; stderr: %s",
			err, len(acked), killAt, stderr)
	}

	s, rec := open(t, dir)
	defer closeSpool(t, s)
	entries, err := s.Unshipped()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(entries)) != rec.LastSeq || rec.Entries != len(entries) {
		t.Fatalf("Recovery %+v, but Unshipped returned %d entries", rec, len(entries))
	}
	seen := make(map[string]uint64)
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: not dense from 1", i, e.Seq)
		}
		// Entries appended but not yet acknowledged when the kill landed must
		// be well-formed too.
		if mode == "append" && !bytes.Equal(e.Data, dataFor(e.Seq)) {
			t.Fatalf("seq %d: data %q, want %q", e.Seq, e.Data, dataFor(e.Seq))
		}
		if prev, dup := seen[string(e.Data)]; dup {
			t.Fatalf("seq %d and %d hold the same data %q", prev, e.Seq, e.Data)
		}
		seen[string(e.Data)] = e.Seq
	}
	for seq, data := range acked {
		if seq > uint64(len(entries)) {
			t.Fatalf("acknowledged seq %d is missing: the spool ends at %d", seq, len(entries))
		}
		if got := entries[seq-1].Data; !bytes.Equal(got, data) {
			t.Fatalf("acknowledged seq %d holds %q, want %q", seq, got, data)
		}
	}
	t.Logf("%s: SIGKILL after %d acknowledgements; %d acknowledged in all, %d found (LastSeq %d), %d bytes truncated",
		mode, killAt, len(acked), len(entries), rec.LastSeq, rec.TruncatedBytes)
}

// parseAck parses one acknowledgement line and returns its sequence number
// and the data acknowledged with it.
func parseAck(mode, line string) (uint64, []byte, error) {
	f := strings.Fields(line)
	if mode == "append" && len(f) == 1 {
		seq, err := strconv.ParseUint(f[0], 10, 64)
		return seq, dataFor(seq), err
	}
	if mode == "group" && len(f) == 3 {
		seq, err1 := strconv.ParseUint(f[0], 10, 64)
		w, err2 := strconv.Atoi(f[1])
		n, err3 := strconv.Atoi(f[2])
		return seq, groupData(w, n), errors.Join(err1, err2, err3)
	}
	return 0, nil, fmt.Errorf("unexpected line %q", line)
}
