package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestEveryReasonReachesTheClient: each arbiter error leaves the boundary
// with its code and its reason, and the client turns it back into its
// sentinel, without reading the message.
func TestEveryReasonReachesTheClient(t *testing.T) {
	tests := []struct {
		err      error
		sentinel error
	}{
		{arbiter.ErrHeld, client.ErrHeld},
		{fmt.Errorf("%w 42", arbiter.ErrLeak), client.ErrLeak},
		{fmt.Errorf("%w: the store has no epoch record", arbiter.ErrSealed), client.ErrSealed},
		{arbiter.ErrEpochGrace, client.ErrEpochGrace},
		{fmt.Errorf("%w: class t/std has ttl 15s", arbiter.ErrSessionTTL), client.ErrSessionTTL},
		{arbiter.ErrSessionNotFound, client.ErrSessionNotFound},
		{arbiter.ErrStaleToken, client.ErrStaleToken},
		{authz.ErrDenied, client.ErrDenied},
		{fmt.Errorf("%w: key: must not be empty", arbiter.ErrInvalid), client.ErrInvalid},
		{fmt.Errorf("%w: etcd", arbiter.ErrUnavailable), client.ErrUnavailable},
		{fmt.Errorf("%w: 1000 sessions", arbiter.ErrQuota), client.ErrQuota},
		{arbiter.ErrRateLimited, client.ErrRateLimited},
		{arbiter.ErrSuperseded, client.ErrSuperseded},
		{arbiter.ErrWaitTimeout, client.ErrWaitTimeout},
		{arbiter.ErrWaitTimeout, client.ErrHeld},
		{arbiter.ErrNotOperator, client.ErrNotOperator},
		{arbiter.ErrSamePerson, client.ErrSamePerson},
		{arbiter.ErrHoldChanged, client.ErrHoldChanged},
		{arbiter.ErrEpochMoved, client.ErrEpochMoved},
		{fmt.Errorf("%w: at 65535", arbiter.ErrEpochExhausted), client.ErrEpochExhausted},
		{fmt.Errorf("%w: t/x", arbiter.ErrNotHeld), client.ErrNotHeld},
		{arbiter.ErrForceNotFound, client.ErrRequestNotFound},
		{arbiter.ErrEpochRequestNotFound, client.ErrRequestNotFound},
		{arbiter.ErrInternal, client.ErrInternal},
		{ErrHistoryOff, client.ErrHistoryOff},
		{fmt.Errorf("%w (class t/cache)", arbiter.ErrNoQuorumSession), client.ErrNoQuorumSession},
		{fmt.Errorf("%w: key t/fast/a belongs to class t/fast", arbiter.ErrClassMismatch), client.ErrClassMismatch},
		{fmt.Errorf("%w: no class of namespace t owns key t/x", arbiter.ErrNoClass), client.ErrNoClass},
		{arbiter.ErrOpenGrace, client.ErrOpenGrace},
		{&arbiter.WrongRegionError{Namespace: "t", Region: "us-east", Served: "eu-west", Endpoint: "lockd.us:7420"}, client.ErrWrongRegion},
		{&arbiter.MovingError{RetryAfter: time.Second}, client.ErrMoving},
		{fmt.Errorf("%w: plan p is approved", arbiter.ErrPlanState), client.ErrPlanState},
		{arbiter.ErrPlanNotFound, client.ErrRequestNotFound},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[Reason(tt.err)] = true
		got := client.Decode(toStatus(tt.err))
		if !errors.Is(got, tt.sentinel) {
			t.Errorf("%v: decoded as %v, want %v", tt.err, got, tt.sentinel)
		}
		if status.Code(got) != Code(tt.err) {
			t.Errorf("%v: code %s, want %s", tt.err, status.Code(got), Code(tt.err))
		}
		if errors.Is(got, client.ErrHeld) && !errors.Is(tt.err, arbiter.ErrHeld) && !errors.Is(tt.err, arbiter.ErrWaitTimeout) {
			t.Errorf("%v: decoded as held", tt.err)
		}
	}
	for _, r := range Reasons() {
		if !covered[r] {
			t.Errorf("reason %s has no case here: give it a client sentinel and a case", r)
		}
	}
	definite := map[string]bool{ReasonUnavailable: false}
	for _, r := range Reasons() {
		if _, ok := lockv1.ErrorReason_value["ERROR_REASON_"+r]; !ok {
			t.Errorf("reason %s is not a lock.v1 ErrorReason", r)
		}
		st := statusWithReason(1, r, "msg", nil)
		if got := client.Reason(st); got != r {
			t.Errorf("reason %s reads back as %q", r, got)
		}
		if want, ok := definite[r]; (ok && client.Definite(st) != want) || (!ok && !client.Definite(st)) {
			t.Errorf("reason %s: Definite = %v", r, client.Definite(st))
		}
	}
	// A refusal that says more than its reason carries it as metadata.
	region, endpoint, ok := client.Region(toStatus(fmt.Errorf("acquire: %w", &arbiter.WrongRegionError{Namespace: "t", Region: "us-east", Endpoint: "lockd.us:7420"})))
	if !ok || region != "us-east" || endpoint != "lockd.us:7420" {
		t.Errorf("WRONG_REGION's metadata: client.Region = %q %q %v", region, endpoint, ok)
	}
	// Context errors and gRPC's own carry no reason: their outcome is unknown.
	if client.Definite(toStatus(status.Error(4, "deadline"))) {
		t.Error("a status without a reason counted as a definite answer")
	}
}
