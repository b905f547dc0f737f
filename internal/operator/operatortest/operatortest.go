// Package operatortest is a test OIDC issuer for operator tokens: real RSA
// keys, real signed JWTs, discovery and JWKS served over HTTP, shaped like
// Keycloak's access tokens. For tests only.
package operatortest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer is a running test issuer.
type Issuer struct {
	// DeviceSubject is who signs in through the device flow ("ann").
	DeviceSubject string

	srv *httptest.Server
	key *rsa.PrivateKey
	sig jose.Signer
}

// New starts an issuer for the test.
func New(t testing.TB) *Issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{key: key}
	mux := http.NewServeMux()
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	mux.HandleFunc("/realms/ops/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.URL(), "jwks_uri": is.URL() + "/protocol/openid-connect/certs",
			"authorization_endpoint": is.URL() + "/auth", "token_endpoint": is.URL() + "/token",
			"device_authorization_endpoint":         is.URL() + "/device",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/realms/ops/protocol/openid-connect/certs", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	// The device flow: one "authorization_pending" poll, then a token for
	// DeviceSubject (as if that person had entered the code).
	polls := 0
	mux.HandleFunc("/realms/ops/device", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"device_code": "dc-1", "user_code": "WDJB-MJHT",
			"verification_uri": is.URL() + "/verify", "interval": 1, "expires_in": 60})
	})
	mux.HandleFunc("/realms/ops/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		if r.Form.Get("device_code") != "dc-1" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "invalid_grant"})
			return
		}
		polls++
		if polls == 1 {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "authorization_pending"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": is.Token(t, is.DeviceSubject, nil),
			"token_type": "Bearer", "expires_in": 300})
	})
	is.DeviceSubject = "ann"
	is.sig, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// URL is the issuer URL (a Keycloak-like realm URL).
func (is *Issuer) URL() string { return is.srv.URL + "/realms/ops" }

// Token signs the claims of a Keycloak operator token for audience
// "lockd": subject sub, the lock-operator realm role and amr [pwd otp],
// valid for five minutes; edit changes them first.
func (is *Issuer) Token(t testing.TB, sub string, edit func(map[string]any)) string {
	t.Helper()
	c := map[string]any{
		"iss": is.URL(), "aud": []string{"lockd"}, "sub": sub, "preferred_username": sub,
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
