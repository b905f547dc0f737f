package inspect

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func hold(key string, age time.Duration, token *lockv1.Token) *lockv1.Hold {
	return &lockv1.Hold{
		Key: key, Holder: "spiffe://lockd.local/payments/migrator", SessionId: 7587889412345678901, Class: "payments/migration",
		AcquiredAt: timestamppb.New(golden.Now.Add(-age)), Age: durationpb.New(age), Token: token, Waiters: 2,
	}
}

func TestPrintKey(t *testing.T) {
	golden.AssertPrinted(t, "key-held", NewKeyView("payments/ledger/migrate", &lockv1.InspectResponse{
		Held: true, Waiters: 2, Hold: hold("payments/ledger/migrate", 3*time.Minute+12*time.Second+250*time.Millisecond, nil),
		Class: "payments/migration", Tier: "entity", Cluster: "eu-west-entity-1",
	}))
	golden.AssertPrinted(t, "key-held-operator", NewKeyView("payments/ledger/migrate", &lockv1.InspectResponse{
		Held: true, Waiters: 0, Hold: hold("payments/ledger/migrate", 90*time.Second, &lockv1.Token{Value: 281474976710660, Epoch: 1, Revision: 4}),
		Class: "payments/migration",
	}))
	// An entity tier split across shards: the key's range and the map
	// version that homed it to its shard.
	golden.AssertPrinted(t, "key-free-shard", NewKeyView("payments/ledger/42", &lockv1.InspectResponse{
		Class: "payments/ledger-writes", Tier: "entity", Cluster: "entity-2", Range: "payments/ledger/", ShardMapVersion: 3,
	}))
	golden.AssertPrinted(t, "key-free", NewKeyView("demo/x", &lockv1.InspectResponse{Waiters: 0, Class: "demo/demo", Tier: "coord", Cluster: "embedded"}))
	// No class owns the key: it cannot be locked, and inspect says so.
	golden.AssertPrinted(t, "key-unowned", NewKeyView("demo2/x", &lockv1.InspectResponse{}))
	// A class change moved the key to another class while it is held: the
	// hold keeps the class it was granted under.
	golden.AssertPrinted(t, "key-held-moved", NewKeyView("payments/ledger/migrate", &lockv1.InspectResponse{
		Held: true, Waiters: 0, Hold: hold("payments/ledger/migrate", 90*time.Second, nil), Class: "payments/ledger-writes",
	}))

	queued := hold("payments/ledger/migrate", 3*time.Minute+12*time.Second+250*time.Millisecond, nil)
	queued.SessionTtlLeft = durationpb.New(11 * time.Second)
	golden.AssertPrinted(t, "key-held-queue", NewKeyView("payments/ledger/migrate", &lockv1.InspectResponse{
		Held: true, Waiters: 2, Hold: queued, Class: "payments/migration", Queue: []*lockv1.Waiter{
			{Position: 1, Identity: "spiffe://lockd.local/payments/reconciler", SessionId: 7587889412345679002, Waited: durationpb.New(41*time.Second + 500*time.Millisecond), Durable: true},
			{Position: 2, Identity: "spiffe://lockd.local/payments/backfill", SessionId: 7587889412345679117, Waited: durationpb.New(3*time.Second + 20*time.Millisecond)},
		},
	}))
	// A holder whose lease is already gone: 0 left, not unknown.
	gone := hold("payments/ledger/migrate", 20*time.Second, nil)
	gone.SessionTtlLeft, gone.Waiters = durationpb.New(0), 0
	golden.AssertPrinted(t, "key-held-lease-gone", NewKeyView("payments/ledger/migrate", &lockv1.InspectResponse{Held: true, Hold: gone, Class: "payments/migration"}))
	// A hold on an entity cluster: its session is the lease standing for
	// the holder's session there, and the home session is named.
	entity := hold("payments/ledger/42", 20*time.Second, nil)
	entity.SessionId, entity.HomeSessionId, entity.SessionTtlLeft, entity.Waiters = 7587889412345680001, 7587889412345678901, durationpb.New(14*time.Second), 0
	entity.Class = "payments/ledger-writes"
	golden.AssertPrinted(t, "key-held-entity", NewKeyView("payments/ledger/42", &lockv1.InspectResponse{
		Held: true, Hold: entity, Class: "payments/ledger-writes", Tier: "entity", Cluster: "entity-1",
	}))
}

func TestPrintHolds(t *testing.T) {
	golden.AssertPrinted(t, "holds", NewHoldsView("payments/", &lockv1.ListHoldsResponse{Holds: []*lockv1.Hold{
		hold("payments/ledger/migrate", 5*time.Second, nil),
		hold("payments/reports/nightly", 26*time.Hour, nil),
	}}))
	golden.AssertPrinted(t, "holds-truncated-operator", NewHoldsView("payments/", &lockv1.ListHoldsResponse{Truncated: true, Holds: []*lockv1.Hold{
		hold("payments/ledger/migrate", 5*time.Second, &lockv1.Token{Value: 281474976710660, Epoch: 1, Revision: 4}),
	}}))
	golden.AssertPrinted(t, "holds-empty", NewHoldsView("demo/", &lockv1.ListHoldsResponse{}))
}

func TestNewCmdInspectFlags(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantTarget string
		wantPrefix bool
		wantLimit  int32
		wantErr    string
	}{
		{name: "key", args: []string{"demo/x"}, wantTarget: "demo/x"},
		{name: "prefix", args: []string{"demo/"}, wantTarget: "demo/", wantPrefix: true},
		{name: "prefix with limit", args: []string{"demo/", "--limit", "5"}, wantTarget: "demo/", wantPrefix: true, wantLimit: 5},
		{name: "limit needs a prefix", args: []string{"demo/x", "--limit", "5"}, wantErr: "--limit applies to a prefix"},
		{name: "no argument", args: []string{}, wantErr: "missing <key | prefix/>"},
		{name: "two arguments", args: []string{"demo/x", "demo/y"}, wantErr: `unexpected argument "demo/y"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *Options
			cmd := NewCmdInspect(&cmdutil.Factory{}, func(o *Options) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				var fe *cli.UsageError
				require.True(t, errors.As(err, &fe))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantTarget, got.Target)
			require.Equal(t, tt.wantPrefix, got.IsPrefix())
			require.Equal(t, tt.wantLimit, got.Limit)
		})
	}
}
