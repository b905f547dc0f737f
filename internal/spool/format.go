package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// The on-disk format; the package comment describes it.
const (
	logMagic      = "LKDSPOOL"
	markMagic     = "LKDSHIPD"
	formatVersion = 1
	// logHeaderSize is the size of the log's header and of the checkpoint:
	// magic (8), version (4), sequence number (8), CRC-32C (4).
	logHeaderSize = 24

	recMagic      = 0xD5
	recVersion    = 1
	recHeaderSize = 18 // magic (1), version (1), length (4), seq (8), CRC-32C (4)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeHeader encodes a log header (magic logMagic, seq the base) or a
// checkpoint (magic markMagic, seq the shipped mark).
func encodeHeader(magic string, seq uint64) []byte {
	b := make([]byte, logHeaderSize)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:12], formatVersion)
	binary.LittleEndian.PutUint64(b[12:20], seq)
	binary.LittleEndian.PutUint32(b[20:24], crc32.Checksum(b[:20], castagnoli))
	return b
}

// decodeHeader checks and decodes what encodeHeader made, saying what is
// wrong if it cannot.
func decodeHeader(b []byte, magic string) (uint64, string) {
	switch {
	case len(b) < logHeaderSize:
		return 0, fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(b), logHeaderSize)
	case string(b[:8]) != magic:
		return 0, fmt.Sprintf("bad magic %q, want %q", b[:8], magic)
	}
	if got, want := binary.LittleEndian.Uint32(b[20:24]), crc32.Checksum(b[:20], castagnoli); got != want {
		return 0, fmt.Sprintf("header checksum mismatch (stored %#08x, computed %#08x)", got, want)
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != formatVersion {
		return 0, fmt.Sprintf("format version %d, this build reads %d", v, formatVersion)
	}
	return binary.LittleEndian.Uint64(b[12:20]), ""
}

// readMark reads the checkpoint: the shipped mark, 0 if there is none yet.
// The file is only ever replaced by rename, so a damaged one is not a torn
// write, and guessing could reuse shipped sequence numbers: it is an error.
func readMark(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("spool: reading %s: %w", path, err)
	}
	if len(b) != logHeaderSize {
		return 0, fmt.Errorf("%w: %s: %d bytes, a checkpoint is %d", ErrCorrupt, path, len(b), logHeaderSize)
	}
	mark, why := decodeHeader(b, markMagic)
	if why != "" {
		return 0, fmt.Errorf("%w: %s: %s", ErrCorrupt, path, why)
	}
	return mark, nil
}

// readLogHeader reads the log's header and returns its base. The header is
// written before the file is renamed into place and never again, so a
// damaged one is not a torn write: it is an error.
func readLogHeader(f *os.File, path string) (uint64, error) {
	b := make([]byte, logHeaderSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("spool: reading the header of %s: %w", path, err)
	}
	base, why := decodeHeader(b[:n], logMagic)
	if why != "" {
		return 0, fmt.Errorf("%w: %s: %s", ErrCorrupt, path, why)
	}
	return base, nil
}

// appendRecord appends the encoding of one record to b.
func appendRecord(b []byte, seq uint64, data []byte) []byte {
	var h [recHeaderSize]byte
	h[0], h[1] = recMagic, recVersion
	binary.LittleEndian.PutUint32(h[2:6], uint32(len(data)))
	binary.LittleEndian.PutUint64(h[6:14], seq)
	sum := crc32.Update(crc32.Checksum(h[2:14], castagnoli), castagnoli, data)
	binary.LittleEndian.PutUint32(h[14:18], sum)
	b = append(b, h[:]...)
	return append(b, data...)
}

