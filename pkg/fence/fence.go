// Package fence holds the reference fences: code that makes a store reject a
// write whose lockd fencing token is not greater than the last token the
// store accepted for the same record, in the same atomic operation as the
// write.
//
// A fence is the only thing that enforces mutual exclusion. A holder that was
// paused (GC, SIGSTOP, a VM freeze) past its lease cannot be stopped by lockd
// or by a client-side check; it can only be refused by the store when its
// write lands. The references here are written to be copied into the code
// that owns a store:
//
//   - PostgreSQL ([Postgres]): a fence column per record, compared and set in
//     the one statement that writes the record ([PostgresWriteSQL]).
//   - S3-compatible stores ([S3]): the fence in the object's user metadata,
//     and a conditional PUT (If-Match on the ETag that was read, or
//     If-None-Match * for a new object) so that nothing written between the
//     read and the write is overwritten.
//
// What a reference guarantees: for one record, a write is accepted only if
// its token is strictly greater than every token accepted before, so a token
// writes a record at most once and a stale holder's write is rejected once a
// newer holder has written. What it does not guarantee: that a stale holder
// cannot write before the newer holder's first write (nothing can tell them
// apart then; the newer holder's write will land after it), that writes to
// different records are ordered, or anything about reads.
//
// [Open] builds a reference from a URL, for the pause-test kit. Package
// brokenfence holds fences that are wrong on purpose, for tests.
package fence

import (
	"context"
	"errors"
)

// ErrStale is returned when the resource rejected a write because its fence holds a token >= the one presented.
var ErrStale = errors.New("fence: rejected: stale token")

// ErrUnprotected is returned when a write presented token 0, the token of
// a grant lockd made without a quorum (a class with onQuorumLoss: open):
// such a grant excludes no other holder, so a fence accepts it for no
// record, not even a new one. It is a rejection: errors.Is(err, ErrStale)
// is true for it too.
var ErrUnprotected error = unprotected{}

type unprotected struct{}

func (unprotected) Error() string {
	return "fence: rejected: token 0 is an unprotected grant (made without quorum), which no fence accepts"
}

// Is makes ErrUnprotected a kind of ErrStale.
func (unprotected) Is(target error) bool { return target == ErrStale }

// Resource is a fenced store of string values by key, as the pause-test kit drives it.
type Resource interface {
	// Prepare is called when the holder has decided to write (after CanStart); the returned Write performs the write later.
	// Reference fences do nothing in Prepare; the broken "check then write" fence checks here.
	Prepare(ctx context.Context, key string, token uint64) (Write, error)
	// Read returns the value the resource holds for key now ("" and no error when absent).
	Read(ctx context.Context, key string) (string, error)
	// Describe names the resource for reports, e.g. "postgres table fence_demo" (never credentials).
	Describe() string
}

// Write performs a prepared write of value; ErrStale (wrapped) when the fence rejected it; any other error is not a rejection.
type Write func(ctx context.Context, value string) error
