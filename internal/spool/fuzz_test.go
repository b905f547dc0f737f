//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzDir is a new directory for one fuzz input, on tmpfs when there is
// one: the format is under test here, not the disk, and fsync on tmpfs
// costs nothing, so the fuzzer tries many more inputs.
func fuzzDir(t *testing.T) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "lockd-spool-fuzz-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// FuzzSpoolKeepsAcknowledgedRecords appends records through the real
// Spool (the payload split at zero bytes, at most 16 records), marks some
// shipped, closes it, then damages the log at a fuzzed offset: cuts it
// there (a torn write), overwrites bytes there with fuzzed ones, or
// appends fuzzed bytes. Open never panics and:
//
//   - damage inside the 24-byte header is refused with ErrCorrupt naming
//     the log (the header is written once, before the log is renamed into
//     place: it is never torn);
//   - otherwise Open succeeds, and every acknowledged record that ends
//     before the first damaged byte is still there, byte for byte
//     (Unshipped returns the unshipped ones), the shipped mark is kept, and
//     the next Append gets a number above every number given out before
//     that was shipped;
//   - a cut tail is reported, naming the log and the offset of the first
//     bad record;
//   - the reopened spool appends, and the entry is there after another
//     Close and Open, with nothing more cut.
func FuzzSpoolKeepsAcknowledgedRecords(f *testing.F) {
	f.Add([]byte("grant t/a\x00grant t/b\x00grant t/c"), uint8(1), uint32(60), []byte{0xff}, uint8(1))
	f.Fuzz(func(t *testing.T, payload []byte, shipped uint8, at uint32, garbage []byte, mode uint8) {
		records := bytes.Split(payload, []byte{0})
		records = records[:min(len(records), 16)]
		dir := filepath.Join(fuzzDir(t), "spool")
		s, _, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		ends := []int64{logHeaderSize} // ends[i]: where record i ends (i = its seq)
		for i, r := range records {
			seq, err := s.Append(r)
			if err != nil || seq != uint64(i+1) {
				t.Fatalf("Append of record %d: %d, %v", i+1, seq, err)
			}
			ends = append(ends, ends[i]+int64(recHeaderSize+len(r)))
		}
		n := uint64(len(records))
		mark := uint64(shipped) % (n + 1)
		if err := s.MarkShipped(mark); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		log := filepath.Join(dir, logName)
		orig, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(orig)) != ends[n] {
			t.Fatalf("the log is %d bytes, want %d (header and %d records)", len(orig), ends[n], n)
		}
		off := int(at % uint32(len(orig)+1))
		damaged := slices.Clone(orig)
		switch mode % 3 {
		case 0: // torn at off
			damaged = damaged[:off]
		case 1: // overwritten from off
			damaged = append(damaged[:off], garbage...)
			if len(damaged) < len(orig) {
				damaged = append(damaged, orig[len(damaged):]...)
			}
		case 2: // garbage after the last record
			damaged = append(damaged, garbage...)
		}
		if err := os.WriteFile(log, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		first := firstDifference(orig, damaged) // -1: unchanged

		s, rec, err := Open(dir)
		if first >= 0 && first < logHeaderSize {
			if err == nil {
				s.Close()
				t.Fatalf("Open of a log whose header is damaged at byte %d succeeded: %+v", first, rec)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), log) {
				t.Fatalf("Open of a log whose header is damaged: %v, want ErrCorrupt naming %s", err, log)
			}
			return
		}
		if err != nil {
			t.Fatalf("Open of a log damaged from byte %d on, after its header: %v", first, err)
		}
		defer s.Close()

		kept := n // acknowledged records that end before the first damaged byte
		if first >= 0 {
			for kept > 0 && ends[kept] > int64(first) {
				kept--
			}
		}
		switch {
		case rec.Shipped != mark:
			t.Fatalf("shipped mark %d after Open, want %d", rec.Shipped, mark)
		case rec.LastSeq < max(kept, mark):
			t.Fatalf("LastSeq %d after Open: records 1..%d were intact and 1..%d shipped", rec.LastSeq, kept, mark)
		case first < 0 && (rec.Entries != int(n) || rec.TruncatedBytes != 0):
			t.Fatalf("an undamaged log: %+v, want %d entries and nothing cut", rec, n)
		}
		entries, err := s.Unshipped()
		if err != nil {
			t.Fatalf("Unshipped: %v", err)
		}
		for seq := mark + 1; seq <= kept; seq++ {
			i := int(seq - mark - 1)
			if i >= len(entries) || entries[i].Seq != seq || !bytes.Equal(entries[i].Data, records[seq-1]) {
				t.Fatalf("acknowledged record %d (ends at %d, the damage starts at %d) is lost or changed: %+v (%+v)", seq, ends[seq], first, entries, rec)
			}
		}
		if rec.TruncatedBytes > 0 {
			if !strings.Contains(rec.TruncateReason, log) {
				t.Fatalf("TruncateReason %q does not name the log", rec.TruncateReason)
			}
			if !rec.Rebased && rec.Entries <= int(n) {
				if want := fmt.Sprintf("record at offset %d: ", ends[rec.Entries]); !strings.Contains(rec.TruncateReason, want) {
					t.Fatalf("TruncateReason %q does not say %q", rec.TruncateReason, want)
				}
			}
		}

		seq, err := s.Append([]byte("after the damage"))
		if err != nil || seq != rec.LastSeq+1 || seq <= mark {
			t.Fatalf("Append after Open: %d, %v; want %d", seq, err, rec.LastSeq+1)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, again, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if again.LastSeq != seq || again.TruncatedBytes != 0 {
			t.Fatalf("reopened after an Append of %d: %+v", seq, again)
		}
	})
}

