// Package spool is a local, append-only write-ahead file for records that
// must be on disk before they are acknowledged: the grants lockd makes from
// memory while it cannot reach an etcd quorum. When quorum returns, the
// records are shipped to the audit history, idempotently by (arbiter ID,
// sequence number), and the spool is told how far that got.
//
// # What it promises
//
//   - An entry for which Append returned a nil error has been written and
//     fsync(2)ed, together with every entry before it. It survives kill -9
//     of the process, and a crash or power loss as far as fsync promises
//     that (the disk honours cache flushes, the filesystem is not lying).
//   - Sequence numbers are dense and increasing: the first entry is 1 and
//     each Append gets the previous number + 1. A number Append has returned
//     is never given out again, also after Reset and reopening. (A number
//     whose Append did not return, because the process died or the write
//     failed, can be given out again after Open truncated its record.)
//   - Open scans the log and truncates a torn or corrupt tail: everything
//     from the first record that is cut short, has a bad magic or version,
//     a length above MaxEntrySize, a bad CRC-32C, or a sequence number that
//     is not the previous + 1. The truncation and the directory are fsynced
//     before Open returns, and Recovery says how many bytes went and why.
//   - MarkShipped is durable: the mark is a small checkpoint file replaced
//     atomically (write a temporary file, fsync, rename, fsync the
//     directory).
//
// # What it does not do
//
//   - Compaction: the only one is Reset, which empties the log once every
//     entry in it has been shipped. Nothing is ever removed from the middle.
//   - Sharing: one Spool at a time per directory. Open takes flock(2)
//     (LOCK_EX|LOCK_NB) on a lock file in the directory and fails with
//     ErrLocked, naming the directory, if another process holds it, or
//     another Open in the same process (flock locks belong to the open file,
//     not to the process). flock is advisory and does not work across NFS.
//   - Defence against damage to data after it was synced (bit rot, a stray
//     write): the checksum detects it, but Open then drops the damaged record
//     and every record after it, acknowledged or not; see below.
//   - Replication: it is one file on one disk.
//
// # Why a bad record ends the log, even with valid records after it
//
// A corrupt record in the middle of the file, followed by valid ones, is
// treated like a torn tail: the log ends before it and the valid records
// after it are truncated too. That loses nothing that was acknowledged,
// because of how records are written:
//
//  1. One writer at a time (the group-commit leader) writes whole records
//     at increasing offsets, in sequence order, with pwrite(2).
//  2. An Append returns only after an fsync(2) that started after its own
//     record's write had completed. fsync makes every byte written to the
//     file before it durable, not only the caller's, so when record N's
//     Append returns, records 1..N are all on disk. The contrapositive: if
//     record N is cut short or unreadable after a crash, no record after it
//     was acknowledged, since that acknowledgement needed an fsync covering
//     record N. Valid records can still follow a bad one after a power
//     loss, because the kernel writes a file's dirty pages back in any
//     order, but those belong to a batch whose fsync had not returned, so
//     none of them was acknowledged either.
//  3. After a failed write or fsync the Spool refuses every further Append
//     (Close it and Open again). On Linux a failed fsync can drop the dirty
//     pages and report success the next time, so appending after a failure
//     could place acknowledged records after lost ones, breaking 2.
//  4. Open truncates a bad tail and fsyncs that before anything new is
//     appended, and Reset starts a new file, so a new record never follows
//     left-over bytes; the sequence check rejects a stale record in any
//     case.
//
// The argument assumes fsync works and that synced bytes stay as written.
// If a synced record is damaged later, Open cuts the log there and the
// acknowledged records from there on are lost. Their sequence numbers are
// given out again unless they had been marked shipped: the shipped mark
// keeps a shipped number from ever being reused (see Recovery.Rebased).
//
// # Files and format
//
// The directory holds spool.log (the log), shipped (the checkpoint) and
// lock (the flock target; it is never renamed, so the lock survives Reset
// replacing the log). All integers are little-endian.
//
// spool.log starts with a 24-byte header: "LKDSPOOL", a uint32 format
// version (1), a uint64 base sequence number (the number before the first
// record in this file: 0 for a new spool, the last sequence number after a
// Reset) and a CRC-32C of the preceding 20 bytes. Records follow, each an
// 18-byte header and the payload:
//
//	offset  size  field
//	0       1     magic 0xD5
//	1       1     record version 1
//	2       4     payload length (at most MaxEntrySize)
//	6       8     sequence number
//	14      4     CRC-32C (Castagnoli) of bytes 2..13 and the payload
//	18      n     payload
//
// shipped has the same 24-byte shape as the log header, with the magic
// "LKDSHIPD" and the shipped mark in place of the base.
package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// MaxEntrySize is the largest payload Append accepts, in bytes (1 MiB).
const MaxEntrySize = 1 << 20

