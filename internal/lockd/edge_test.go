package lockd

import "testing"

func TestEdgeIdentityConfigNamesTheFlagAndTheRule(t *testing.T) {
	const envoy = "spiffe://example.org/ns/lockd/sa/envoy"
	checkConfigCases(t, []configCase{
		{"no edge", func(*Config) {}, ""},
		{"two edges", func(c *Config) { c.EdgeIdentities = []string{envoy, "spiffe://example.org/ns/lockd/sa/envoy-canary"} }, ""},
		{"not a SPIFFE ID", func(c *Config) { c.EdgeIdentities = []string{"envoy.lockd.svc"} },
			`--edge-identity "envoy.lockd.svc": must be a SPIFFE ID`},
		{"a SPIFFE ID without trust domain", func(c *Config) { c.EdgeIdentities = []string{"spiffe:///envoy"} },
			`--edge-identity "spiffe:///envoy": must be a SPIFFE ID`},
		{"with insecure loopback", func(c *Config) { c.EdgeIdentities, c.InsecureLoopback = []string{envoy}, true },
			"--edge-identity: cannot be combined with --insecure-loopback"},
	})
}