// firstDifference is the offset of the first byte where b differs from a,
// or -1 if they are equal.
func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) == len(b) {
		return -1
	}
	return min(len(a), len(b))
}

// FuzzOpenOnAnyFilesRecoversOrRefuses writes any bytes as the log (behind
// a valid header based at a fuzzed sequence number, or as they are) and as
// the checkpoint (a valid one at a fuzzed mark, any bytes, or none). Open
// never panics: it refuses with an error naming the file, or recovers; a
// recovered spool hands out the next sequence number above every one it
// held or shipped (or refuses to append), and an appended entry is there
// after Close and Open.
func FuzzOpenOnAnyFilesRecoversOrRefuses(f *testing.F) {
	f.Add([]byte{}, uint64(0), []byte{}, uint64(0), uint8(1))
	f.Fuzz(func(t *testing.T, logBytes []byte, base uint64, markBytes []byte, mark uint64, layout uint8) {
		dir := fuzzDir(t)
		if layout&1 != 0 {
			logBytes = append(encodeHeader(logMagic, base), logBytes...)
		}
		if err := os.WriteFile(filepath.Join(dir, logName), logBytes, 0o600); err != nil {
			t.Fatal(err)
		}
		switch (layout >> 1) % 3 {
		case 1:
			markBytes = encodeHeader(markMagic, mark)
			fallthrough
		case 2:
			if err := os.WriteFile(filepath.Join(dir, markName), markBytes, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s, rec, err := Open(dir)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("Open: %v: does not name the file", err)
			}
			return
		}
		defer s.Close()
		if rec.LastSeq < rec.Shipped {
			t.Fatalf("recovered %+v: the last entry is below the shipped mark", rec)
		}
		seq, err := s.Append([]byte("entry"))
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("Append: %v: does not name the file", err)
			}
			return
		}
		if seq != rec.LastSeq+1 || seq <= rec.LastSeq {
			t.Fatalf("recovered %+v; Append returned %d, want %d", rec, seq, rec.LastSeq+1)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, again, err := Open(dir)
		if err != nil {
			t.Fatalf("Open after an Append: %v", err)
		}
		defer s.Close()
		entries, err := s.Unshipped()
		if err != nil || again.LastSeq != seq || len(entries) == 0 || entries[len(entries)-1].Seq != seq || string(entries[len(entries)-1].Data) != "entry" {
			t.Fatalf("Append returned %d; after Close and Open: %+v, entries %+v, %v", seq, again, entries, err)
		}
	})
}
