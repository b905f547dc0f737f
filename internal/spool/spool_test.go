//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package spool_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lockd-dev/lockd/internal/spool"
)

// The format's sizes, from the package comment.
const (
	fileHeaderSize = 24
	recHeaderSize  = 18
)

// dataFor is the payload the tests write as entry seq: derived from seq
// alone, so that a reader can check it, and of varying length.
func dataFor(seq uint64) []byte {
	b := fmt.Appendf(nil, "entry-%06d|", seq)
	for i := range (seq * 7) % 41 {
		b = append(b, byte('a'+(seq+i)%26))
	}
	return b
}

func recSize(seq uint64) int64 { return int64(recHeaderSize + len(dataFor(seq))) }

func logPath(dir string) string { return filepath.Join(dir, "spool.log") }

func open(t *testing.T, dir string) (*spool.Spool, spool.Recovery) {
	t.Helper()
	s, rec, err := spool.Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s, rec
}

func closeSpool(t *testing.T, s *spool.Spool) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// appendSeqs appends dataFor(seq) for seq from..to and checks the numbers
// Append returns.
func appendSeqs(t *testing.T, s *spool.Spool, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		got, err := s.Append(dataFor(seq))
		if err != nil {
			t.Fatalf("Append(entry %d): %v", seq, err)
		}
		if got != seq {
			t.Fatalf("Append returned seq %d, want %d", got, seq)
		}
	}
}

// checkUnshipped checks that Unshipped returns exactly the entries from..to
// written by appendSeqs.
func checkUnshipped(t *testing.T, s *spool.Spool, from, to uint64) {
	t.Helper()
	entries, err := s.Unshipped()
	if err != nil {
		t.Fatalf("Unshipped: %v", err)
	}
	if want := int(to + 1 - from); len(entries) != want {
		t.Fatalf("Unshipped returned %d entries, want %d (%d..%d)", len(entries), want, from, to)
	}
	for i, e := range entries {
		seq := from + uint64(i)
		if e.Seq != seq {
			t.Fatalf("Unshipped()[%d].Seq = %d, want %d", i, e.Seq, seq)
		}
		if !bytes.Equal(e.Data, dataFor(seq)) {
			t.Fatalf("entry %d: data %q, want %q", seq, e.Data, dataFor(seq))
		}
	}
}

// makeSpool makes a spool in a new directory holding entries 1..n and
// returns the directory and the log's bytes.
func makeSpool(t *testing.T, n uint64) (string, []byte) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "spool")
	s, _ := open(t, dir)
	appendSeqs(t, s, 1, n)
	closeSpool(t, s)
	b, err := os.ReadFile(logPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	return dir, b
}

// recordStart is where the record with sequence number seq starts in a log
// made by makeSpool.
func recordStart(seq uint64) int64 {
	off := int64(fileHeaderSize)
	for s := uint64(1); s < seq; s++ {
		off += recSize(s)
	}
	return off
}

