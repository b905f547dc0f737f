package arbiter

import (
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/token"
)

// TestRetryRacingAnAdvanceGetsTheEpochItsTransactionCompared: a holder's
// retry reads its own hold in epoch 1; an epoch refresh lands before the
// answer is classified. The token must carry the epoch the transaction
// compared (1), never the one loaded since: an epoch-2 token for a hold
// the advance deleted would outrank every real epoch-2 grant's fence.
func TestRetryRacingAnAdvanceGetsTheEpochItsTransactionCompared(t *testing.T) {
	b, err := store.StartEmbedded(store.EmbeddedConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	set := class.NewSet(nil, nil)
	a, err := New(Config{Client: b.Client, Leases: b.Leases, KV: b.KV, Bootstrap: Bootstrap{FreshStore: true}}, NewPolicy(set))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.home.initEpoch(t.Context()); err != nil {
		t.Fatal(err)
	}
	sess, err := a.OpenSession(t.Context(), identity.Caller{Kind: identity.KindWorkload, ID: "spiffe://t/alice"}, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	key := "t/race"
	h := a.encodeHold("spiffe://t/alice", sess, &class.Class{Namespace: "t", Name: "std"})
	first, err := a.home.tryGrant(t.Context(), key, h, sess, linePos{})
	if err != nil || !first.granted {
		t.Fatalf("grant: %+v %v", first, err)
	}
	// The retry's transaction runs in epoch 1 and sees the session's hold.
	retry, err := a.home.tryGrant(t.Context(), key, h, sess, linePos{})
	if err != nil || retry.granted {
		t.Fatalf("retry: %+v %v", retry, err)
	}
	// Then the refresh installs epoch 2 (another arbiter advanced).
	st := *a.home.epoch.Load()
	st.epoch, st.modRev = 2, st.modRev+1000
	a.home.epoch.Store(&st)
	g, mine, err := a.classify(retry, "spiffe://t/alice", sess)
	if err != nil || !mine {
		t.Fatalf("classify: %v mine %v", err, mine)
	}
	if e, _ := token.Unpack(g.Token); e != 1 || g.Epoch != 1 {
		t.Fatalf("the retry's token carries epoch %d (Epoch %d); its transaction compared epoch 1", e, g.Epoch)
	}
	if g.Token != first.grant.Token {
		t.Fatalf("retry token %d, grant token %d", g.Token, first.grant.Token)
	}
}
