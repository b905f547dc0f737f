package archive

import (
	"bytes"
	"fmt"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/lockd-dev/lockd/internal/audit"
)

// Row is one audit.Event as a flat Parquet row: one column per Event field,
// times and the duration as int64 nanoseconds (times since the Unix epoch,
// a zero time as 0), the kind as its string.
type Row struct {
	ClusterID       uint64 `parquet:"cluster_id"`
	Epoch           uint32 `parquet:"epoch"`
	Revision        int64  `parquet:"revision"`
	Key             string `parquet:"key"`
	Kind            string `parquet:"kind"`
	Class           string `parquet:"class"`
	ObservedAt      int64  `parquet:"observed_at_unix_nanos"`
	Holder          string `parquet:"holder"`
	Session         int64  `parquet:"session"`
	Token           uint64 `parquet:"token"`
	AcquiredAt      int64  `parquet:"acquired_at_unix_nanos"`
	EndedHolder     string `parquet:"ended_holder"`
	EndedSession    int64  `parquet:"ended_session"`
	EndedToken      uint64 `parquet:"ended_token"`
	EndedAcquiredAt int64  `parquet:"ended_acquired_at_unix_nanos"`
	DurationNanos   int64  `parquet:"duration_nanos"`
	Requester       string `parquet:"requester"`
	Approver        string `parquet:"approver"`
	Reason          string `parquet:"reason"`
	FromEpoch       uint32 `parquet:"from_epoch"`
	ToEpoch         uint32 `parquet:"to_epoch"`
	GapFrom         int64  `parquet:"gap_from"`
	GapTo           int64  `parquet:"gap_to"`
	Unprotected     bool   `parquet:"unprotected"`
	Arbiter         string `parquet:"arbiter"`
	SpoolSeq        uint64 `parquet:"spool_seq"`
}

// rowSchema is the schema every archive file must have.
var rowSchema = parquet.SchemaOf(Row{})

// RowOf converts an event to its Parquet row.
func RowOf(e audit.Event) Row {
	return Row{
		ClusterID:       e.ClusterID,
		Epoch:           e.Epoch,
		Revision:        e.Revision,
		Key:             e.Key,
		Kind:            string(e.Kind),
		Class:           e.Class,
		ObservedAt:      unixNanos(e.ObservedAt),
		Holder:          e.Holder,
		Session:         e.Session,
		Token:           e.Token,
		AcquiredAt:      unixNanos(e.AcquiredAt),
		EndedHolder:     e.EndedHolder,
		EndedSession:    e.EndedSession,
		EndedToken:      e.EndedToken,
		EndedAcquiredAt: unixNanos(e.EndedAcquiredAt),
		DurationNanos:   int64(e.Duration),
		Requester:       e.Requester,
		Approver:        e.Approver,
		Reason:          e.Reason,
		FromEpoch:       e.FromEpoch,
		ToEpoch:         e.ToEpoch,
		GapFrom:         e.GapFrom,
		GapTo:           e.GapTo,
		Unprotected:     e.Unprotected,
		Arbiter:         e.Arbiter,
		SpoolSeq:        e.SpoolSeq,
	}
}

// Event converts the row back to an event; times are in UTC.
func (r Row) Event() audit.Event {
	return audit.Event{
		ClusterID:       r.ClusterID,
		Epoch:           r.Epoch,
		Revision:        r.Revision,
		Key:             r.Key,
		Kind:            audit.Kind(r.Kind),
		Class:           r.Class,
		ObservedAt:      fromUnixNanos(r.ObservedAt),
		Holder:          r.Holder,
		Session:         r.Session,
		Token:           r.Token,
		AcquiredAt:      fromUnixNanos(r.AcquiredAt),
		EndedHolder:     r.EndedHolder,
		EndedSession:    r.EndedSession,
		EndedToken:      r.EndedToken,
		EndedAcquiredAt: fromUnixNanos(r.EndedAcquiredAt),
		Duration:        time.Duration(r.DurationNanos),
		Requester:       r.Requester,
		Approver:        r.Approver,
		Reason:          r.Reason,
		FromEpoch:       r.FromEpoch,
		ToEpoch:         r.ToEpoch,
		GapFrom:         r.GapFrom,
		GapTo:           r.GapTo,
		Unprotected:     r.Unprotected,
		Arbiter:         r.Arbiter,
		SpoolSeq:        r.SpoolSeq,
	}
}

// unixNanos is t in nanoseconds since the Unix epoch, 0 for the zero time
// (whose UnixNano is out of int64's range).
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// encodeParquet writes rows as one Parquet file in memory.
func encodeParquet(rows []Row) ([]byte, error) {
	var buf bytes.Buffer
	if err := parquet.Write(&buf, rows, parquet.Compression(&zstd.Codec{}), parquet.CreatedBy("lockd-audit-archive", "", "")); err != nil {
		return nil, fmt.Errorf("%w: encode: %v", ErrEncode, err)
	}
	return buf.Bytes(), nil
}

// verifyParquet reads data back as a Parquet file and checks that it is the
// file of want: the footer parses, its row count is len(want), its columns
// are Row's (names, types, repetition, in order), and every row decodes to
// the row of want at its position. A file that fails any check must not be
// uploaded.
func verifyParquet(data []byte, want []Row) error {
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Errorf("%w: footer: %v", ErrVerify, err)
	}
	if n := f.NumRows(); n != int64(len(want)) {
		return fmt.Errorf("%w: footer says %d rows, %d were written", ErrVerify, n, len(want))
	}
	if err := sameColumns(f.Schema(), rowSchema); err != nil {
		return err
	}
	got, err := parquet.Read[Row](bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Errorf("%w: rows: %v", ErrVerify, err)
	}
	if len(got) != len(want) {
		return fmt.Errorf("%w: %d rows decode, %d were written", ErrVerify, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("%w: row %d decodes as %+v, %+v was written", ErrVerify, i, got[i], want[i])
		}
	}
	return nil
}

// sameColumns reports whether got has exactly want's leaf columns.
func sameColumns(got, want *parquet.Schema) error {
	g, w := got.Fields(), want.Fields()
	if len(g) != len(w) {
		return fmt.Errorf("%w: schema has %d columns, want %d (%s)", ErrVerify, len(g), len(w), got)
	}
	for i := range w {
		if g[i].Name() != w[i].Name() ||
			g[i].Type().String() != w[i].Type().String() ||
			g[i].Optional() != w[i].Optional() || g[i].Repeated() != w[i].Repeated() {
			return fmt.Errorf("%w: column %d is %s %s, want %s %s", ErrVerify, i,
				g[i].Name(), g[i].Type(), w[i].Name(), w[i].Type())
		}
	}
	return nil
}
