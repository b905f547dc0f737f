package lockd

import (
	"errors"
	"strings"
	"testing"
)

func TestClustersConfigNamesTheClusterAndTheRule(t *testing.T) {
	entity := ClusterConfig{Name: "entity-1", Tiers: []string{"entity"}, Endpoints: []string{"http://e:2379"}}
	checkConfigCases(t, []configCase{
		{"an entity cluster", func(c *Config) { c.Clusters = []ClusterConfig{entity} }, ""},
		{"no endpoints", func(c *Config) {
			e := entity
			e.Endpoints = nil
			c.Clusters = []ClusterConfig{e}
		}, `cluster "entity-1": endpoints: required`},
		{"a cert without a key", func(c *Config) {
			e := entity
			e.Cert = "/etc/lockd/etcd.crt"
			c.Clusters = []ClusterConfig{e}
		}, `cluster "entity-1": tls cert and key: must be given together`},
		{"the history on", func(c *Config) { c.Clusters, c.Audit.Mode = []ClusterConfig{entity}, AuditOn }, ""},
	})
}

// configCase is a change to DefaultConfig and what Validate says of it.
type configCase struct {
	name string
	mod  func(*Config)
	want string // "" is valid; else in the ErrConfig's message
}

func checkConfigCases(t *testing.T, cases []configCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			err := cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v; want ErrConfig naming %q", err, tt.want)
			}
		})
	}
}