var (
	// ErrLocked is returned (wrapped, with the directory's name) by Open when
	// another process, or another Open in this process, has the spool open.
	ErrLocked = errors.New("spool: in use by another process")

	// ErrClosed is returned by every method of a Spool after Close.
	ErrClosed = errors.New("spool: closed")

	// ErrTooLarge is returned (wrapped, with the sizes) by Append for a
	// payload above MaxEntrySize.
	ErrTooLarge = errors.New("spool: entry too large")

	// ErrCorrupt is returned (wrapped, naming the file and what is wrong) when
	// a file is damaged in a way Open cannot repair by truncating the tail: a
	// bad log header or checkpoint. Unshipped returns it if a record that was
	// valid at Open no longer is.
	ErrCorrupt = errors.New("spool: corrupt")
)

const (
	logName  = "spool.log"
	markName = "shipped"
	lockName = "lock"
	tmpExt   = ".tmp"

	// maxSpare is the largest write buffer kept for reuse between flushes.
	maxSpare = 4 << 20
)

// Entry is one record of the log.
type Entry struct {
	// Seq is the entry's sequence number: 1 for the first entry of a spool,
	// the previous entry's + 1 after that.
	Seq uint64
	// Data is the payload given to Append.
	Data []byte
}

// Recovery is what Open found.
type Recovery struct {
	// Entries is how many entries the log holds after Open, shipped or not.
	Entries int
	// TruncatedBytes is how many bytes Open cut from the end of the log: a
	// torn or corrupt tail, from the first bad record on.
	TruncatedBytes int64
	// TruncateReason says what was wrong with the first bad record, naming
	// the file and the offset; empty if nothing was cut.
	TruncateReason string
	// LastSeq is the highest sequence number the spool holds or, after a
	// Reset, held; the next Append gets LastSeq+1. It is 0 for a spool that
	// never had an entry.
	LastSeq uint64
	// Shipped is the shipped mark: every entry up to and including it has
	// been shipped.
	Shipped uint64
	// Rebased is true if the shipped mark was above the last entry left in
	// the log, which only happens if synced records were lost (the disk
	// damaged them after they were shipped, or fsync did not keep its
	// promise). Every entry left was then shipped; Open replaced the log by
	// an empty one based at the mark, so LastSeq is the mark and no shipped
	// sequence number is reused. Worth a loud log line.
	Rebased bool
}

// Spool is an open spool directory. Append is safe for concurrent use; so
// are the other methods, which run one at a time.
type Spool struct {
	dir, logPath, markPath string
	lock                   *os.File

	// opMu serialises Unshipped, MarkShipped, Reset and Close, which may
	// use s.f outside mu. Append does not take it.
	opMu sync.Mutex

	mu   sync.Mutex
	cond sync.Cond // on mu; broadcast when a flush ends

	f        *os.File
	closed   bool
	err      error   // first write or fsync error; Append refuses after it
	base     uint64  // sequence number before the first record in f
	next     uint64  // sequence number the next Append gets
	durable  uint64  // highest sequence number written and fsynced
	shipped  uint64  // shipped mark, durable in markPath (or implied by base)
	offsets  []int64 // offsets[i]: where the record with seq base+1+i starts
	end      int64   // file size once every record handed to Append is written
	pending  []byte  // encoded records no flush has taken yet
	spare    []byte  // a write buffer to reuse
	flushing bool    // a leader is writing and syncing outside mu
	syncs    uint64  // fsyncs done by Append, for the benchmark's figures
}

