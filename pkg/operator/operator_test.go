package operator

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// issuer is a test OIDC issuer: real RSA keys, real signed JWTs, discovery
// and JWKS served over HTTP, shaped like Keycloak's access tokens.
type issuer struct {
	srv *httptest.Server
	key *rsa.PrivateKey
	sig jose.Signer
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{key: key}
	mux := http.NewServeMux()
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	mux.HandleFunc("/realms/ops/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.url(), "jwks_uri": is.url() + "/protocol/openid-connect/certs",
			"authorization_endpoint": is.url() + "/auth", "token_endpoint": is.url() + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/realms/ops/protocol/openid-connect/certs", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	is.sig, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	return is
}

func (is *issuer) url() string { return is.srv.URL + "/realms/ops" }

// token signs claims over the defaults of a Keycloak operator token.
func (is *issuer) token(t *testing.T, edit func(map[string]any)) string {
	t.Helper()
	c := map[string]any{
		"iss": is.url(), "aud": []string{"lockd"}, "sub": "f3a1-alice", "preferred_username": "alice",
		"exp": time.Now().Add(5 * time.Minute).Unix(), "iat": time.Now().Unix(),
		"realm_access": map[string]any{"roles": []string{"offline_access", "lock-operator"}},
		"amr":          []string{"pwd", "otp"},
	}
	if edit != nil {
		edit(c)
	}
	raw, err := jwt.Signed(is.sig).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestVerify(t *testing.T) {
	is := newIssuer(t)
	v, err := NewVerifier(t.Context(), Config{Issuer: is.url(), Audience: "lockd", ACR: []string{"gold"}})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherSigner, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: other, KeyID: "k1"}}, nil)
	forged, _ := jwt.Signed(otherSigner).Claims(map[string]any{"iss": is.url(), "aud": "lockd", "sub": "mallory",
		"exp": time.Now().Add(time.Minute).Unix(), "realm_access": map[string]any{"roles": []string{"lock-operator"}}, "amr": []string{"otp"}}).Serialize()

	tests := []struct {
		name    string
		raw     string
		wantErr error
		wantMsg string
		want    Operator
	}{
		{name: "operator with otp", raw: is.token(t, nil), want: Operator{Subject: "f3a1-alice", Name: "alice"}},
		{name: "hardware key", raw: is.token(t, func(c map[string]any) { c["amr"] = []string{"hwk"} }), want: Operator{Subject: "f3a1-alice", Name: "alice"}},
		{name: "acr instead of amr", raw: is.token(t, func(c map[string]any) { c["amr"] = []string{"pwd"}; c["acr"] = "gold" }), want: Operator{Subject: "f3a1-alice", Name: "alice"}},
		{name: "no role", raw: is.token(t, func(c map[string]any) {
			c["realm_access"] = map[string]any{"roles": []string{"offline_access"}}
		}), wantErr: ErrMissingRole, wantMsg: `missing role "lock-operator" in claim realm_access.roles`},
		{name: "password only", raw: is.token(t, func(c map[string]any) { c["amr"] = []string{"pwd"} }),
			wantErr: ErrNoMFA, wantMsg: "no multi-factor sign-in: the token has amr [pwd]"},
		{name: "expired", raw: is.token(t, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), wantErr: ErrInvalidToken},
		{name: "other audience", raw: is.token(t, func(c map[string]any) { c["aud"] = []string{"account"} }), wantErr: ErrInvalidToken},
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
			if got != tt.want || got.ID() != "oidc:"+tt.want.Subject {
				t.Fatalf("operator = %+v", got)
			}
		})
	}
}

func TestRolesClaimPathIsConfigurable(t *testing.T) {
	is := newIssuer(t)
	v, err := NewVerifier(t.Context(), Config{Issuer: is.url(), Audience: "lockd", RolesClaim: "resource_access.lockd.roles", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	raw := is.token(t, func(c map[string]any) {
		c["resource_access"] = map[string]any{"lockd": map[string]any{"roles": []string{"operator"}}}
	})
	if _, err := v.Verify(t.Context(), raw); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), is.token(t, nil)); !errors.Is(err, ErrMissingRole) {
		t.Fatalf("realm role accepted for a client-role config: %v", err)
	}
}
