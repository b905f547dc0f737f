// Package topology reads the etcd clusters a lockd fronts, and its region,
// from a file: which cluster serves the coord tier (leader-election locks,
// epoch allocation) and which the entity tier, each with its endpoints and
// TLS. Classes name a tier; the topology decides the cluster, so moving a
// tier to its own cluster is a change to this file, not to any class or
// caller.
//
// A file looks like a kubeconfig:
//
//	apiVersion: lockd.dev/v1alpha1
//	kind: Topology
//	region: eu-west
//	clusters:
//	- name: eu-west-main
//	  tiers: [coord, entity]
//	  endpoints: [https://etcd-0:2379, https://etcd-1:2379, https://etcd-2:2379]
//	  tls: {ca: /etc/lockd/etcd-ca.crt, cert: /etc/lockd/etcd.crt, key: /etc/lockd/etcd.key}
package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The file's apiVersion and kind.
const (
	APIVersion = "lockd.dev/v1alpha1"
	Kind       = "Topology"
)

// The tiers a class may name.
const (
	TierCoord  = "coord"
	TierEntity = "entity"
)

// Tiers are the tiers every topology must serve, in order.
var Tiers = []string{TierCoord, TierEntity}

// ErrInvalid is wrapped by every error about a topology's content; the
// message names the field and the rule.
var ErrInvalid = errors.New("topology")

// Topology is the clusters one lockd fronts, and its region.
type Topology struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Region is the region this lockd serves (empty: regions unused).
	Region   string    `json:"region,omitempty"`
	Clusters []Cluster `json:"clusters"`
}

// Cluster is one etcd cluster and the tiers it serves.
type Cluster struct {
	// Name names the cluster in metrics, logs and lockctl (a DNS label).
	Name      string   `json:"name"`
	Tiers     []string `json:"tiers"`
	Endpoints []string `json:"endpoints"`
	TLS       *TLS     `json:"tls,omitempty"`
}

// TLS is how lockd reaches a cluster over TLS: files in PEM.
type TLS struct {
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

// Load reads and checks the topology file at path.
func Load(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse reads a topology and checks it: unknown fields, a tier served by
// no cluster, the coord tier by two (the entity tier may be served by
// several: its shards), a cluster without endpoints, a certificate without
// its key are refused, naming the field. TLS files are checked to be
// readable.
func Parse(b []byte) (*Topology, error) {
	js, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, fmt.Errorf("%w: not valid YAML: %w", ErrInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var t Topology
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return &t, nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

func (t *Topology) check() error {
	if t.APIVersion != APIVersion {
		return invalid("apiVersion", "must be %s, not %q", APIVersion, t.APIVersion)
	}
	if t.Kind != Kind {
		return invalid("kind", "must be %s, not %q", Kind, t.Kind)
	}
	if t.Region != "" && !dnsLabel.MatchString(t.Region) {
		return invalid("region", "%q must be a DNS label (lower-case letters, digits and '-', at most 63)", t.Region)
	}
	if len(t.Clusters) == 0 {
		return invalid("clusters", "at least one cluster is required")
	}
	served := map[string]string{} // tier -> the (first) field that serves it
	names := map[string]string{}
	for i, c := range t.Clusters {
		at := fmt.Sprintf("clusters[%d]", i)
		switch {
		case !dnsLabel.MatchString(c.Name):
			return invalid(at+".name", "%q must be a DNS label (lower-case letters, digits and '-', at most 63)", c.Name)
		case names[c.Name] != "":
			return invalid(at+".name", "%q is also the name of %s; names must be unique", c.Name, names[c.Name])
		case len(c.Tiers) == 0:
			return invalid(at+".tiers", "at least one of %s is required", strings.Join(Tiers, ", "))
		case len(c.Endpoints) == 0:
			return invalid(at+".endpoints", "at least one endpoint is required")
		}
		names[c.Name] = at
		for j, tier := range c.Tiers {
			f := fmt.Sprintf("%s.tiers[%d]", at, j)
			if !slices.Contains(Tiers, tier) {
				return invalid(f, "%q is not a tier; one of %s", tier, strings.Join(Tiers, ", "))
			}
			switch other := served[tier]; {
			case other != "" && tier != TierEntity:
				return invalid(f, "tier %s is already served by %s; each tier but entity (whose clusters are its shards) is served by one cluster", tier, other)
			case other == "":
				served[tier] = at
			}
		}
		for j, e := range c.Endpoints {
			if err := checkEndpoint(e); err != nil {
				return invalid(fmt.Sprintf("%s.endpoints[%d]", at, j), "%v", err)
			}
		}
		if err := c.TLS.check(at + ".tls"); err != nil {
			return err
		}
	}
	for _, tier := range Tiers {
		if served[tier] == "" {
			return invalid("clusters", "no cluster serves tier %s; list it in one cluster's tiers", tier)
		}
	}
	return nil
}

func checkEndpoint(e string) error {
	u, err := url.Parse(e)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%q must be a URL like https://host:2379", e)
	}
	return nil
}

func (t *TLS) check(at string) error {
	if t == nil {
		return nil
	}
	if (t.Cert == "") != (t.Key == "") {
		return invalid(at, "cert and key are given together or not at all")
	}
	for _, f := range []struct{ field, path string }{{"ca", t.CA}, {"cert", t.Cert}, {"key", t.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return invalid(at+"."+f.field, "cannot read %s: %v", f.path, errors.Unwrap(err))
		}
	}
	return nil
}

// Serving returns the (first) cluster that serves tier.
func (t *Topology) Serving(tier string) *Cluster {
	for i := range t.Clusters {
		if slices.Contains(t.Clusters[i].Tiers, tier) {
			return &t.Clusters[i]
		}
	}
	return nil
}
