package pausetest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/class"
)

// Result is a passing pause test as class-lint reads it: the
// PauseTestResult document that is committed next to the class. The kit
// writes one only when every check passed.
//
// A Result records that this resource, at this schema version, rejected
// this stale write under this pause. It cannot show that every write path
// to the resource is fenced: a write path that skips the fence is not
// exercised by the test.
type Result struct {
	// Namespace is the class's namespace (metadata.namespace).
	Namespace string
	// Class is the class's name (metadata.name and spec.class).
	Class string
	// Resource is the class's spec.resource.
	Resource string
	// ResourceSchemaVersion is the resource's schema version label; it must
	// equal the class's spec.resourceSchemaVersion for the result to count.
	ResourceSchemaVersion string
	// RanAt is when the test ran (UTC, whole seconds).
	RanAt time.Time
	// FirstToken is the paused holder's token; SecondToken the next
	// holder's. They are evidence, not capabilities: both holds were
	// released when the test ended.
	FirstToken, SecondToken uint64
}

// Expires is when the result stops counting: RanAt plus
// class.PauseTestValidity (a year).
func (r Result) Expires() time.Time { return r.RanAt.Add(class.PauseTestValidity) }

// FileName is the default file name of the result: pausetest-<class>.yaml.
func (r Result) FileName() string { return "pausetest-" + r.Class + ".yaml" }

// YAML renders the PauseTestResult document, with a comment saying what it
// proves and where it belongs.
func (r Result) YAML() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by `lockctl fence-test`: the pause test passed against %s.\n", r.Resource)
	fmt.Fprintf(&b, "# Commit this file next to class %s/%s in the class repository.\n", r.Namespace, r.Class)
	b.WriteString("# It proves the resource rejected a paused holder's stale write at this schema\n")
	b.WriteString("# version; it cannot prove that every write path to the resource is fenced.\n")
	b.WriteString("# The tokens are the test's own, released when it ended: evidence, not capabilities.\n")
	fmt.Fprintf(&b, "apiVersion: %s\n", class.APIVersion)
	fmt.Fprintf(&b, "kind: %s\n", class.KindPauseTestResult)
	b.WriteString("metadata:\n")
	fmt.Fprintf(&b, "  name: %s\n", quote(r.Class))
	fmt.Fprintf(&b, "  namespace: %s\n", quote(r.Namespace))
	b.WriteString("spec:\n")
	fmt.Fprintf(&b, "  class: %s\n", quote(r.Class))
	fmt.Fprintf(&b, "  resource: %s\n", quote(r.Resource))
	fmt.Fprintf(&b, "  resourceSchemaVersion: %s\n", quote(r.ResourceSchemaVersion))
	fmt.Fprintf(&b, "  outcome: %s\n", class.PauseTestOutcomePass)
	fmt.Fprintf(&b, "  ranAt: %s\n", quote(r.RanAt.UTC().Format(time.RFC3339)))
	fmt.Fprintf(&b, "  expires: %s\n", quote(r.Expires().UTC().Format(time.RFC3339)))
	b.WriteString("  tokens:\n")
	fmt.Fprintf(&b, "    first: %s\n", quote(strconv.FormatUint(r.FirstToken, 10)))
	fmt.Fprintf(&b, "    second: %s\n", quote(strconv.FormatUint(r.SecondToken, 10)))
	return []byte(b.String())
}

// quote renders s as a double-quoted YAML scalar: a JSON string is one.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