// checkHeader checks a record's header and returns its payload length, or
// says what is wrong with it.
func checkHeader(h []byte) (int, string) {
	if h[0] != recMagic {
		return 0, fmt.Sprintf("bad magic %#02x, want %#02x", h[0], recMagic)
	}
	if h[1] != recVersion {
		return 0, fmt.Sprintf("record version %d, this build reads %d", h[1], recVersion)
	}
	n := binary.LittleEndian.Uint32(h[2:6])
	if n > MaxEntrySize {
		return 0, fmt.Sprintf("payload length %d above the limit of %d bytes", n, MaxEntrySize)
	}
	return int(n), ""
}

// checkRecord checks a record's checksum and sequence number, given its
// header and payload.
func checkRecord(h, data []byte, want uint64) string {
	stored := binary.LittleEndian.Uint32(h[14:18])
	if sum := crc32.Update(crc32.Checksum(h[2:14], castagnoli), castagnoli, data); sum != stored {
		return fmt.Sprintf("checksum mismatch (stored %#08x, computed %#08x)", stored, sum)
	}
	if seq := binary.LittleEndian.Uint64(h[6:14]); seq != want {
		return fmt.Sprintf("sequence number %d, want %d (the previous + 1)", seq, want)
	}
	return ""
}

// parseRecord checks the record at the start of b, which must have sequence
// number want, and returns its size and payload (a slice of b), or says what
// is wrong with it.
func parseRecord(b []byte, want uint64) (int, []byte, string) {
	if len(b) < recHeaderSize {
		return 0, nil, fmt.Sprintf("header cut short: %d of %d bytes", len(b), recHeaderSize)
	}
	n, why := checkHeader(b[:recHeaderSize])
	if why != "" {
		return 0, nil, why
	}
	if len(b) < recHeaderSize+n {
		return 0, nil, fmt.Sprintf("payload cut short: %d of %d bytes", len(b)-recHeaderSize, n)
	}
	data := b[recHeaderSize : recHeaderSize+n]
	if why := checkRecord(b[:recHeaderSize], data, want); why != "" {
		return 0, nil, why
	}
	return recHeaderSize + n, data, ""
}

// scanned is what scanLog found.
type scanned struct {
	offsets []int64 // where each good record starts
	end     int64   // the offset after the last good record
	size    int64   // the file's size
	why     string  // what is wrong with the record at end, if end < size
}

// scanLog reads the records after the header of the log f, based at base,
// up to the first bad one.
func scanLog(f *os.File, path string, base uint64) (scanned, error) {
	fi, err := f.Stat()
	if err != nil {
		return scanned{}, fmt.Errorf("spool: stat %s: %w", path, err)
	}
	sc := scanned{end: logHeaderSize, size: fi.Size()}
	r := bufio.NewReaderSize(io.NewSectionReader(f, logHeaderSize, sc.size-logHeaderSize), 256<<10)
	var h [recHeaderSize]byte
	var data []byte
	for want := base + 1; ; want++ {
		got, err := io.ReadFull(r, h[:])
		switch {
		case errors.Is(err, io.EOF):
			return sc, nil
		case errors.Is(err, io.ErrUnexpectedEOF):
			sc.why = fmt.Sprintf("header cut short: %d of %d bytes", got, recHeaderSize)
			return sc, nil
		case err != nil:
			return scanned{}, fmt.Errorf("spool: reading %s at offset %d: %w", path, sc.end, err)
		}
		n, why := checkHeader(h[:])
		if why != "" {
			sc.why = why
			return sc, nil
		}
		if cap(data) < n {
			data = make([]byte, n)
		}
		data = data[:n]
		got, err = io.ReadFull(r, data)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			sc.why = fmt.Sprintf("payload cut short: %d of %d bytes", got, n)
			return sc, nil
		} else if err != nil {
			return scanned{}, fmt.Errorf("spool: reading %s at offset %d: %w", path, sc.end+recHeaderSize, err)
		}
		if why := checkRecord(h[:], data, want); why != "" {
			sc.why = why
			return sc, nil
		}
		sc.offsets = append(sc.offsets, sc.end)
		sc.end += int64(recHeaderSize + n)
	}
}
