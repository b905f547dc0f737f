// Package clientconfig reads and writes lockctl's config file — contexts,
// like kubectl's kubeconfig — and turns a context into pkg/client options.
// It is separate from pkg/client so a holder that is configured in code does
// not pull in the YAML parser.
//
//	opts, err := clientconfig.FromFile("./.lockd/lockctl.yaml", "")
//	c, err := client.New(opts...)
package clientconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/pkg/client"
)

// ErrConfig reports a missing or malformed config file or context.
var ErrConfig = errors.New("clientconfig")

// Config is a lockctl config file.
type Config struct {
	// CurrentContext names the context used when none is given.
	CurrentContext string `json:"current-context"`
	// Contexts are the servers this config knows.
	Contexts []Context `json:"contexts"`
}

// Context is one lockd endpoint and the credentials to reach it.
type Context struct {
	// Name of the context.
	Name string `json:"name"`
	// Server is host:port of lockd's gRPC listener; several lockds as
	// "host1:port,host2:port,…" or "dns:///name:port", calls then routed
	// by key (client.WithTarget).
	Server string `json:"server"`
	// Region is the region that lockd serves (its --region), so lockctl can
	// name this context when another lockd refuses a key as homed here.
	Region string `json:"region,omitempty"`
	// CA, Cert and Key are PEM files: the CA that signed lockd's serving
	// certificate, and the caller's X.509 SVID and key. Relative paths are
	// relative to the config file.
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// InsecureIdentity, for a lockd started with --insecure-loopback (tests
	// only), is the SPIFFE ID to claim over plaintext.
	InsecureIdentity string `json:"insecure-identity,omitempty"`
	// OIDCIssuer and OIDCClientID are where `lockctl login` signs an
	// operator in (the device flow).
	OIDCIssuer   string `json:"oidc-issuer,omitempty"`
	OIDCClientID string `json:"oidc-client-id,omitempty"`
	// OperatorTokenFile holds the operator's access token (mode 0600),
	// written by `lockctl login` and sent with every call.
	OperatorTokenFile string `json:"operator-token-file,omitempty"`
}

// Save writes c to path (mode 0600: contexts name credentials).
func Save(path string, c *Config) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Load reads a config file. Unknown fields are an error naming them.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	base := filepath.Dir(path)
	for i := range c.Contexts {
		for _, p := range []*string{&c.Contexts[i].CA, &c.Contexts[i].Cert, &c.Contexts[i].Key, &c.Contexts[i].OperatorTokenFile} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(base, *p)
			}
		}
	}
	return &c, nil
}

// Serving returns the names of the contexts for region: those that name it,
// or whose server is endpoint (when not empty).
func (c *Config) Serving(region, endpoint string) []string {
	var names []string
	for _, cx := range c.Contexts {
		if (region != "" && cx.Region == region) || (endpoint != "" && cx.Server == endpoint) {
			names = append(names, cx.Name)
		}
	}
	return names
}

// Context returns the named context, or the current one when name is empty.
func (c *Config) Context(name string) (*Context, error) {
	if name == "" {
		name = c.CurrentContext
	}
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i], nil
		}
	}
	return nil, fmt.Errorf("%w: no context %q (current-context %q)", ErrConfig, name, c.CurrentContext)
}

// Options are the client options that dial the context's server with its
// credentials (and its operator token, when it has one).
func (cx *Context) Options() ([]client.Option, error) {
	if cx.Server == "" {
		return nil, fmt.Errorf("%w: context %q: server: required", ErrConfig, cx.Name)
	}
	opts := []client.Option{client.WithTarget(cx.Server)}
	if cx.OperatorTokenFile != "" {
		b, err := os.ReadFile(cx.OperatorTokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: context %q: operator token: %w (sign in again with `lockctl login`)", ErrConfig, cx.Name, err)
		}
		opts = append(opts, client.WithOperatorToken(strings.TrimSpace(string(b))))
	}
	if cx.InsecureIdentity != "" {
		return append(opts, client.WithInsecureIdentity(cx.InsecureIdentity)), nil
	}
	tlsCfg, err := client.TLSFromFiles(cx.CA, cx.Cert, cx.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: context %q: %w", ErrConfig, cx.Name, err)
	}
	return append(opts, client.WithTLS(tlsCfg)), nil
}

// FromFile reads a config file — for example the <data-dir>/lockctl.yaml
// that lockd writes with its development credentials — and returns the
// options of its context name (the current one when empty).
func FromFile(path, name string) ([]client.Option, error) {
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	cx, err := cfg.Context(name)
	if err != nil {
		return nil, err
	}
	return cx.Options()
}
