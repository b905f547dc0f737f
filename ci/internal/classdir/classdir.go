// Package classdir writes the class directory the gate and the benchmarks
// run lockd with: one fenced class owning a namespace (and, if asked, the
// same class with durable fairness owning DurablePrefix, and an open
// efficiency class owning OpenPrefix, both carved out of it), and a grant of
// the whole namespace to each client identity.
package classdir

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Fenced describes the class.
type Fenced struct {
	Namespace, Name, Resource string
	TTL                       time.Duration
	// DurableName, when set, names a second class, the same but with
	// fairness: durable.
	DurableName string
	// DurableTier is the durable class's tier (entity when empty): coord
	// puts its keys on the coord cluster of a split topology.
	DurableTier string
	// OpenName, when set, names an efficiency class (advisory, so its TTL
	// is OpenTTL, at least 30 s) declaring onQuorumLoss: open.
	OpenName string
	OpenTTL  time.Duration
	// OpenTier is the open class's tier (entity when empty).
	OpenTier string
}

// DurablePrefix is the prefix of the keys of the durable class: its keys
// are under it, the fenced class's are the rest of the namespace.
func (c Fenced) DurablePrefix() string { return c.Namespace + "/d/" }

// OpenPrefix is the prefix of the keys of the open class.
func (c Fenced) OpenPrefix() string { return c.Namespace + "/o/" }

// Write writes dir/<namespace>/classes.yaml with the class (or two) and
// dir/<namespace>/grants.yaml granting "<namespace>/" to each identity.
func Write(dir string, c Fenced, identities []string) error {
	if err := os.MkdirAll(filepath.Join(dir, c.Namespace), 0o755); err != nil {
		return err
	}
	cls := classDoc(c.Name, c.Namespace, c.TTL, "entity", fmt.Sprintf("  keys: [%q]\n", c.Namespace+"/"), c.Resource)
	nested := fmt.Sprintf("  nestedIn: [%s]\n", c.Name)
	if c.DurableName != "" {
		cls += "---\n" + classDoc(c.DurableName, c.Namespace, c.TTL, cmp.Or(c.DurableTier, "entity"),
			fmt.Sprintf("  keys: [%q]\n", c.DurablePrefix())+nested+"  fairness: durable\n", c.Resource)
	}
	if c.OpenName != "" {
		cls += "---\n" + strings.Replace(classDoc(c.OpenName, c.Namespace, c.OpenTTL, cmp.Or(c.OpenTier, "entity"),
			fmt.Sprintf("  keys: [%q]\n", c.OpenPrefix())+nested+"  onQuorumLoss: open\n  riskOwner: gate\n  waiverExpires: \"2099-01-01\"\n", c.Resource),
			"purpose: correctness\n  enforcement: fenced", "purpose: efficiency\n  enforcement: advisory", 1)
	}
	var b strings.Builder
	for i, id := range identities {
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockGrant\nmetadata:\n  name: c%d\n  namespace: %s\nspec:\n  spiffeID: %s\n  prefixes: [\"%s/\"]\n",
			i, c.Namespace, id, c.Namespace)
	}
	if err := writeAtomic(filepath.Join(dir, c.Namespace, "classes.yaml"), cls); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, c.Namespace, "grants.yaml"), b.String())
}

// writeAtomic replaces path in one rename, so a watcher reloading the
// directory never reads half a file.
func writeAtomic(path, body string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// classDoc is one fenced LockClass document; extra is spec lines to add.
func classDoc(name, namespace string, ttl time.Duration, tier, extra, resource string) string {
	return fmt.Sprintf(`apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata:
  name: %s
  namespace: %s
spec:
  purpose: correctness
  enforcement: fenced
  ttl: %s
  tier: %s
%s  resource: %s
`, name, namespace, ttl, tier, extra, resource)
}
