// Package operator authenticates the people who run lockd's admin
// operations (force-release, epoch advance): OIDC access tokens as Keycloak
// issues them, verified against the issuer's keys, carrying the operator
// role and proof of multi-factor sign-in.
//
// A verified token says who signed in and how; it says nothing about what
// they may do beyond the role. The two-person rule (requester ≠ approver)
// is the arbiter's, on the Operator's Subject.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
)

// Errors. Messages name what is missing, never the token.
var (
	// ErrNoToken: no bearer token came with the call.
	ErrNoToken = errors.New("operator: no operator token: sign in with `lockctl login`")
	// ErrInvalidToken: the token is not a valid token of the issuer for
	// this audience (signature, issuer, audience or expiry).
	ErrInvalidToken = errors.New("operator: token not accepted")
	// ErrMissingRole: the token does not carry the operator role.
	ErrMissingRole = errors.New("operator: missing role")
	// ErrNoMFA: the sign-in was not multi-factor.
	ErrNoMFA = errors.New("operator: no multi-factor sign-in")
)

// Config says which tokens make an operator.
type Config struct {
	// Issuer is the OIDC issuer URL (for Keycloak, the realm URL).
	Issuer string
	// Audience must be in the token's aud (add an audience mapper for
	// lockd in Keycloak).
	Audience string
	// RolesClaim is the dotted path of the roles list; Keycloak puts realm
	// roles in "realm_access.roles" (the default).
	RolesClaim string
	// Role is the role required; "lock-operator" by default.
	Role string
	// MFAMethods are the amr values that prove a second factor; otp, mfa
	// and hwk by default.
	MFAMethods []string
	// ACR values that also count as multi-factor (e.g. a Keycloak LoA).
	ACR []string
	// HTTPClient fetches discovery and keys (e.g. with the issuer's CA).
	HTTPClient *http.Client
}

// Operator is a verified operator.
type Operator struct {
	// Subject is the issuer's stable id of the person: what the two-person
	// rule compares.
	Subject string
	// Name is preferred_username, or the subject.
	Name string
}

// Verifier checks operator tokens.
type Verifier struct {
	cfg Config
	v   *oidc.IDTokenVerifier
}

// NewVerifier fetches the issuer's discovery document and prepares to
// verify tokens against its published keys (fetched and rotated as needed).
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, fmt.Errorf("operator: issuer and audience are required")
	}
	if cfg.RolesClaim == "" {
		cfg.RolesClaim = "realm_access.roles"
	}
	if cfg.Role == "" {
		cfg.Role = "lock-operator"
	}
	if len(cfg.MFAMethods) == 0 {
		cfg.MFAMethods = []string{"otp", "mfa", "hwk"}
	}
	if cfg.HTTPClient != nil {
		ctx = oidc.ClientContext(ctx, cfg.HTTPClient)
	}
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("operator: OIDC discovery at %s: %w", cfg.Issuer, err)
	}
	return &Verifier{cfg: cfg, v: p.VerifierContext(context.WithoutCancel(ctx), &oidc.Config{ClientID: cfg.Audience})}, nil
}

// Verify checks a raw access token: signature against the issuer's keys,
// issuer, audience and expiry; then the role and the second factor.
func (v *Verifier) Verify(ctx context.Context, raw string) (Operator, error) {
	if strings.TrimSpace(raw) == "" {
		return Operator{}, ErrNoToken
	}
	if v.cfg.HTTPClient != nil {
		ctx = oidc.ClientContext(ctx, v.cfg.HTTPClient)
	}
	tok, err := v.v.Verify(ctx, raw)
	if err != nil {
		// go-oidc's messages describe the check that failed, not the token.
		return Operator{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Operator{}, fmt.Errorf("%w: claims: %v", ErrInvalidToken, err)
	}
	roles := stringsAt(claims, v.cfg.RolesClaim)
	if !slices.Contains(roles, v.cfg.Role) {
		return Operator{}, fmt.Errorf("%w %q in claim %s (the token has %v)", ErrMissingRole, v.cfg.Role, v.cfg.RolesClaim, roles)
	}
	amr := stringsAt(claims, "amr")
	acr, _ := claims["acr"].(string)
	if !slices.ContainsFunc(amr, func(m string) bool { return slices.Contains(v.cfg.MFAMethods, m) }) && !slices.Contains(v.cfg.ACR, acr) {
		want := "amr containing one of " + strings.Join(v.cfg.MFAMethods, ", ")
		if len(v.cfg.ACR) > 0 {
			want += " or acr one of " + strings.Join(v.cfg.ACR, ", ")
		}
		return Operator{}, fmt.Errorf("%w: the token has amr %v and acr %q; want %s", ErrNoMFA, amr, acr, want)
	}
	name, _ := claims["preferred_username"].(string)
	if name == "" {
		name = tok.Subject
	}
	return Operator{Subject: tok.Subject, Name: name}, nil
}

// stringsAt returns the list of strings at a dotted claim path (a single
// string counts as a list of one).
func stringsAt(claims map[string]any, path string) []string {
	var cur any = claims
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	switch x := cur.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
