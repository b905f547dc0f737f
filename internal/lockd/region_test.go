package lockd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRegionConfigNamesTheFlagAndTheRule(t *testing.T) {
	checkConfigCases(t, []configCase{
		{"no region", func(*Config) {}, ""},
		{"a region and another's endpoint", func(c *Config) {
			c.Region, c.RegionEndpoints = "eu-west", map[string]string{"us-east": "lockd.us-east.example:7420"}
		}, ""},
		{"a region that is not a DNS label", func(c *Config) { c.Region = "EU_West" }, `--region "EU_West": must be a DNS label`},
		{"an endpoint without a port", func(c *Config) { c.RegionEndpoints = map[string]string{"us-east": "lockd.us-east.example"} },
			"--region-endpoint us-east=lockd.us-east.example: the address must be host:port"},
		{"an endpoint of a bad region name", func(c *Config) { c.RegionEndpoints = map[string]string{"US": "h:1"} },
			`--region-endpoint US=h:1: "US" is not a region name`},
	})
}

// TestALockdWithoutARegionRefusesClassesOfSeveralRegions: lockd cannot tell
// its own namespaces from another region's, so it does not start, and says
// which flag to set.
func TestALockdWithoutARegionRefusesClassesOfSeveralRegions(t *testing.T) {
	classes := t.TempDir()
	for ns, region := range map[string]string{"payments": "eu-west", "billing": "us-east"} {
		if err := os.MkdirAll(filepath.Join(classes, ns), 0o755); err != nil {
			t.Fatal(err)
		}
		doc := "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockNamespace\nmetadata: {name: home, namespace: " + ns + "}\nspec: {region: " + region + "}\n"
		if err := os.WriteFile(filepath.Join(classes, ns, "namespace.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.ClassesDir = t.TempDir(), classes
	cfg.Listen, cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0"
	d, err := New(t.Context(), cfg)
	if err == nil {
		d.Close()
		t.Fatal("lockd started without --region on classes of two regions")
	}
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--region: required") || !strings.Contains(err.Error(), "eu-west, us-east") {
		t.Fatalf("New: %v; want ErrConfig naming --region and the regions", err)
	}
}
