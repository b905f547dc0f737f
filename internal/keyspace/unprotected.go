package keyspace

import (
	"encoding/json"
	"fmt"
)

// UnprotectedPrefix + arbiter ID + "/" + 16 hex digits of a sequence number
// is an unprotected grant: one an arbiter made from memory, without a
// quorum, for a class with onQuorumLoss: open, and shipped from its spool
// when quorum returned (see UnprotectedKey). Shipping puts the key only if
// it is absent, so shipping again changes nothing; the audit tailer turns
// its creation into a history row with unprotected=true.
const UnprotectedPrefix = SysPrefix + "unprotected/"

// UnprotectedKey is the key an unprotected grant is shipped to: one per
// (arbiter, sequence number), so shipping is idempotent.
func UnprotectedKey(arbiter string, seq uint64) string {
	return UnprotectedPrefix + arbiter + "/" + fmt.Sprintf("%016x", seq)
}

// Unprotected is an unprotected grant, as an arbiter's spool and its
// shipped key hold it.
type Unprotected struct {
	// Arbiter is the granting arbiter's ID; Seq the grant's number in its
	// spool.
	Arbiter string `json:"arbiter"`
	Seq     uint64 `json:"seq"`
	// Key is the lock key, Class "namespace/name".
	Key   string `json:"key"`
	Class string `json:"class"`
	// Identity and Session are the holder and its session (one the arbiter
	// opened without a quorum).
	Identity string `json:"id"`
	Session  int64  `json:"session"`
	// AcquiredAt is the arbiter's clock at the grant (unix nanos); TTL the
	// class TTL in seconds: the hold lasted at most until its session
	// stopped being kept alive for a TTL, or quorum returned.
	AcquiredAt int64 `json:"at"`
	TTL        int64 `json:"ttl"`
}

// DecodeUnprotected parses an unprotected grant record.
func DecodeUnprotected(v []byte) (Unprotected, error) {
	var u Unprotected
	if err := json.Unmarshal(v, &u); err != nil {
		return u, fmt.Errorf("unprotected grant record: %w", err)
	}
	if u.Arbiter == "" || u.Seq == 0 || u.Key == "" {
		return u, fmt.Errorf("unprotected grant record: arbiter, seq and key are required")
	}
	return u, nil
}
