// Package fencedstore is the release gate's fenced store: one cell per key
// holding a value and the fencing token of the last accepted write. A write
// is accepted only if its token is greater than the cell's fence, checked
// and applied in one statement, so a holder whose lock has passed to
// another cannot overwrite the newer holder's data.
//
// Two backends implement Store: PostgreSQL (OpenPostgres, prepared by
// SetupPostgres, with StartPostgres to run a throwaway local server) and an
// in-memory store that lives in the gate process and is served to the
// worker processes over HTTP (NewMemory, Memory.Handler, OpenHTTP).
//
// Either backend can run with fencing off, as a negative control: then every
// write to an existing key is accepted, a stale holder's included, and the
// checker must report a violation. The mode is fixed when the store is
// set up (SetupPostgres, NewMemory), never chosen by a worker.
//
// Errors tell a definite failure (the write was certainly not applied) from
// an unknown outcome (it may or may not have been applied): see IsUnknown.
package fencedstore

import (
	"context"
	"errors"
	"math"
)

// Store is a fenced store per key.
type Store interface {
	// Read returns the key's current fence and value.
	Read(ctx context.Context, key string) (fence uint64, value int64, err error)
	// Write stores value if tok is greater than the fence (fenced mode) and
	// reports whether it was accepted.
	Write(ctx context.Context, key string, tok uint64, value int64) (accepted bool, err error)
	// Close releases the store's connections.
	Close() error
}

// MaxToken is the largest token a store accepts: fences are stored in a
// PostgreSQL bigint.
const MaxToken = math.MaxInt64

var (
	// ErrUnknownOutcome marks an error after which the operation may or may
	// not have taken effect (a timeout or a lost connection after the request
	// may have been sent). IsUnknown reports it.
	ErrUnknownOutcome = errors.New("fencedstore: outcome unknown")
	// ErrTokenRange is returned for a token above MaxToken; nothing is sent.
	ErrTokenRange = errors.New("fencedstore: token out of range")
	// ErrUnknownKey is returned by the PostgreSQL store for a key that
	// SetupPostgres did not create.
	ErrUnknownKey = errors.New("fencedstore: unknown key")
	// ErrClosed is returned by a store after Close.
	ErrClosed = errors.New("fencedstore: closed")
	// ErrNotSetUp is returned by OpenPostgres when the database has no
	// store (SetupPostgres was not run).
	ErrNotSetUp = errors.New("fencedstore: database not set up")
	// ErrRequest is returned when the in-memory store's server rejected a
	// request as malformed; it was not applied.
	ErrRequest = errors.New("fencedstore: bad request")
)

// IsUnknown reports whether err leaves the operation's outcome unknown: the
// request may have reached the store and been applied. Any other non-nil
// error from a Store is a definite failure: the operation was not
// applied.
func IsUnknown(err error) bool {
	return errors.Is(err, ErrUnknownOutcome)
}
