//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package spool

import (
	"fmt"
	"strings"
	"testing"
)

// TestAppendAfterAWriteErrorIsRefused breaks the log file under the Spool:
// the failing Append reports the error, every later one is refused (rule 3
// of the package comment), and Close and Open recover the synced entries.
func TestAppendAfterAWriteErrorIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, _, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Append(fmt.Appendf(nil, "entry %d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	s.f.Close() // the next write fails

	_, err = s.Append([]byte("entry 4"))
	if err == nil || !strings.Contains(err.Error(), "spool: "+s.logPath+": writing and syncing entries 4..4 at offset") {
		t.Fatalf("Append on a broken file: %v, want the write error naming the file and the entries", err)
	}
	_, err = s.Append([]byte("entry 5"))
	if err == nil || !strings.Contains(err.Error(), "refusing to append after an earlier write failed") {
		t.Fatalf("Append after the failure: %v, want a refusal", err)
	}
	if err := s.Reset(); err == nil || !strings.Contains(err.Error(), "cannot reset after a write failed") {
		t.Fatalf("Reset after the failure: %v, want a refusal", err)
	}
	if err := s.MarkShipped(4); err == nil {
		t.Fatal("MarkShipped(4) succeeded: entry 4 was never synced")
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close of the already closed log reported nothing")
	}

	s, rec, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after a broken Spool was closed: %v (the lock must be released)", err)
	}
	defer s.Close()
	if rec.LastSeq != 3 || rec.Entries != 3 {
		t.Fatalf("Recovery = %+v, want the 3 synced entries", rec)
	}
	if seq, err := s.Append([]byte("entry 4")); err != nil || seq != 4 {
		t.Fatalf("Append after reopening: %d, %v", seq, err)
	}
}

// BenchmarkAppend measures Append with fsync on this machine's disk: one
// appender, and 8×GOMAXPROCS appenders sharing fsyncs. fsyncs/op below 1
// is group commit at work.
func BenchmarkAppend(b *testing.B) {
	data := make([]byte, 128)
	for _, bc := range []struct {
		name     string
		parallel bool
	}{{"sequential", false}, {"parallel", true}} {
		b.Run(bc.name, func(b *testing.B) {
			s, _, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			if bc.parallel {
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Append(data); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for b.Loop() {
					if _, err := s.Append(data); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			s.mu.Lock()
			syncs, appends := s.syncs, s.durable
			s.mu.Unlock()
			b.ReportMetric(float64(syncs)/float64(appends), "fsyncs/op")
		})
	}
}