// withLog makes a new spool directory whose log is b.
func withLog(t *testing.T, b []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(logPath(dir), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkRecovered opens dir, expects entries 1..good and truncated bytes
// cut, checks the log is now exactly prefix, and that the next Append gets
// good+1 and survives a reopen.
func checkRecovered(t *testing.T, dir string, good uint64, cut int64, prefix []byte, reason string) {
	t.Helper()
	s, rec := open(t, dir)
	if rec.Entries != int(good) || rec.LastSeq != good || rec.TruncatedBytes != cut {
		t.Fatalf("Recovery = %+v, want Entries %d, LastSeq %d, TruncatedBytes %d", rec, good, good, cut)
	}
	if cut == 0 && rec.TruncateReason != "" {
		t.Fatalf("TruncateReason %q with nothing truncated", rec.TruncateReason)
	}
	if cut > 0 {
		if !strings.HasPrefix(rec.TruncateReason, "spool: "+logPath(dir)+": record at offset ") || !strings.Contains(rec.TruncateReason, reason) {
			t.Fatalf("TruncateReason %q: want the spool: prefix, the file, the offset and %q", rec.TruncateReason, reason)
		}
		t.Logf("%s", rec.TruncateReason)
	}
	got, err := os.ReadFile(logPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, prefix) {
		t.Fatalf("log after Open is %d bytes, want exactly the %d-byte good prefix", len(got), len(prefix))
	}
	checkUnshipped(t, s, 1, good)
	appendSeqs(t, s, good+1, good+1)
	closeSpool(t, s)
	s, rec = open(t, dir)
	defer closeSpool(t, s)
	if rec.TruncatedBytes != 0 || rec.LastSeq != good+1 {
		t.Fatalf("reopen after the repair: %+v, want nothing truncated and LastSeq %d", rec, good+1)
	}
	checkUnshipped(t, s, 1, good+1)
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []uint64{0, 1, 100} {
		t.Run(fmt.Sprint(n, " entries"), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "a", "spool")
			s, rec := open(t, dir)
			if rec != (spool.Recovery{}) {
				t.Fatalf("new spool: Recovery = %+v, want zero", rec)
			}
			appendSeqs(t, s, 1, n)
			checkUnshipped(t, s, 1, n)
			closeSpool(t, s)

			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o700 {
				t.Errorf("directory mode %v, want 0700", perm)
			}
			s, rec = open(t, dir)
			defer closeSpool(t, s)
			if want := (spool.Recovery{Entries: int(n), LastSeq: n}); rec != want {
				t.Fatalf("reopen: Recovery = %+v, want %+v", rec, want)
			}
			checkUnshipped(t, s, 1, n)
		})
	}
}

// TestOpenTruncatesTornTailAtEveryCutPoint cuts the log at every byte
// offset of the last record, header included, as a crash in the middle of
// writing it would, and checks that Open keeps the records before it,
// truncates to exactly them and goes on from there.
func TestOpenTruncatesTornTailAtEveryCutPoint(t *testing.T) {
	const n = 5
	_, orig := makeSpool(t, n)
	start := recordStart(n)
	if int64(len(orig)) != start+recSize(n) {
		t.Fatalf("log is %d bytes, want %d", len(orig), start+recSize(n))
	}
	for cut := start; cut < int64(len(orig)); cut++ {
		t.Run(fmt.Sprintf("%d of %d bytes of the last record", cut-start, recSize(n)), func(t *testing.T) {
			dir := withLog(t, orig[:cut])
			reason := "payload cut short"
			if cut-start < recHeaderSize {
				reason = "header cut short"
			}
			checkRecovered(t, dir, n-1, cut-start, orig[:start], reason)
		})
	}
}

func TestOpenTruncatesCorruptLastRecord(t *testing.T) {
	const n = 5
	_, orig := makeSpool(t, n)
	start := recordStart(n)
	if len(dataFor(n))%2 != 0 {
		t.Fatal("the length case below wants an even payload length")
	}
	for _, c := range []struct {
		name   string
		off    int64 // in the record
		bit    uint
		reason string
	}{
		{"magic", 0, 0, "bad magic"},
		{"version", 1, 1, "record version"},
		{"length field, low bit (the payload runs past the end)", 2, 0, "payload cut short"},
		{"length field, high bit (above the limit)", 5, 7, "above the limit"},
		{"sequence number", 6, 0, "checksum mismatch"},
		{"checksum", 14, 3, "checksum mismatch"},
		{"payload", recHeaderSize + 3, 5, "checksum mismatch"},
		{"last payload byte", recSize(n) - 1, 0, "checksum mismatch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Clone(orig)
			b[start+c.off] ^= 1 << c.bit
			checkRecovered(t, withLog(t, b), n-1, recSize(n), orig[:start], c.reason)
		})
	}
}