// Open opens or creates the spool in dir, creating dir with mode 0o700 if it
// is missing. It takes the directory's lock (failing with ErrLocked if it is
// held), reads the shipped mark, scans the log, truncates a torn or corrupt
// tail (and fsyncs the truncation and the directory), and returns what it
// found.
func Open(dir string) (*Spool, Recovery, error) {
	if err := makeDir(dir); err != nil {
		return nil, Recovery{}, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, Recovery{}, err
	}
	s := &Spool{
		dir:      dir,
		logPath:  filepath.Join(dir, logName),
		markPath: filepath.Join(dir, markName),
		lock:     lock,
	}
	s.cond.L = &s.mu
	rec, err := s.recover()
	if err != nil {
		lock.Close()
		return nil, Recovery{}, err
	}
	return s, rec, nil
}

// recover does Open's work once the lock is held.
func (s *Spool) recover() (Recovery, error) {
	// A temporary file is what a crash left between writing and renaming:
	// the rename did not happen, so the file is not part of the state.
	for _, p := range []string{s.logPath + tmpExt, s.markPath + tmpExt} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Recovery{}, fmt.Errorf("spool: removing left-over %s: %w", p, err)
		}
	}
	mark, err := readMark(s.markPath)
	if err != nil {
		return Recovery{}, err
	}

	f, err := os.OpenFile(s.logPath, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		// A new spool, or one whose log was removed by hand: start after the
		// shipped mark so that no shipped number is reused.
		f, _, err = s.replaceLog(mark)
		if err != nil {
			return Recovery{}, err
		}
	} else if err != nil {
		return Recovery{}, fmt.Errorf("spool: opening %s: %w", s.logPath, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()

	base, err := readLogHeader(f, s.logPath)
	if err != nil {
		return Recovery{}, err
	}
	sc, err := scanLog(f, s.logPath, base)
	if err != nil {
		return Recovery{}, err
	}
	var rec Recovery
	if sc.size > sc.end {
		if err := f.Truncate(sc.end); err != nil {
			return Recovery{}, fmt.Errorf("spool: %s: truncating a bad tail at offset %d: %w", s.logPath, sc.end, err)
		}
		if err := f.Sync(); err != nil {
			return Recovery{}, fmt.Errorf("spool: %s: fsync after truncating at offset %d: %w", s.logPath, sc.end, err)
		}
		if err := syncDir(s.dir); err != nil {
			return Recovery{}, err
		}
		rec.TruncatedBytes = sc.size - sc.end
		rec.TruncateReason = fmt.Sprintf("spool: %s: record at offset %d: %s; truncated %d bytes from there",
			s.logPath, sc.end, sc.why, rec.TruncatedBytes)
	}

	last := base + uint64(len(sc.offsets))
	// Entries up to base were shipped before the Reset that based this file
	// at it, even if the checkpoint has been lost since.
	shipped := max(mark, base)
	if shipped > last {
		nf, _, err := s.replaceLog(shipped)
		if err != nil {
			return Recovery{}, err
		}
		f.Close()
		f = nf
		base, last = shipped, shipped
		sc.offsets, sc.end = nil, logHeaderSize
		rec.Rebased = true
	}

	s.f = f
	s.base = base
	s.next = last + 1
	s.durable = last
	s.shipped = shipped
	s.offsets = sc.offsets
	s.end = sc.end
	ok = true

	rec.Entries = len(sc.offsets)
	rec.LastSeq = last
	rec.Shipped = shipped
	return rec, nil
}

// Append writes data as the next entry and fsyncs it before returning its
// sequence number. It does not keep data. It is safe for concurrent use:
// appends that arrive while another one's fsync is under way are written
// and synced together by the next of them (group commit), and none returns
// before its own bytes are synced. An error from the write or the fsync
// breaks the Spool: that Append and every later one fail, and the entry may
// or may not be found after Close and Open.
func (s *Spool) Append(data []byte) (uint64, error) {
	if len(data) > MaxEntrySize {
		return 0, fmt.Errorf("%w: %d bytes, the limit is MaxEntrySize, %d bytes (1 MiB)", ErrTooLarge, len(data), MaxEntrySize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if s.err != nil {
		return 0, fmt.Errorf("spool: %s: refusing to append after an earlier write failed (Close and Open again): %w", s.logPath, s.err)
	}
	seq := s.next
	s.next++
	s.offsets = append(s.offsets, s.end)
	s.pending = appendRecord(s.pending, seq, data)
	s.end += int64(recHeaderSize + len(data))
	for s.durable < seq {
		switch {
		case s.err != nil:
			return 0, s.err
		case s.flushing:
			s.cond.Wait()
		default:
			s.flush()
		}
	}
	return seq, nil
}

// flush writes and fsyncs every pending record, releasing mu while it does.
// It is called with mu held, no flush under way and records pending.
func (s *Spool) flush() {
	batch := s.pending
	off := s.end - int64(len(batch))
	first, last := s.durable+1, s.next-1
	s.pending, s.spare = s.spare[:0], nil
	s.flushing = true
	f := s.f
	s.mu.Unlock()

	_, err := f.WriteAt(batch, off)
	if err == nil {
		err = f.Sync()
	}

	s.mu.Lock()
	s.flushing = false
	if err != nil {
		s.err = fmt.Errorf("spool: %s: writing and syncing entries %d..%d at offset %d: %w", s.logPath, first, last, off, err)
	} else {
		s.durable = last
		s.syncs++
	}
	if cap(batch) <= maxSpare {
		s.spare = batch[:0]
	}
	s.cond.Broadcast()
}

// waitIdle waits, with mu held, until every record handed to Append is
// synced or the Spool is broken, flushing itself if nobody else does.
func (s *Spool) waitIdle() {
	for s.err == nil && (s.flushing || s.durable < s.next-1) {
		if s.flushing {
			s.cond.Wait()
		} else {
			s.flush()
		}
	}
}

// Unshipped returns the entries with Seq above the shipped mark, in order.
// It returns only synced entries: an Append still waiting for its fsync is
// not included. The Data slices are the caller's.
func (s *Spool) Unshipped() ([]Entry, error) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	f, base, from, to := s.f, s.base, s.shipped, s.durable
	if from >= to {
		s.mu.Unlock()
		return nil, nil
	}
	start := s.offsets[from-base]
	stop := s.end
	if int(to-base) < len(s.offsets) {
		stop = s.offsets[to-base]
	}
	s.mu.Unlock()

	// Records up to stop are synced and never written again while opMu is
	// held (only Reset replaces the file), so they can be read without mu
	// while a flush writes after them.
	buf := make([]byte, stop-start)
	if _, err := f.ReadAt(buf, start); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("spool: %s: reading entries %d..%d at offset %d: %w", s.logPath, from+1, to, start, err)
	}
	entries := make([]Entry, 0, to-from)
	for seq, off := from+1, 0; seq <= to; seq++ {
		n, data, why := parseRecord(buf[off:], seq)
		if why != "" {
			return nil, fmt.Errorf("%w: %s: record at offset %d, valid when the spool was opened or written: %s",
				ErrCorrupt, s.logPath, start+int64(off), why)
		}
		entries = append(entries, Entry{Seq: seq, Data: data[:len(data):len(data)]})
		off += n
	}
	return entries, nil
}

// MarkShipped records, durably, that every entry up to and including seq
// has been shipped: it replaces the checkpoint file (write a temporary file,
// fsync, rename, fsync the directory). A seq at or below the current mark is
// a no-op; a seq above the last synced entry is an error.
func (s *Spool) MarkShipped(seq uint64) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	closed, shipped, durable := s.closed, s.shipped, s.durable
	s.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case seq <= shipped:
		return nil
	case seq > durable:
		return fmt.Errorf("spool: %s: MarkShipped(%d) is above the last synced entry, %d", s.dir, seq, durable)
	}
	if err := writeFileAtomic(s.dir, s.markPath, encodeHeader(markMagic, seq)); err != nil {
		return err
	}
	s.mu.Lock()
	s.shipped = seq
	s.mu.Unlock()
	return nil
}

