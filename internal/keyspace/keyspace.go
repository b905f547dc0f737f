// Package keyspace is lockd's layout in etcd: the key prefixes and the
// records the arbiter writes under them. The arbiter writes them; the audit
// tailer reads them back from the watch, so both go through this package.
package keyspace

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Key layout.
const (
	// HoldPrefix + lock key is a hold, on its session's lease.
	HoldPrefix = "/l/"
	// QueuePrefix + lock key + QueueSep + hex session is a durable waiter,
	// on its session's lease (see QueueKey).
	QueuePrefix = "/q/"
	// QueueSep ends the lock key in a waiter's key. A lock key cannot
	// contain it, so one key's waiters are never in the range of another
	// key that extends it ("a/b" and "a/b/c").
	QueueSep = "#"
	// SessionPrefix + hex lease ID is a session record, on its lease.
	SessionPrefix = "/s/"
	// ClusterSessionPrefix + hex session ID is a session's record on an etcd
	// cluster other than the coord tier's, on the session's lease there
	// (see ClusterSessionKey). The holds the session has on that cluster
	// are on that lease.
	ClusterSessionPrefix = "/ss/"
	// SysPrefix holds the epoch, its requests and grace, force requests and
	// records, and the audit tailer's election and checkpoints.
	SysPrefix = "/sys/"
	// EpochKey is the epoch record.
	EpochKey = "/sys/epoch"
	// GraceKey exists from an epoch advance until every old holder is
	// fenced.
	GraceKey = "/sys/epoch-grace"
	// OpenGracePrefix + arbiter ID exists, on a lease, from the moment an
	// arbiter that granted unprotected holds (its open posture) sees quorum
	// again until each of those holders has lost its lock by its deadline:
	// no key of a class open on quorum loss is granted meanwhile. It lies
	// under GraceKey so that one range compare covers both graces.
	OpenGracePrefix = GraceKey + "/open/"
	// AllocatedEpochKey, on the coord tier's cluster, is the highest epoch
	// allocated to any cluster (decimal): an advance of any cluster first
	// moves it to its target, so no two clusters ever use one epoch.
	AllocatedEpochKey = "/sys/allocated-epoch"
	// ForceRecordPrefix + request ID is an approved force-release, written
	// in the transaction that deletes the hold.
	ForceRecordPrefix = "/sys/force/"
	// ShardMapKey, on the coord tier's cluster, is the entity tier's shard
	// map (internal/shardmap), JSON; absent until one is written.
	ShardMapKey = "/sys/shardmap"
	// ShardVersionKey, on each entity shard, is the shard map version the
	// shard serves (decimal; absent for version 0, the implicit map). Every
	// grant on a shard compares it with the version the arbiter routed by,
	// so an arbiter whose map is behind never grants there.
	ShardVersionKey = "/sys/shardmap-version"
	// ShardMapCopyKey, on each entity shard, is a copy of the map whose
	// version the shard serves: a coord cluster restored or rebuilt gets
	// its map back from it.
	ShardMapCopyKey = "/sys/shardmap-copy"
	// RangeOutPrefix + range (a key prefix ending in "/"), on an entity
	// shard, marks a range being moved away: no grant and no new waiter for
	// a key in it is made on the shard while it exists.
	RangeOutPrefix = "/sys/range-out/"
	// AuditPrefix is the audit tailer's own state (election, checkpoints);
	// the tailer ignores changes under it.
	AuditPrefix = "/sys/audit/"
)

// OpenGraceKey is the etcd key of arbiter's open grace.
func OpenGraceKey(arbiter string) string { return OpenGracePrefix + arbiter }

// RangeOutKey is the etcd key that marks range as being moved away from
// the shard it is on.
func RangeOutKey(rng string) string { return RangeOutPrefix + rng }

// HoldKey is the etcd key of lock key's hold.
func HoldKey(key string) string { return HoldPrefix + key }

// SessionKey is the etcd key of session id's record.
func SessionKey(id int64) string { return SessionPrefix + strconv.FormatInt(id, 16) }

// ClusterSessionKey is the etcd key of session id's record on a cluster
// other than the coord tier's. One exists per session and cluster, so every
// arbiter finds the same lease for it.
func ClusterSessionKey(id int64) string { return ClusterSessionPrefix + strconv.FormatInt(id, 16) }

// SessionID parses a session key; ok is false for any other key.
func SessionID(k string) (int64, bool) { return idAfter(k, SessionPrefix) }

// ClusterSessionID parses a ClusterSessionKey into the session it extends;
// ok is false for any other key.
func ClusterSessionID(k string) (int64, bool) { return idAfter(k, ClusterSessionPrefix) }

