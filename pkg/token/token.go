// Package token packs and unpacks fencing tokens.
//
// A token is epoch<<48 | revision, where revision is the etcd revision at
// which the grant transaction committed and epoch is the store epoch the
// transaction compared. Tokens strictly increase per key and are never reused,
// including across a restore, because a restored store must advance its epoch
// before it grants again.
//
// A token orders grants. It protects a resource only where that resource
// compares it on its own write (a fenced class); it cannot stop a paused
// holder from acting on an unfenced (advisory) resource.
package token

import (
	"errors"
	"fmt"
)

const (
	// RevisionBits is the width of the revision part.
	RevisionBits = 48
	// MaxEpoch is the largest epoch: epochs stay below 2^15 so every token is
	// positive in a signed 64-bit column.
	MaxEpoch = 1<<15 - 1
	// MaxRevision is the largest revision a token can carry.
	MaxRevision = 1<<RevisionBits - 1
)

// ErrOutOfRange reports an epoch or revision that does not fit a token.
var ErrOutOfRange = errors.New("token: out of range")

// Pack returns epoch<<48 | revision. It fails when the epoch is 0 or above
// MaxEpoch, or the revision is not in 1..MaxRevision.
func Pack(epoch uint32, revision int64) (uint64, error) {
	if epoch == 0 || epoch > MaxEpoch {
		return 0, fmt.Errorf("%w: epoch %d not in 1..%d", ErrOutOfRange, epoch, MaxEpoch)
	}
	if revision <= 0 || revision > MaxRevision {
		return 0, fmt.Errorf("%w: revision %d not in 1..%d", ErrOutOfRange, revision, int64(MaxRevision))
	}
	return uint64(epoch)<<RevisionBits | uint64(revision), nil
}

// Unpack splits a token into its epoch and revision.
func Unpack(t uint64) (epoch uint32, revision int64) {
	return uint32(t >> RevisionBits), int64(t & MaxRevision)
}
