// Package audit is lockd's history: a tailer per etcd cluster that watches
// the whole lock key space from its last checkpoint and stores one row per
// change of a key, keyed by the log's own position, in a Sink.
//
// A row is a transition of one key at one revision: a hold started (a
// grant), ended (a release, an expiry, a session close, a force-release, an
// epoch advance), or both (a handoff). Expiries are committed by etcd
// itself, so only a tailer sees them. Denials are not in the log and not in
// the history. A grant an arbiter made without a quorum (an unprotected
// grant) is recorded when it is shipped to etcd, after quorum returned.
package audit

import (
	"context"
	"errors"
	"time"
)

// Kind is what happened to a key at a revision.
type Kind string

// Kinds of rows.
const (
	// KindGrant: a hold started (nobody held the key before).
	KindGrant Kind = "grant"
	// KindRelease: the holder released it.
	KindRelease Kind = "release"
	// KindHandoff: one transaction released the holder and granted the next
	// waiter: the row carries both holds.
	KindHandoff Kind = "handoff"
	// KindExpiry: the holder's session lease lapsed and etcd deleted its
	// holds (nobody released them).
	KindExpiry Kind = "expiry"
	// KindSessionClose: the holder closed its session on purpose, ending
	// its holds (lockd marks the session record closing first).
	KindSessionClose Kind = "session-close"
	// KindForceRelease: two operators released it by force (the force
	// record committed in the same revision names them and the reason).
	KindForceRelease Kind = "force-release"
	// KindEpochAdvance: an epoch advance. Its own row has Key EpochKey and
	// the epochs; each hold it deleted has a row of this kind too.
	KindEpochAdvance Kind = "epoch-advance"
	// KindGap: revisions [GapFrom, GapTo] are not in the history (etcd
	// compacted them before the tailer read them, or the store lost them).
	KindGap Kind = "gap"
	// KindUnprotected: a grant an arbiter made from memory while it had no
	// etcd quorum (a class with onQuorumLoss: open), shipped from its spool
	// when quorum returned. Revision is the shipping revision, not the
	// grant's; AcquiredAt is the arbiter's clock at the grant; Token is 0
	// (every fence rejects it). Another holder may have held the key at the
	// same time. Its end is not recorded: the hold lasted at most until its
	// session lapsed or quorum returned.
	KindUnprotected Kind = "unprotected-grant"
	// KindMove: a shard plan moving a range that had holds or waiters took
	// a step: the range was closed on its old shard to drain (draining),
	// served on its new shard (settling, or done), or the plan failed. Key
	// is the range (a prefix ending in "/"); Requester and Approver are the
	// plan's operators; Reason says the plan, the step, the shards and why.
	// It starts and ends no hold: a hold the drain ended at its bound has
	// its own force-release row on the old shard.
	KindMove Kind = "shard-move"
)

// Kinds is every kind of row, in the order the docs list them.
var Kinds = []Kind{KindGrant, KindRelease, KindHandoff, KindExpiry, KindSessionClose, KindForceRelease,
	KindEpochAdvance, KindGap, KindUnprotected, KindMove}

// EpochKey is the Key of an epoch advance's own row.
const EpochKey = "/sys/epoch"

// Event is one row of the history. Its identity is (ClusterID, Epoch,
// Revision, Key): one revision can carry many rows (a session's holds
// expiring together), never two for one key. The epoch is part of the
// identity because a store rebuilt empty keeps its cluster ID and starts
// its revisions again; its epoch is always higher.
type Event struct {
	ClusterID uint64
	// Epoch is the epoch in force after the revision.
	Epoch    uint32
	Revision int64
	// Key is the lock key (without lockd's /l/ prefix); EpochKey for an
	// advance's own row; empty for a gap; the record's own etcd key (under
	// keyspace.UnprotectedPrefix) for an unprotected grant whose record did
	// not decode.
	Key  string
	Kind Kind
	// Class is the hold's class, "namespace/name".
	Class string
	// ObservedAt is when the tailer read the revision: etcd keeps no commit
	// times, so an end event's time is the tailer's, late by its lag.
	ObservedAt time.Time

	// The hold that started here (grant, handoff, unprotected-grant).
	Holder     string
	Session    int64
	Token      uint64
	AcquiredAt time.Time // the granting arbiter's clock

	// The hold that ended here (every kind but grant and gap).
	EndedHolder     string
	EndedSession    int64
	EndedToken      uint64
	EndedAcquiredAt time.Time
	// Duration is how long the ended hold lasted: ObservedAt less its
	// acquisition.
	Duration time.Duration

	// A force-release's two operators and reason.
	Requester string
	Approver  string
	Reason    string

	// An epoch advance's own row.
	FromEpoch uint32
	ToEpoch   uint32

	// A gap: the revisions missing, inclusive.
	GapFrom int64
	GapTo   int64

	// Unprotected is true on a KindUnprotected row: the hold that started
	// was granted without a quorum, with token 0.
	Unprotected bool
	// Arbiter is the ID of the lockd arbiter that made an unprotected
	// grant, and SpoolSeq the grant's number in that arbiter's spool: the
	// pair names the grant (keyspace.UnprotectedKey).
	Arbiter  string
	SpoolSeq uint64
}

// Filter selects rows. Zero fields do not filter.
type Filter struct {
	ClusterID uint64
	// Key is a lock key, or a prefix when it ends in "/".
	Key string
	// Since and Until bound ObservedAt: Since <= ObservedAt < Until.
	Since, Until time.Time
	// FromRevision and ToRevision bound Revision, inclusive.
	FromRevision, ToRevision int64
	// Identity matches the started or the ended holder.
	Identity string
	Class    string
	Kinds    []Kind
	// Limit caps the rows returned (the oldest first); 0 is no cap.
	Limit int
}

// ClassStats is one class's history over a window.
type ClassStats struct {
	Class string // "namespace/name"
	// Grants counts holds started (grants and handoffs); Expiries holds
	// ended by an expiry (nobody released them); Forced by a force-release.
	Grants, Expiries, Forced int64
	// Longest is the longest hold that ended in the window.
	Longest time.Duration
}

// Sink stores rows.
type Sink interface {
	// Write stores rows idempotently: a row whose identity is stored
	// already changes nothing that Query returns. It returns only once
	// every row is durable; on error any subset may be stored.
	Write(ctx context.Context, rows []Event) error
	// Query returns the rows matching f, ordered by cluster, epoch,
	// revision and key, each identity once.
	Query(ctx context.Context, f Filter) ([]Event, error)
	// Stats aggregates the rows observed in [since, until) per class
	// (zero times do not bound), sorted by class.
	Stats(ctx context.Context, since, until time.Time) ([]ClassStats, error)
	Close() error
}

// Errors.
var (
	ErrConfig = errors.New("audit: invalid configuration")
	// ErrSink: the sink failed; the tailer retries and never skips a row.
	ErrSink = errors.New("audit: sink")
	// ErrDeposed: another tailer was elected; this one stopped.
	ErrDeposed = errors.New("audit: deposed")
)