// TestOpenTruncatesFromACorruptMiddleRecordDroppingTheValidRecordsAfterIt
// damages record 3 of 6: Open ends the log before it, and records 4..6,
// whose checksums are fine, go too. That is the documented behaviour (see
// the package comment for why they cannot have been acknowledged unless the
// damage happened after they were synced).
func TestOpenTruncatesFromACorruptMiddleRecordDroppingTheValidRecordsAfterIt(t *testing.T) {
	const n, bad = 6, 3
	_, orig := makeSpool(t, n)
	start := recordStart(bad)
	for _, c := range []struct {
		name   string
		off    int64
		bit    uint
		reason string
	}{
		{"payload", recHeaderSize + 1, 2, "checksum mismatch"},
		{"checksum", 15, 0, "checksum mismatch"},
		{"length field, low bit", 2, 0, "checksum mismatch"},
		{"length field, high bit", 4, 6, "above the limit"},
		{"magic", 0, 7, "bad magic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Clone(orig)
			b[start+c.off] ^= 1 << c.bit
			checkRecovered(t, withLog(t, b), bad-1, int64(len(orig))-start, orig[:start], c.reason)
		})
	}
}

// TestOpenTruncatesAtARecordOutOfSequence appends a valid copy of record 4
// after it: its checksum is right but its sequence number is not the
// previous + 1.
func TestOpenTruncatesAtARecordOutOfSequence(t *testing.T) {
	const n = 4
	_, orig := makeSpool(t, n)
	b := append(bytes.Clone(orig), orig[recordStart(n):]...)
	checkRecovered(t, withLog(t, b), n, recSize(n), orig, "sequence number 4, want 5")
}

// TestOpenTruncatesTrailingZeros: after a crash a filesystem can show a
// file's new size with zeros where the data did not make it.
func TestOpenTruncatesTrailingZeros(t *testing.T) {
	_, orig := makeSpool(t, 3)
	b := append(bytes.Clone(orig), make([]byte, 4096)...)
	checkRecovered(t, withLog(t, b), 3, 4096, orig, "bad magic 0x00")
}

func TestOpenRefusesADamagedHeaderOrCheckpoint(t *testing.T) {
	_, orig := makeSpool(t, 2)
	for _, c := range []struct {
		name, file string
		content    []byte
		want       string
	}{
		{"log header bit flip", "spool.log", func() []byte { b := bytes.Clone(orig); b[13] ^= 1; return b }(), "header checksum mismatch"},
		{"log shorter than its header", "spool.log", orig[:10], "shorter than the 24-byte header"},
		{"log with a foreign magic", "spool.log", append([]byte("NOTASPOOL"), orig[9:]...), "bad magic"},
		{"checkpoint bit flip", "shipped", func() []byte {
			b := bytes.Clone(orig[:fileHeaderSize])
			copy(b, "LKDSHIPD")
			return b
		}(), "header checksum mismatch"},
		{"checkpoint of the wrong size", "shipped", []byte("x"), "1 bytes, a checkpoint is 24"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := withLog(t, orig)
			p := filepath.Join(dir, c.file)
			if err := os.WriteFile(p, c.content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, _, err := spool.Open(dir)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, spool.ErrCorrupt) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v; want ErrCorrupt naming %s and saying %q", err, p, c.want)
			}
			// The failed Open released the lock: repair the file and open.
			if c.file == "shipped" {
				err = os.Remove(p)
			} else {
				err = os.WriteFile(p, orig, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			s, rec := open(t, dir)
			defer closeSpool(t, s)
			if rec.LastSeq != 2 {
				t.Fatalf("after repairing the file: %+v", rec)
			}
		})
	}
}