// Reset empties the log once every entry in it has been shipped, so that it
// does not grow without bound. It replaces the log by a new one whose
// header records the last sequence number as its base (write a temporary
// file, fsync, rename, fsync the directory), so sequence numbers go on from
// there, also after a crash and Open. It waits for appends under way and
// holds new ones back while it runs. It fails, changing nothing, if an entry
// is unshipped; it is a no-op if the log is already empty.
func (s *Spool) Reset() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.waitIdle()
	if s.err != nil {
		return fmt.Errorf("spool: %s: cannot reset after a write failed (Close and Open again): %w", s.logPath, s.err)
	}
	if s.shipped < s.durable {
		return fmt.Errorf("spool: %s: cannot reset with unshipped entries: shipped up to %d of %d", s.logPath, s.shipped, s.durable)
	}
	if s.durable == s.base {
		return nil
	}
	f, renamed, err := s.replaceLog(s.durable)
	if err != nil {
		if renamed {
			// The new log is in place but its name may not be durable: a
			// crash could bring the old one back, losing whatever was
			// appended to the new one.
			s.err = err
		}
		return err
	}
	s.f.Close()
	s.f = f
	s.base = s.durable
	s.offsets = s.offsets[:0]
	s.end = logHeaderSize
	return nil
}

// Close waits for appends under way, then closes the log and releases the
// lock. Every method, Close included, returns ErrClosed after it.
func (s *Spool) Close() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.waitIdle()
	f := s.f
	s.mu.Unlock()

	var errs []error
	if err := f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("spool: closing %s: %w", s.logPath, err))
	}
	if err := s.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("spool: releasing the lock on %s: %w", s.dir, err))
	}
	return errors.Join(errs...)
}

