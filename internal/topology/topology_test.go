package topology

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const head = "apiVersion: lockd.dev/v1alpha1\nkind: Topology\n"

func TestParseAcceptsOneClusterForBothTiersASplitAndShards(t *testing.T) {
	one, err := Parse([]byte(head + `region: eu-west
clusters:
- name: main
  tiers: [coord, entity]
  endpoints: [http://127.0.0.1:2379]
`))
	if err != nil {
		t.Fatal(err)
	}
	if one.Serving(TierCoord) != one.Serving(TierEntity) || one.Serving(TierCoord).Name != "main" || one.Region != "eu-west" {
		t.Fatalf("one cluster: %+v", one)
	}
	split, err := Parse([]byte(head + `clusters:
- name: coord
  tiers: [coord]
  endpoints: [https://coord-0:2379, https://coord-1:2379]
- name: entity-1
  tiers: [entity]
  endpoints: [https://entity-0:2379]
`))
	if err != nil {
		t.Fatal(err)
	}
	if split.Serving(TierCoord).Name != "coord" || split.Serving(TierEntity).Name != "entity-1" {
		t.Fatalf("split: %+v", split)
	}
	sharded, err := Parse([]byte(head + `clusters:
- name: coord
  tiers: [coord]
  endpoints: [https://coord-0:2379]
- name: entity-1
  tiers: [entity]
  endpoints: [https://entity-1-0:2379]
- name: entity-2
  tiers: [entity]
  endpoints: [https://entity-2-0:2379]
`))
	if err != nil {
		t.Fatalf("the entity tier on two shards: %v", err)
	}
	if sharded.Serving(TierEntity).Name != "entity-1" || len(sharded.Clusters) != 3 {
		t.Fatalf("sharded: %+v", sharded)
	}
	// The coord cluster may be an entity shard too (a development lockd
	// with a second embedded shard).
	if _, err := Parse([]byte(head + `clusters:
- name: main
  tiers: [coord, entity]
  endpoints: [https://main-0:2379]
- name: shard-2
  tiers: [entity]
  endpoints: [https://shard-2-0:2379]
`)); err != nil {
		t.Fatalf("the coord cluster as the first entity shard: %v", err)
	}
}

// TestParseRefusesNamingTheFieldAndTheRule: every refusal names the field
// and says what the rule is.
func TestParseRefusesNamingTheFieldAndTheRule(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	main := "- name: main\n  tiers: [coord, entity]\n  endpoints: [http://127.0.0.1:2379]\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"version", "apiVersion: v1\nkind: Topology\nclusters:\n" + main, "apiVersion: must be lockd.dev/v1alpha1"},
		{"kind", "apiVersion: lockd.dev/v1alpha1\nkind: Config\nclusters:\n" + main, "kind: must be Topology"},
		{"unknown field", head + "regions: [a]\nclusters:\n" + main, `unknown field "regions"`},
		{"region", head + "region: EU_West\nclusters:\n" + main, "region: \"EU_West\" must be a DNS label"},
		{"no clusters", head + "clusters: []\n", "clusters: at least one cluster is required"},
		{"name", head + "clusters:\n- name: Main\n  tiers: [coord, entity]\n  endpoints: [http://a:1]\n", "clusters[0].name: \"Main\" must be a DNS label"},
		{"same name", head + "clusters:\n- name: a\n  tiers: [coord]\n  endpoints: [http://a:1]\n- name: a\n  tiers: [entity]\n  endpoints: [http://b:1]\n",
			"clusters[1].name: \"a\" is also the name of clusters[0]"},
		{"no tiers", head + "clusters:\n- name: a\n  endpoints: [http://a:1]\n", "clusters[0].tiers: at least one of coord, entity"},
		{"unknown tier", head + "clusters:\n- name: a\n  tiers: [coord, entities]\n  endpoints: [http://a:1]\n", "clusters[0].tiers[1]: \"entities\" is not a tier"},
		{"coord twice", head + "clusters:\n- name: a\n  tiers: [coord]\n  endpoints: [http://a:1]\n- name: b\n  tiers: [coord, entity]\n  endpoints: [http://b:1]\n",
			"clusters[1].tiers[0]: tier coord is already served by clusters[0]"},
		{"tier unserved", head + "clusters:\n- name: a\n  tiers: [coord]\n  endpoints: [http://a:1]\n", "clusters: no cluster serves tier entity"},
		{"no endpoints", head + "clusters:\n- name: a\n  tiers: [coord, entity]\n", "clusters[0].endpoints: at least one endpoint is required"},
		{"endpoint", head + "clusters:\n- name: a\n  tiers: [coord, entity]\n  endpoints: [etcd-0:2379]\n", "clusters[0].endpoints[0]: \"etcd-0:2379\" must be a URL like https://host:2379"},
		{"cert without key", head + "clusters:\n" + main + "  tls: {ca: " + ca + ", cert: " + ca + "}\n", "clusters[0].tls: cert and key are given together"},
		{"unreadable ca", head + "clusters:\n" + main + "  tls: {ca: " + filepath.Join(dir, "nope.crt") + "}\n", "clusters[0].tls.ca: cannot read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v\nwant an ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte(head+"clusters: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), path+": topology: clusters:") {
		t.Fatalf("Load: %v", err)
	}
}
