package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestAClassDeclaredFencedIsServedAsAdvisoryWithoutACurrentPauseTest: lockd
// claims fenced only for a class a current PauseTestResult proves, and says
// why in DescribeClass and ListClasses for one it does not.
func TestAClassDeclaredFencedIsServedAsAdvisoryWithoutACurrentPauseTest(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	raw, _ := env.Raw(t, lockdtest.Operator)
	describe := func(ns, name string) *lockv1.LockClass {
		t.Helper()
		resp, err := raw.DescribeClass(t.Context(), &lockv1.DescribeClassRequest{Namespace: ns, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetClass()
	}

	std := describe("t", "std")
	if std.GetEnforcement() != "fenced" || std.GetDeclaredEnforcement() != "fenced" || !std.GetFenceProof().GetProven() ||
		std.GetFenceProof().GetReason() != "PauseTestCurrent" || std.GetFenceProof().GetResult() != "t/std" ||
		time.Until(std.GetFenceProof().GetUntil().AsTime()) < 300*24*time.Hour {
		t.Fatalf("t/std, proven by a pause test run an hour ago: %v", std)
	}
	other := describe("other", "std")
	if other.GetEnforcement() != "advisory" || other.GetDeclaredEnforcement() != "fenced" || other.GetFenceProof().GetProven() ||
		other.GetFenceProof().GetReason() != "NoResource" || !strings.Contains(other.GetFenceProof().GetMessage(), "spec.resource") {
		t.Fatalf("other/std, which names no resource: %v", other)
	}
	cache := describe("other", "cache")
	if cache.GetEnforcement() != "advisory" || cache.GetDeclaredEnforcement() != "advisory" || cache.GetFenceProof() != nil {
		t.Fatalf("other/cache, declared advisory: %v", cache)
	}

	// The resource's schema changes and the class says so: the results
	// were run against the old schema, so nothing proves t/std any more.
	path := filepath.Join(env.ClassesDir, "t", "classes.yaml")
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(body), "metadata: {name: std, namespace: t}\nspec:\n", "metadata: {name: std, namespace: t}\nspec:\n  resourceSchemaVersion: \"2\"\n", 1)
	if changed == string(body) {
		t.Fatal("class t/std not found in the test classes")
	}
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for describe("t", "std").GetEnforcement() != "advisory" {
		if time.Now().After(deadline) {
			t.Fatalf("t/std still served fenced after its schema version changed: %v", describe("t", "std"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	std = describe("t", "std")
	if std.GetFenceProof().GetReason() != "SchemaVersionChanged" || std.GetDeclaredEnforcement() != "fenced" {
		t.Fatalf("t/std after the schema changed: %v", std)
	}
	list, err := raw.ListClasses(t.Context(), &lockv1.ListClassesRequest{Namespace: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.GetClasses() {
		if want := map[string]string{"std": "advisory", "fast": "fenced", "fifo": "fenced"}[c.GetName()]; c.GetEnforcement() != want {
			t.Errorf("ListClasses: %s served %s, want %s", c.GetName(), c.GetEnforcement(), want)
		}
	}
}