// replaceLog makes a new, empty log based at base and returns it open for
// writing: written to a temporary file, fsynced, renamed over the log, and
// the directory fsynced. On an error, renamed says whether the rename had
// happened (the old log is gone, the new one's name may not be durable).
func (s *Spool) replaceLog(base uint64) (f *os.File, renamed bool, err error) {
	tmp := s.logPath + tmpExt
	f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("spool: creating %s: %w", tmp, err)
	}
	if err := writeSyncRename(f, encodeHeader(logMagic, base), tmp, s.logPath); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, false, err
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		return nil, true, err
	}
	return f, false, nil
}

// writeFileAtomic replaces path by a file holding data: written to a
// temporary file, fsynced, renamed, and the directory fsynced.
func writeFileAtomic(dir, path string, data []byte) error {
	tmp := path + tmpExt
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: creating %s: %w", tmp, err)
	}
	err = writeSyncRename(f, data, tmp, path)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("spool: closing %s: %w", tmp, cerr)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// writeSyncRename writes data at the start of f (the file tmp), fsyncs it
// and renames tmp to path.
func writeSyncRename(f *os.File, data []byte, tmp, path string) error {
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("spool: writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("spool: fsync %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("spool: renaming %s to %s: %w", tmp, path, err)
	}
	return nil
}

// syncDir fsyncs a directory, making the names created, renamed or removed
// in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: opening directory %s to fsync it: %w", dir, err)
	}
	err = d.Sync()
	cerr := d.Close()
	if err != nil {
		return fmt.Errorf("spool: fsync directory %s: %w", dir, err)
	}
	if cerr != nil {
		return fmt.Errorf("spool: closing directory %s: %w", dir, cerr)
	}
	return nil
}

// makeDir creates dir (mode 0o700) and any missing parents, and fsyncs the
// parent of each directory it created so that the new names are durable.
func makeDir(dir string) error {
	var created []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("spool: directory %s: %w", dir, err)
		}
		created = append(created, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if len(created) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spool: creating directory %s: %w", dir, err)
	}
	for _, p := range created {
		if err := syncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}
