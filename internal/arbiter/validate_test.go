package arbiter_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestValidateToken: the current token is valid; an older token of the same
// key, a token of a released hold and a token of an earlier epoch are not;
// after an epoch advance a newly granted token is valid.
func TestValidateToken(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	bob, _ := env.Raw(t, lockdtest.Bob)
	sa := openSession(t, alice, 15*time.Second)
	sb := openSession(t, bob, 15*time.Second)
	validate := func(lc lockv1.LockServiceClient, tok uint64) *lockv1.ValidateTokenResponse {
		t.Helper()
		r, err := lc.ValidateToken(t.Context(), &lockv1.ValidateTokenRequest{Key: "t/validate", Token: tok})
		if err != nil {
			t.Fatalf("ValidateToken: %v", err)
		}
		return r
	}
	want := func(r *lockv1.ValidateTokenResponse, state lockv1.TokenState) {
		t.Helper()
		if r.GetState() != state || r.GetValid() != (state == lockv1.TokenState_TOKEN_STATE_CURRENT) {
			t.Fatalf("got valid=%v state=%v, want %v", r.GetValid(), r.GetState(), state)
		}
	}

	first, err := acquire(t.Context(), alice, sa, "t/validate", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	tokA := first.GetToken().GetValue()
	r := validate(bob, tokA) // any identity that may read the key may ask
	want(r, lockv1.TokenState_TOKEN_STATE_CURRENT)
	if r.GetEpoch() != 1 || r.GetReadRevision() < first.GetToken().GetRevision() {
		t.Fatalf("epoch %d read revision %d, want 1 and >= %d", r.GetEpoch(), r.GetReadRevision(), first.GetToken().GetRevision())
	}
	if _, err := alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sa, Key: "t/validate", Token: tokA}); err != nil {
		t.Fatal(err)
	}
	want(validate(alice, tokA), lockv1.TokenState_TOKEN_STATE_NOT_HELD)

	second, err := acquire(t.Context(), bob, sb, "t/validate", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	tokB := second.GetToken().GetValue()
	want(validate(alice, tokA), lockv1.TokenState_TOKEN_STATE_SUPERSEDED) // the older token
	want(validate(alice, tokB), lockv1.TokenState_TOKEN_STATE_CURRENT)
	want(validate(alice, tokB+1), lockv1.TokenState_TOKEN_STATE_SUPERSEDED) // never this key's

	// A caller that may not read the key learns nothing.
	carol, _ := env.Raw(t, lockdtest.Carol)
	if _, err := carol.ValidateToken(t.Context(), &lockv1.ValidateTokenRequest{Key: "t/validate", Token: tokB}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ungranted caller: %v, want PermissionDenied", err)
	}
	if _, err := alice.ValidateToken(t.Context(), &lockv1.ValidateTokenRequest{Key: "t//bad", Token: tokB}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad key: %v, want InvalidArgument", err)
	}

	// The epoch advances: bob's token (epoch 1) is no longer valid, even
	// though his hold is still in the store until his session is fenced.
	env.AdvanceEpoch(t, 1, "validate-token test")
	want(validate(alice, tokB), lockv1.TokenState_TOKEN_STATE_OTHER_EPOCH)
	if _, err := bob.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sb, Key: "t/validate", Token: tokB}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("release with an old-epoch token: %v", err)
	}
	if _, err := bob.CloseSession(t.Context(), &lockv1.CloseSessionRequest{SessionId: sb}); err != nil {
		t.Fatal(err)
	}
	// New grants wait out the grace period (the longest class TTL, longer
	// than alice's session lives without keepalives: she opens a new one).
	var third *lockv1.AcquireResponse
	for {
		third, err = acquire(t.Context(), alice, openSession(t, alice, 15*time.Second), "t/validate", "std", 0)
		if !errors.Is(client.Decode(err), client.ErrEpochGrace) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	if third.GetToken().GetEpoch() != 2 {
		t.Fatalf("new grant in epoch %d, want 2", third.GetToken().GetEpoch())
	}
	r = validate(bob, third.GetToken().GetValue())
	want(r, lockv1.TokenState_TOKEN_STATE_CURRENT)
	if r.GetEpoch() != 2 {
		t.Fatalf("answer epoch %d, want 2", r.GetEpoch())
	}
	want(validate(bob, tokB), lockv1.TokenState_TOKEN_STATE_OTHER_EPOCH)
}
