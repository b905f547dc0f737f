package arbiter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/tracing"
	"github.com/lockd-dev/lockd/pkg/lockkey"
	"github.com/lockd-dev/lockd/pkg/token"
)

// TokenState says why a token is or is not the current grant's.
type TokenState int

// Token states.
const (
	// TokenCurrent: the key is held with this token.
	TokenCurrent TokenState = iota + 1
	// TokenSuperseded: the key is held under another token.
	TokenSuperseded
	// TokenNotHeld: nobody holds the key.
	TokenNotHeld
	// TokenOtherEpoch: the token was minted in another epoch.
	TokenOtherEpoch
)

// String names the state for logs and metrics.
func (s TokenState) String() string {
	switch s {
	case TokenCurrent:
		return "current"
	case TokenSuperseded:
		return "superseded"
	case TokenNotHeld:
		return "not_held"
	case TokenOtherEpoch:
		return "other_epoch"
	}
	return "unknown"
}

// TokenCheck is the answer of ValidateToken.
type TokenCheck struct {
	// State is why the token is or is not current.
	State TokenState
	// Epoch is the current epoch.
	Epoch uint32
	// ReadRevision is the store revision the answer was read at.
	ReadRevision int64
}

// Valid reports whether the token was the current grant's when read.
func (c TokenCheck) Valid() bool { return c.State == TokenCurrent }

// Default ValidateToken limits per identity.
const (
	// DefaultValidateRate is the sustained ValidateToken calls per second
	// allowed to one identity.
	DefaultValidateRate = 50
	// DefaultValidateBurst is the burst allowed to one identity.
	DefaultValidateBurst = 100
)

// validateLimits are per-identity token buckets for ValidateToken, kept
// apart from grants so that a resource validating every write cannot starve
// its own callers' acquires, and the other way round.
type validateLimits struct {
	rate  rate.Limit
	burst int

	mu   sync.Mutex
	byID map[string]*identityLimit
}

type identityLimit struct {
	lim  *rate.Limiter
	used time.Time
}

// maxTrackedIdentities bounds the limiter map; idle entries are dropped
// when it is reached (identities are authenticated, so the map only grows
// with real workloads).
const maxTrackedIdentities = 10000

func (l *validateLimits) allow(identity string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID == nil {
		l.byID = make(map[string]*identityLimit)
	}
	il := l.byID[identity]
	if il == nil {
		if len(l.byID) >= maxTrackedIdentities {
			for id, e := range l.byID {
				if now.Sub(e.used) > time.Minute {
					delete(l.byID, id)
				}
			}
		}
		il = &identityLimit{lim: rate.NewLimiter(l.rate, l.burst)}
		l.byID[identity] = il
	}
	il.used = now
	return il.lim.AllowN(now, 1)
}

// ValidateToken reports whether tok is the current grant's token for key,
// by a linearizable read of the hold and the epoch record in one etcd
// transaction. The answer is NOT atomic with anything the caller does next:
// the hold can be released, expire or be re-granted right after the read.
// A resource that can store a fence should compare tokens in its own
// conditional write instead.
//
// The caller must be allowed to read the key (an operator, or an identity
// granted a prefix of it). Calls are rate-limited per identity (ErrRateLimited).
func (a *Arbiter) ValidateToken(ctx context.Context, caller identity.Caller, key string, tok uint64) (c TokenCheck, err error) {
	who := caller.String()
	ns := "-" // a namespace label only once the caller may read the key: labels stay bounded
	defer func() {
		a.metrics.observeValidate(ns, c, err)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(tracing.AttrNamespace.String(ns))
			if err == nil {
				span.SetAttributes(tracing.AttrTokenState.String(c.State.String()))
			}
		}
		if a.log.Enabled(ctx, slog.LevelDebug) {
			a.log.Debug("token validated", "key", key, "caller", who, "state", c.State.String(), "err", err)
		}
	}()
	if err := lockkey.Validate(key); err != nil {
		return TokenCheck{}, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if !a.mayRead(caller, key) {
		return TokenCheck{}, authz.ErrDenied
	}
	ns = lockkey.Namespace(key)
	if err := a.homeCheck(key); err != nil {
		return TokenCheck{}, err
	}
	if !a.validate.allow(who, a.now()) {
		return TokenCheck{}, ErrRateLimited
	}
	att, err := a.cellOfToken(key, tok).readHold(ctx, holdKey(key), false)
	if err != nil {
		return TokenCheck{}, err
	}
	c = TokenCheck{Epoch: att.epoch, ReadRevision: att.rev}
	ep, rev := token.Unpack(tok)
	switch {
	case ep != att.epoch:
		c.State = TokenOtherEpoch
	case att.holderLease == 0:
		c.State = TokenNotHeld
	case att.holderModRev != rev:
		c.State = TokenSuperseded
	default:
		c.State = TokenCurrent
	}
	return c, nil
}