func TestShippedMark(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	appendSeqs(t, s, 1, 10)
	if err := s.MarkShipped(4); err != nil {
		t.Fatalf("MarkShipped(4): %v", err)
	}
	checkUnshipped(t, s, 5, 10)
	if err := s.MarkShipped(2); err != nil {
		t.Fatalf("MarkShipped(2), below the mark: %v, want a no-op", err)
	}
	checkUnshipped(t, s, 5, 10)
	err := s.MarkShipped(11)
	if err == nil || !strings.Contains(err.Error(), "spool: ") || !strings.Contains(err.Error(), "MarkShipped(11) is above the last synced entry, 10") {
		t.Fatalf("MarkShipped(11) with LastSeq 10: %v, want an error saying so", err)
	}
	closeSpool(t, s)

	s, rec := open(t, dir)
	if rec.Shipped != 4 || rec.LastSeq != 10 || rec.Entries != 10 {
		t.Fatalf("reopen: %+v, want Shipped 4, LastSeq 10, Entries 10", rec)
	}
	checkUnshipped(t, s, 5, 10)
	if err := s.MarkShipped(10); err != nil {
		t.Fatal(err)
	}
	checkUnshipped(t, s, 11, 10)
	closeSpool(t, s)

	s, rec = open(t, dir)
	defer closeSpool(t, s)
	if rec.Shipped != 10 {
		t.Fatalf("reopen: %+v, want Shipped 10", rec)
	}
	checkUnshipped(t, s, 11, 10)
}

func TestResetKeepsSequenceNumbersIncreasing(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	appendSeqs(t, s, 1, 10)
	if err := s.MarkShipped(9); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(); err == nil || !strings.Contains(err.Error(), "unshipped entries: shipped up to 9 of 10") {
		t.Fatalf("Reset with entry 10 unshipped: %v, want an error saying so", err)
	}
	checkUnshipped(t, s, 10, 10)
	if err := s.MarkShipped(10); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if fi, err := os.Stat(logPath(dir)); err != nil || fi.Size() != fileHeaderSize {
		t.Fatalf("log after Reset: %v, %v; want only its header", fi, err)
	}
	checkUnshipped(t, s, 11, 10)
	if err := s.MarkShipped(11); err == nil {
		t.Fatal("MarkShipped(11) after Reset at 10 succeeded")
	}
	appendSeqs(t, s, 11, 12)
	checkUnshipped(t, s, 11, 12)
	closeSpool(t, s)

	s, rec := open(t, dir)
	if want := (spool.Recovery{Entries: 2, LastSeq: 12, Shipped: 10}); rec != want {
		t.Fatalf("reopen after Reset: %+v, want %+v", rec, want)
	}
	checkUnshipped(t, s, 11, 12)
	if err := s.MarkShipped(12); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(); err != nil {
		t.Fatalf("Reset of an empty log: %v, want a no-op", err)
	}
	closeSpool(t, s)

	// Reopen straight after a Reset, with an empty log: the header's base
	// keeps the numbers going, even with the checkpoint gone.
	if err := os.Remove(filepath.Join(dir, "shipped")); err != nil {
		t.Fatal(err)
	}
	s, rec = open(t, dir)
	defer closeSpool(t, s)
	if want := (spool.Recovery{LastSeq: 12, Shipped: 12}); rec != want {
		t.Fatalf("reopen after a second Reset, checkpoint removed: %+v, want %+v", rec, want)
	}
	appendSeqs(t, s, 13, 13)
	checkUnshipped(t, s, 13, 13)
}

// TestOpenIgnoresLeftOverTemporaryFiles: a crash between writing a
// temporary file and renaming it leaves the old state in force.
func TestOpenIgnoresLeftOverTemporaryFiles(t *testing.T) {
	dir, orig := makeSpool(t, 3)
	for _, name := range []string{"spool.log.tmp", "shipped.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("half written"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	checkRecovered(t, dir, 3, 0, orig, "")
	for _, name := range []string{"spool.log.tmp", "shipped.tmp"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Open: %v", name, err)
		}
	}
}

