package operator

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/operator/operatortest"
)

func TestVerify(t *testing.T) {
	is := operatortest.New(t)
	v, err := NewVerifier(t.Context(), Config{Issuer: is.URL(), Audience: "lockd", ACR: []string{"gold"}})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherSigner, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: other, KeyID: "k1"}}, nil)
	forged, _ := jwt.Signed(otherSigner).Claims(map[string]any{"iss": is.URL(), "aud": "lockd", "sub": "mallory",
		"exp": time.Now().Add(time.Minute).Unix(), "realm_access": map[string]any{"roles": []string{"lock-operator"}}, "amr": []string{"otp"}}).Serialize()

	tests := []struct {
		name    string
		raw     string
		wantErr error
		wantMsg string
		want    Operator
	}{
		{name: "operator with otp", raw: is.Token(t, "f3a1-alice", nil), want: Operator{Subject: "f3a1-alice", Name: "f3a1-alice"}},
		{name: "hardware key", raw: is.Token(t, "f3a1-alice", func(c map[string]any) { c["amr"] = []string{"hwk"} }), want: Operator{Subject: "f3a1-alice", Name: "f3a1-alice"}},
		{name: "acr instead of amr", raw: is.Token(t, "f3a1-alice", func(c map[string]any) { c["amr"] = []string{"pwd"}; c["acr"] = "gold" }), want: Operator{Subject: "f3a1-alice", Name: "f3a1-alice"}},
		{name: "no role", raw: is.Token(t, "f3a1-alice", func(c map[string]any) {
			c["realm_access"] = map[string]any{"roles": []string{"offline_access"}}
		}), wantErr: ErrMissingRole, wantMsg: `missing role "lock-operator" in claim realm_access.roles`},
		{name: "password only", raw: is.Token(t, "f3a1-alice", func(c map[string]any) { c["amr"] = []string{"pwd"} }),
			wantErr: ErrNoMFA, wantMsg: "no multi-factor sign-in: the token has amr [pwd]"},
		{name: "expired", raw: is.Token(t, "f3a1-alice", func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), wantErr: ErrInvalidToken},
		{name: "other audience", raw: is.Token(t, "f3a1-alice", func(c map[string]any) { c["aud"] = []string{"account"} }), wantErr: ErrInvalidToken},
		{name: "forged signature", raw: forged, wantErr: ErrInvalidToken},
		{name: "no token", raw: "", wantErr: ErrNoToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := v.Verify(t.Context(), tt.raw)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("err = %q, want it to say %q", err, tt.wantMsg)
				}
				if tt.raw != "" && strings.Contains(err.Error(), tt.raw) {
					t.Fatal("the error carries the token")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || identity.Operator(got.Subject, got.Name, "").String() != "oidc:"+tt.want.Subject {
				t.Fatalf("operator = %+v", got)
			}
		})
	}
}

func TestRolesClaimPathIsConfigurable(t *testing.T) {
	is := operatortest.New(t)
	v, err := NewVerifier(t.Context(), Config{Issuer: is.URL(), Audience: "lockd", RolesClaim: "resource_access.lockd.roles", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	raw := is.Token(t, "f3a1-alice", func(c map[string]any) {
		c["resource_access"] = map[string]any{"lockd": map[string]any{"roles": []string{"operator"}}}
	})
	if _, err := v.Verify(t.Context(), raw); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), is.Token(t, "f3a1-alice", nil)); !errors.Is(err, ErrMissingRole) {
		t.Fatalf("realm role accepted for a client-role config: %v", err)
	}
}
