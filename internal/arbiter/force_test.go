package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestForceReleaseNeedsTwoOperatorsAndIsOneTxn: a request records the hold
// and the class's enforcement; its requester cannot approve it; another
// operator's approval deletes the hold and writes the force record (both
// checked in etcd) and leaves the holder's session alive.
func TestForceReleaseNeedsTwoOperatorsAndIsOneTxn(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, aliceAdmin := env.Raw(t, lockdtest.Alice)
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	sid := openSession(t, alice, 15*time.Second)
	g, err := acquire(t.Context(), alice, sid, "t/stuck", "std", 0)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := aliceAdmin.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/stuck", Reason: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("request by a non-operator: %v", err)
	}
	if _, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/stuck"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("request without a reason: %v", err)
	}
	if _, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/free", Reason: "x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("request for a key nobody holds: %v", err)
	}
	req, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/stuck", Reason: "INC-42: holder wedged"})
	if err != nil {
		t.Fatal(err)
	}
	fr := req.GetForceRelease()
	if fr.GetHolder() != lockdtest.Alice || fr.GetSessionId() != sid || fr.GetHoldRevision() != g.GetToken().GetRevision() ||
		fr.GetEnforcement() != "fenced" || fr.GetClass() != "t/std" || fr.GetRequester() != lockdtest.Operator {
		t.Fatalf("request = %v", fr)
	}
	list, err := op2.ListForceReleases(t.Context(), &lockv1.ListForceReleasesRequest{})
	if err != nil || len(list.GetForceReleases()) != 1 || list.GetForceReleases()[0].GetId() != fr.GetId() {
		t.Fatalf("list = %v, %v", list, err)
	}

	// The requester cannot approve their own request.
	if _, err := op1.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: fr.GetId()}); status.Code(err) != codes.PermissionDenied || !errors.Is(client.Decode(err), client.ErrSamePerson) {
		t.Fatalf("self-approval: %v", err)
	}
	if got, _ := env.Backend.Client.Get(t.Context(), "/l/t/stuck"); len(got.Kvs) != 1 {
		t.Fatal("a refused approval touched the hold")
	}

	ok, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: fr.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	cli := env.Backend.Client
	if got, _ := cli.Get(t.Context(), "/l/t/stuck"); len(got.Kvs) != 0 {
		t.Fatal("the approved force-release left the hold")
	}
	rec, _ := cli.Get(t.Context(), ok.GetRecordKey())
	if len(rec.Kvs) != 1 {
		t.Fatalf("no force record at %q", ok.GetRecordKey())
	}
	var r map[string]any
	_ = json.Unmarshal(rec.Kvs[0].Value, &r)
	if r["requester"] != lockdtest.Operator || r["approver"] != lockdtest.Operator2 || r["reason"] != "INC-42: holder wedged" ||
		r["enforcement"] != "fenced" || r["holder"] != lockdtest.Alice {
		t.Fatalf("force record = %v", r)
	}
	ttl, _ := cli.TimeToLive(t.Context(), clientv3.LeaseID(rec.Kvs[0].Lease))
	if ttl.TTL < int64((23 * time.Hour).Seconds()) {
		t.Fatalf("force record lease TTL %ds, want about 24h", ttl.TTL)
	}
	if got, _ := cli.Get(t.Context(), "/sys/force-requests/"+fr.GetId()); len(got.Kvs) != 0 {
		t.Fatal("the approved request is still pending")
	}
	if ttl, _ := cli.TimeToLive(t.Context(), clientv3.LeaseID(sid)); ttl.TTL <= 0 {
		t.Fatal("a force-release without --revoke-session ended the holder's session")
	}
	// Approving twice finds nothing.
	if _, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: fr.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("second approval: %v", err)
	}
}

// TestForceReleaseOfAChangedHoldReleasesNothing: the hold was released and
// granted again after the request; approval must not release the new hold.
func TestForceReleaseOfAChangedHoldReleasesNothing(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	sid := openSession(t, alice, 15*time.Second)
	g, err := acquire(t.Context(), alice, sid, "t/moved", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	req, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/moved", Reason: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Release(t.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: "t/moved", Token: g.GetToken().GetValue()}); err != nil {
		t.Fatal(err)
	}
	g2, err := acquire(t.Context(), alice, sid, "t/moved", "std", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()})
	if status.Code(err) != codes.FailedPrecondition || !errors.Is(client.Decode(err), client.ErrHoldChanged) {
		t.Fatalf("approval of a changed hold: %v", err)
	}
	got, _ := env.Backend.Client.Get(t.Context(), "/l/t/moved")
	if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != g2.GetToken().GetRevision() {
		t.Fatal("the approval released the new hold")
	}
}

// TestForceReleaseRevokeSessionEndsEveryHold and a denial withdraws a
// request.
func TestForceReleaseRevokeSessionEndsEveryHold(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	alice, _ := env.Raw(t, lockdtest.Alice)
	_, op1 := env.Raw(t, lockdtest.Operator)
	_, op2 := env.Raw(t, lockdtest.Operator2)
	sid := openSession(t, alice, 15*time.Second)
	for _, k := range []string{"t/a", "t/b"} {
		if _, err := acquire(t.Context(), alice, sid, k, "std", 0); err != nil {
			t.Fatal(err)
		}
	}
	denied, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/b", Reason: "mistake"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op2.DenyForceRelease(t.Context(), &lockv1.DenyForceReleaseRequest{Id: denied.GetForceRelease().GetId(), Reason: "not stuck"}); err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: denied.GetForceRelease().GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("approval of a denied request: %v", err)
	}
	req, err := op1.RequestForceRelease(t.Context(), &lockv1.RequestForceReleaseRequest{Key: "t/a", Reason: "wedged process", RevokeSession: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: req.GetForceRelease().GetId()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	got, _ := env.Backend.Client.Get(ctx, "/l/t/", clientv3.WithPrefix())
	if len(got.Kvs) != 0 {
		t.Fatalf("holds left after revoking the session: %d", len(got.Kvs))
	}
	if ttl, _ := env.Backend.Client.TimeToLive(ctx, clientv3.LeaseID(sid)); ttl.TTL > 0 {
		t.Fatal("the session survived --revoke-session")
	}
}