// TestOpenRebasesWhenTheShippedMarkIsAheadOfTheLog simulates shipped,
// synced records lost afterwards: the next number must come after the mark.
func TestOpenRebasesWhenTheShippedMarkIsAheadOfTheLog(t *testing.T) {
	dir, orig := makeSpool(t, 10)
	s, _ := open(t, dir)
	if err := s.MarkShipped(10); err != nil {
		t.Fatal(err)
	}
	closeSpool(t, s)
	// Records 6..10 damaged after they were shipped.
	b := bytes.Clone(orig)
	b[recordStart(6)+recHeaderSize] ^= 1
	if err := os.WriteFile(logPath(dir), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, rec := open(t, dir)
	if !rec.Rebased || rec.LastSeq != 10 || rec.Shipped != 10 || rec.Entries != 0 || rec.TruncatedBytes != int64(len(orig))-recordStart(6) {
		t.Fatalf("Recovery = %+v, want Rebased, LastSeq 10, Shipped 10, no entries, the tail from record 6 truncated", rec)
	}
	appendSeqs(t, s, 11, 11)
	closeSpool(t, s)
	s, rec = open(t, dir)
	defer closeSpool(t, s)
	if rec.Rebased || rec.LastSeq != 11 {
		t.Fatalf("reopen: %+v", rec)
	}
	checkUnshipped(t, s, 11, 11)
}

func TestAppendRefusesAnEntryAboveTheLimit(t *testing.T) {
	s, _ := open(t, t.TempDir())
	defer closeSpool(t, s)
	if _, err := s.Append(make([]byte, spool.MaxEntrySize)); err != nil {
		t.Fatalf("Append of MaxEntrySize bytes: %v", err)
	}
	_, err := s.Append(make([]byte, spool.MaxEntrySize+1))
	if !errors.Is(err, spool.ErrTooLarge) || !strings.Contains(err.Error(), "1048577 bytes, the limit is MaxEntrySize, 1048576 bytes (1 MiB)") {
		t.Fatalf("Append of MaxEntrySize+1 bytes: %v, want ErrTooLarge naming the sizes", err)
	}
	if seq, err := s.Append(nil); err != nil || seq != 2 {
		t.Fatalf("Append(nil) after the refusal: %d, %v; want 2 (the refusal used no number)", seq, err)
	}
	entries, err := s.Unshipped()
	if err != nil || len(entries) != 2 || len(entries[0].Data) != spool.MaxEntrySize || len(entries[1].Data) != 0 {
		t.Fatalf("Unshipped: %d entries, %v", len(entries), err)
	}
}

func TestMethodsAfterClose(t *testing.T) {
	s, _ := open(t, t.TempDir())
	appendSeqs(t, s, 1, 1)
	closeSpool(t, s)
	if _, err := s.Append([]byte("x")); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if _, err := s.Unshipped(); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("Unshipped after Close: %v", err)
	}
	if err := s.MarkShipped(1); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("MarkShipped after Close: %v", err)
	}
	if err := s.Reset(); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("Reset after Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, spool.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// requireLocked fails t unless Open(dir) fails with ErrLocked naming dir;
// while is what holds the lock, for the messages.
func requireLocked(t *testing.T, dir, while string) {
	t.Helper()
	s, _, err := spool.Open(dir)
	if err == nil {
		s.Close()
		t.Fatalf("Open succeeded: %s", while)
	}
	if !errors.Is(err, spool.ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Open (%s): %v, want ErrLocked naming %s", while, err, dir)
	}
	t.Logf("Open (%s): %v", while, err)
}

// TestSecondOpenIsLocked opens the same directory twice in one process: the
// second Open has its own open file, and flock refuses it.
func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	appendSeqs(t, s, 1, 1)
	requireLocked(t, dir, "a second Open while the first is open")
	closeSpool(t, s)
	s2, rec := open(t, dir)
	defer closeSpool(t, s2)
	if rec.LastSeq != 1 {
		t.Fatalf("Open after Close: %+v", rec)
	}
}

