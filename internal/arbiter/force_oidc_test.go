package arbiter_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd-dev/lockd/internal/operator"
	"github.com/lockd-dev/lockd/internal/operator/operatortest"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestOIDCOperators: with operator tokens required, force-release and epoch
// advance need a token with the lock-operator role and a second factor; a
// token without them is refused saying which is missing; two people means
// two token subjects, whatever connection they come over.
func TestOIDCOperators(t *testing.T) {
	is := operatortest.New(t)
	v, err := operator.NewVerifier(t.Context(), operator.Config{Issuer: is.URL(), Audience: "lockd"})
	if err != nil {
		t.Fatal(err)
	}
	env := lockdtest.Start(t, lockdtest.Options{OperatorTokens: v})
	alice, _ := env.Raw(t, lockdtest.Alice)
	sid := openSession(t, alice, 15*time.Second)
	if _, err := acquire(t.Context(), alice, sid, "t/oidc", "std", 0); err != nil {
		t.Fatal(err)
	}
	// Operators' tokens; the connection's own identity does not matter.
	admin := func(token string) lockv1.AdminServiceClient {
		opts := []client.Option{}
		if token != "" {
			opts = append(opts, client.WithOperatorToken(token))
		}
		return env.Client(t, lockdtest.Bob, opts...).AdminService()
	}
	ann := admin(is.Token(t, "ann", nil))
	req := &lockv1.RequestForceReleaseRequest{Key: "t/oidc", Reason: "INC-9"}

	if _, err := admin("").RequestForceRelease(t.Context(), req); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "lockctl login") {
		t.Fatalf("no token: %v", err)
	}
	noRole := admin(is.Token(t, "ann", func(c map[string]any) { c["realm_access"] = map[string]any{"roles": []string{}} }))
	if _, err := noRole.RequestForceRelease(t.Context(), req); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `missing role "lock-operator"`) {
		t.Fatalf("no role: %v", err)
	}
	noMFA := admin(is.Token(t, "ann", func(c map[string]any) { c["amr"] = []string{"pwd"} }))
	if _, err := noMFA.RequestForceRelease(t.Context(), req); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "multi-factor") {
		t.Fatalf("no MFA: %v", err)
	}
	// A SPIFFE operator identity alone is not enough once tokens are required.
	_, spiffeOp := env.Raw(t, lockdtest.Operator)
	if _, err := spiffeOp.RequestForceRelease(t.Context(), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("SPIFFE operator without a token: %v", err)
	}

	fr, err := ann.RequestForceRelease(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if fr.GetForceRelease().GetRequester() != "oidc:ann" {
		t.Fatalf("requester = %q", fr.GetForceRelease().GetRequester())
	}
	// The same person over another connection is still the same person.
	ann2 := admin(is.Token(t, "ann", nil))
	if _, err := ann2.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: fr.GetForceRelease().GetId()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("self-approval over another connection: %v", err)
	}
	ben := admin(is.Token(t, "ben", nil))
	ok, err := ben.ApproveForceRelease(t.Context(), &lockv1.ApproveForceReleaseRequest{Id: fr.GetForceRelease().GetId()})
	if err != nil || ok.GetApprover() != "oidc:ben" {
		t.Fatalf("approval by a second operator: %v, %v", ok, err)
	}

	// Epoch advance: the same two-person rule on token subjects.
	st, err := ann.EpochStatus(t.Context(), &lockv1.EpochStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	er, err := ann.RequestEpochAdvance(t.Context(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: st.GetEpoch(), Reason: "drill"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ann2.ApproveEpochAdvance(t.Context(), &lockv1.ApproveEpochAdvanceRequest{Id: er.GetId()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("self-approved epoch advance: %v", err)
	}
	adv, err := ben.ApproveEpochAdvance(t.Context(), &lockv1.ApproveEpochAdvanceRequest{Id: er.GetId()})
	if err != nil || adv.GetEpoch() != st.GetEpoch()+1 {
		t.Fatalf("epoch advance by two operators: %v, %v", adv, err)
	}
}
