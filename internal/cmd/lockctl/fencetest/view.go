package fencetest

import (
	"fmt"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/pausetest"
)

// ReportView is the pause test's report as lockctl prints it. Tokens are
// decimal strings in json and yaml; they are the test's own, released when
// it ended.
type ReportView struct {
	pausetest.Report
	// ResultFile is where the PauseTestResult was written (a PASS only).
	ResultFile string `json:"result_file,omitempty"`
	// ResultObject is the PauseTestResult written to the cluster,
	// "namespace/name" (a PASS with --to-kubernetes only).
	ResultObject string `json:"result_object,omitempty"`
	// ResultCreated says ResultObject was created, not updated.
	ResultCreated bool `json:"-"`
	// ResultCluster is the API server ResultObject was written to.
	ResultCluster string `json:"-"`
	// EarlierResult, on a FAIL, is a result file an earlier run left
	// where this one would have written: it does not describe this run.
	EarlierResult string `json:"-"`
}

// WriteTable renders the report: a summary, then one line per step.
func (v *ReportView) WriteTable(t *printer.Table) {
	outcome := printer.Cell{Text: "PASS", Style: printer.Green}
	if !v.Passed() {
		outcome = printer.Cell{Text: "FAIL", Style: printer.Red}
	}
	t.Field("Outcome", outcome)
	t.Field("Message", printer.Cell{Text: v.Message})
	c := v.Class
	t.Field("Class", printer.Cell{Text: fmt.Sprintf("%s/%s (%s, ttl %s)", c.Namespace, c.Name, c.Enforcement,
		time.Duration(c.TTLSeconds*float64(time.Second)))})
	t.Field("Resource", printer.Cell{Text: fmt.Sprintf("%s, schema version %s: %s", v.Resource, schemaVersion(v.ResourceSchemaVersion), v.Target)})
	t.Field("Keys", printer.Cell{Text: fmt.Sprintf("%s (holders A and B), %s (holder C)", v.Key, v.OtherKey)})
	t.Field("Tokens", printer.Cell{Text: tokens(v.Tokens)})
	for _, s := range v.Steps {
		style := printer.Plain
		switch s.Status {
		case pausetest.StatusFailed:
			style = printer.Red
		case pausetest.StatusSkipped:
			style = printer.Dim
		}
		t.Field(s.Name, printer.Cell{Text: s.Status + ": " + s.Detail, Style: style})
	}
}

// Notes say what to do with the result, and what a PASS does not prove.
func (v *ReportView) Notes() []string {
	ref := v.Class.Namespace + "/" + v.Class.Name
	if !v.Passed() {
		notes := []string{"No result written: fix the fence (docs/fencing.md) and run the test again."}
		if v.EarlierResult != "" {
			notes = append(notes, fmt.Sprintf("%s is from an earlier run: it does not describe this one.", v.EarlierResult))
		}
		return notes
	}
	var notes []string
	if v.ResultFile == "" && v.ResultObject == "" {
		notes = append(notes, "No result written.")
	}
	if v.ResultFile != "" {
		notes = append(notes, fmt.Sprintf("Wrote %s: commit it next to class %s in the class repository. class-lint counts it for a year, "+
			"while the class says resource: %s and resourceSchemaVersion: %s.", v.ResultFile, ref, v.Resource, schemaVersion(v.ResourceSchemaVersion)))
	}
	if v.ResultObject != "" {
		verb := "Updated"
		if v.ResultCreated {
			verb = "Created"
		}
		notes = append(notes, fmt.Sprintf("%s PauseTestResult %s in the cluster at %s: the class controller marks class %s fenced for a year, "+
			"while the class says resource: %s and resourceSchemaVersion: %s.", verb, v.ResultObject, v.ResultCluster, ref, v.Resource, schemaVersion(v.ResourceSchemaVersion)))
	}
	switch {
	case v.Class.Enforcement != "fenced":
		notes = append(notes, fmt.Sprintf("Class %s is %s today: with the result committed it may declare enforcement: fenced.", ref, v.Class.Enforcement))
	case v.Class.Served != "" && v.Class.Served != "fenced":
		notes = append(notes, fmt.Sprintf("Class %s declares fenced and lockd serves it as %s today: it serves it as fenced once it sees a current result.", ref, v.Class.Served))
	}
	return append(notes, "A PASS shows this resource rejected this stale write under this pause; it does not show that every write path to the resource is fenced.")
}

func schemaVersion(s string) string {
	if s == "" {
		return `""`
	}
	return fmt.Sprintf("%q", s)
}

func tokens(tk pausetest.Tokens) string {
	var parts []string
	for _, p := range []struct {
		name string
		v    uint64
	}{{"C", tk.C}, {"A first", tk.AFirst}, {"A", tk.A}, {"B", tk.B}} {
		if p.v != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p.name, p.v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