// TestConcurrentAppends appends from 16 goroutines at once: the numbers are
// distinct and dense, each goroutine sees its own increase, and every entry
// reads back after a reopen.
func TestConcurrentAppends(t *testing.T) {
	const goroutines, each = 16, 200
	dir := t.TempDir()
	s, _ := open(t, dir)
	var (
		mu  sync.Mutex
		got = make(map[uint64][]byte)
		wg  sync.WaitGroup
	)
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			var prev uint64
			for i := range each {
				data := fmt.Appendf(nil, "goroutine %02d entry %03d", g, i)
				seq, err := s.Append(data)
				if err != nil {
					errs <- err
					return
				}
				if seq <= prev {
					errs <- fmt.Errorf("goroutine %d: seq %d after its own %d", g, seq, prev)
					return
				}
				prev = seq
				mu.Lock()
				if _, dup := got[seq]; dup {
					errs <- fmt.Errorf("seq %d returned twice", seq)
				}
				got[seq] = data
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	closeSpool(t, s)

	const total = goroutines * each
	if len(got) != total {
		t.Fatalf("%d distinct sequence numbers, want %d", len(got), total)
	}
	s, rec := open(t, dir)
	defer closeSpool(t, s)
	if rec.Entries != total || rec.LastSeq != total || rec.TruncatedBytes != 0 {
		t.Fatalf("reopen: %+v, want %d entries", rec, total)
	}
	entries, err := s.Unshipped()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: not dense from 1", i, e.Seq)
		}
		if !bytes.Equal(e.Data, got[e.Seq]) {
			t.Fatalf("seq %d: data %q, Append was given %q", e.Seq, e.Data, got[e.Seq])
		}
	}
}

// TestShippingWhileAppending runs a shipper (Unshipped, MarkShipped, Reset)
// against 8 appenders: the shipper sees every entry exactly once, in order,
// with the data it was appended with, and Reset never loses one.
func TestShippingWhileAppending(t *testing.T) {
	const appenders, each = 8, 100
	dir := t.TempDir()
	s, _ := open(t, dir)
	var (
		mu       sync.Mutex
		appended = make(map[uint64][]byte)
		wg       sync.WaitGroup
	)
	errs := make(chan error, appenders+1)
	for g := range appenders {
		wg.Go(func() {
			for i := range each {
				data := fmt.Appendf(nil, "appender %d entry %d", g, i)
				seq, err := s.Append(data)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				appended[seq] = data
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	var shipped []spool.Entry
	resets := 0
	shipper := make(chan struct{})
	go func() {
		defer close(shipper)
		for last := false; ; {
			select {
			case <-done:
				last = true
			default:
			}
			entries, err := s.Unshipped()
			if err != nil {
				errs <- err
				return
			}
			for _, e := range entries {
				if want := uint64(len(shipped) + 1); e.Seq != want {
					errs <- fmt.Errorf("shipper got seq %d, want %d", e.Seq, want)
					return
				}
				shipped = append(shipped, e)
			}
			if len(entries) > 0 {
				if err := s.MarkShipped(entries[len(entries)-1].Seq); err != nil {
					errs <- err
					return
				}
				if err := s.Reset(); err == nil {
					resets++
				} else if !strings.Contains(err.Error(), "unshipped entries") {
					errs <- err
					return
				}
			}
			if last && len(entries) == 0 {
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	<-shipper
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = appenders * each
	if len(shipped) != total {
		t.Fatalf("shipped %d entries, want %d", len(shipped), total)
	}
	for _, e := range shipped {
		if !bytes.Equal(e.Data, appended[e.Seq]) {
			t.Fatalf("seq %d shipped with %q, appended with %q", e.Seq, e.Data, appended[e.Seq])
		}
	}
	t.Logf("%d entries shipped, %d successful Resets on the way", total, resets)
	closeSpool(t, s)
	s, rec := open(t, dir)
	defer closeSpool(t, s)
	if rec.LastSeq != total || rec.Shipped != total {
		t.Fatalf("reopen: %+v, want LastSeq and Shipped %d", rec, total)
	}
	appendSeqs(t, s, total+1, total+1)
}