func idAfter(k, prefix string) (int64, bool) {
	rest, ok := strings.CutPrefix(k, prefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(rest, 16, 64)
	return int64(id), err == nil
}

// QueueKey is the etcd key of session's durable waiter for lock key. Its
// create revision is the waiter's place in line.
func QueueKey(key string, session int64) string {
	return QueueRange(key) + strconv.FormatInt(session, 16)
}

// QueueRange is the prefix of every durable waiter for lock key.
func QueueRange(key string) string { return QueuePrefix + key + QueueSep }

// Waiter is a durable waiter's record.
type Waiter struct {
	Identity string `json:"id"`
	Session  int64  `json:"session"`
	Class    string `json:"class"` // "namespace/name"
	// QueuedAt is when it first joined the line and Deadline when its
	// current wait ends (unix nanos, the arbiter's clock). A waiter whose
	// deadline has long passed was abandoned by a caller that is still
	// alive (its session is); an arbiter may remove it so the line moves.
	// Clocks decide only when a stale waiter goes, never a grant.
	QueuedAt int64 `json:"at"`
	Deadline int64 `json:"deadline"`
}

// DecodeWaiter decodes a durable waiter's record.
func DecodeWaiter(v []byte) (Waiter, error) {
	var w Waiter
	if err := json.Unmarshal(v, &w); err != nil {
		return w, fmt.Errorf("waiter record: %w", err)
	}
	return w, nil
}

// Hold is a hold's record. Its key's mod revision is the grant's commit
// revision (the token's low bits); its lease is the session.
type Hold struct {
	Identity   string `json:"id"`
	Session    int64  `json:"session"`
	Class      string `json:"class"` // "namespace/name"
	AcquiredAt int64  `json:"at"`    // unix nanos, the granting arbiter's clock
}

// Encode is the record's value: exactly what json.Marshal makes of it, made
// without reflection (every grant writes one).
func (h Hold) Encode() string {
	b := make([]byte, 0, 48+len(h.Identity)+len(h.Class))
	b = append(b, `{"id":`...)
	b = appendJSONString(b, h.Identity)
	b = append(b, `,"session":`...)
	b = strconv.AppendInt(b, h.Session, 10)
	b = append(b, `,"class":`...)
	b = appendJSONString(b, h.Class)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, h.AcquiredAt, 10)
	b = append(b, '}')
	return string(b)
}

// appendJSONString appends s as encoding/json writes a string: printable
// ASCII other than the characters it escapes is copied; anything else goes
// through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Session is a session's record.
type Session struct {
	Identity  string `json:"id"`
	TTL       int64  `json:"ttl"` // seconds
	Namespace string `json:"ns,omitempty"`
	OpenedAt  int64  `json:"at"` // unix nanos
	// Closing is set, in a write just before the lease is revoked, when a
	// holder closes its session on purpose: a session key deleted with it
	// set was closed; without it, the lease lapsed (an expiry).
	Closing bool `json:"closing,omitempty"`
	// Session, in a record under ClusterSessionPrefix, is the session (its
	// lease on the coord tier's cluster) this lease extends.
	Session int64 `json:"session,omitempty"`
}

// Epoch is the epoch record.
type Epoch struct {
	Epoch     uint32 `json:"epoch"`
	ClusterID string `json:"clusterID"` // hex, so no JSON reader rounds it
}

// Force is what an approved force-release leaves under ForceRecordPrefix
// (the fields the history needs; the arbiter writes more).
type Force struct {
	ID            string    `json:"id"`
	Key           string    `json:"key"`
	Holder        string    `json:"holder"`
	Session       int64     `json:"session"`
	HoldRevision  int64     `json:"holdRevision"`
	Requester     string    `json:"requester"`
	Reason        string    `json:"reason"`
	RevokeSession bool      `json:"revokeSession"`
	Approver      string    `json:"approver"`
	ApprovedAt    time.Time `json:"approvedAt"`
	// Home is the session Session's lease stands for when Session is its
	// lease on a cluster other than the coord tier's (ClusterSessionKey).
	Home int64 `json:"home,omitempty"`
	// RevokeOnly: the record a revoke leaves on a cluster other than the
	// forced hold's. It released no hold of Key there; it says why the
	// session's holds there end.
	RevokeOnly bool `json:"revokeOnly,omitempty"`
}

// DecodeHold decodes a hold record.
func DecodeHold(v []byte) (Hold, error) {
	var h Hold
	if err := json.Unmarshal(v, &h); err != nil {
		return h, fmt.Errorf("hold record: %w", err)
	}
	return h, nil
}

// DecodeSession decodes a session record.
func DecodeSession(v []byte) (Session, error) {
	var s Session
	if err := json.Unmarshal(v, &s); err != nil {
		return s, fmt.Errorf("session record: %w", err)
	}
	return s, nil
}

// DecodeEpoch decodes an epoch record: the epoch and its cluster ID.
func DecodeEpoch(v []byte) (uint32, uint64, error) {
	var r Epoch
	if err := json.Unmarshal(v, &r); err != nil {
		return 0, 0, fmt.Errorf("epoch record: %w", err)
	}
	id, err := strconv.ParseUint(r.ClusterID, 16, 64)
	if err != nil || r.Epoch == 0 {
		return 0, 0, fmt.Errorf("epoch record %q is malformed", v)
	}
	return r.Epoch, id, nil
}

// DecodeForce decodes a force record.
func DecodeForce(v []byte) (Force, error) {
	var f Force
	if err := json.Unmarshal(v, &f); err != nil {
		return f, fmt.Errorf("force record: %w", err)
	}
	return f, nil
}
