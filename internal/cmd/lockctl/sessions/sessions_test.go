package sessions

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestPrintSessions(t *testing.T) {
	now := golden.Now
	golden.AssertPrinted(t, "sessions", NewView(&lockv1.ListSessionsResponse{Sessions: []*lockv1.Session{
		{
			SessionId: 7587889412345678901, Identity: "spiffe://lockd.local/payments/migrator", Ttl: durationpb.New(30 * time.Second),
			Holds: 2, OpenedAt: timestamppb.New(now.Add(-2 * time.Hour)), LastKeepalive: timestamppb.New(now.Add(-4 * time.Second)),
			Remaining: durationpb.New(26*time.Second + 100*time.Millisecond),
		},
		{
			SessionId: 42, Identity: "spiffe://lockd.local/dev", Ttl: durationpb.New(5 * time.Second),
			Holds: 0, OpenedAt: timestamppb.New(now.Add(-30 * time.Second)),
			Remaining: durationpb.New(900 * time.Millisecond),
		},
	}}))
	golden.AssertPrinted(t, "sessions-empty", NewView(&lockv1.ListSessionsResponse{}))
}
