package classdir

import (
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
)

// TestWrittenClassesLoad: what the gate and the benchmark run lockd with
// is a class set lockd accepts, with the durable twin when asked.
func TestWrittenClassesLoad(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Fenced{Namespace: "gate", Name: "fenced", DurableName: "fenced-durable", Resource: "r", TTL: 6 * time.Second,
		OpenName: "cache", OpenTTL: 30 * time.Second},
		[]string{"spiffe://gate.local/w/0", "spiffe://gate.local/w/1"}); err != nil {
		t.Fatal(err)
	}
	set, err := class.LoadDir(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]class.Fairness{"fenced": class.FairnessBestEffort, "fenced-durable": class.FairnessDurable} {
		c, ok := set.Class("gate", name)
		if !ok || c.Fairness != want || c.TTL != 6*time.Second || c.Enforcement != class.EnforcementFenced {
			t.Errorf("class %s: %+v (found %v), want fenced, 6s, %s", name, c, ok, want)
		}
	}
	if c, ok := set.Class("gate", "cache"); !ok || c.OnQuorumLoss != class.QuorumLossOpen || c.Enforcement != class.EnforcementAdvisory || c.TTL != 30*time.Second {
		t.Errorf("class cache: %+v (found %v), want advisory, open on quorum loss, 30s", c, ok)
	}
	for key, want := range map[string]string{"gate/k0": "fenced", "gate/d/k1": "fenced-durable", "gate/o/0": "cache"} {
		if c, ok := set.Owner(key); !ok || c.Name != want {
			t.Errorf("key %s: class %v (found %v), want %s", key, c, ok, want)
		}
	}
	if n := len(set.Grants()); n != 2 {
		t.Errorf("%d grants, want 2", n)
	}
}
