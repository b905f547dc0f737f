package classlint

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// TestWorkflowInvocations parses .gitea/workflows/class-lint.yml and checks
// that every class-lint command line in it names a real subcommand and only
// flags that subcommand defines, so the workflow cannot drift from the tool
// (no runner is available to run it here).
func TestWorkflowInvocations(t *testing.T) {
	data, err := os.ReadFile("../../../.gitea/workflows/class-lint.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Run string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatalf("workflow is not YAML: %v", err)
	}
	root := &cobra.Command{Use: "class-lint"}
	root.AddCommand(newCheckCmd(io.Discard), newCostCmd(io.Discard), newRegisterCmd(io.Discard),
		newCommentCmd(io.Discard, io.Discard), newWebhookCmd(io.Discard))
	expr := regexp.MustCompile(`\$\{\{[^}]*\}\}`)
	seen := map[string]bool{}
	for _, job := range wf.Jobs {
		for _, st := range job.Steps {
			script := strings.ReplaceAll(st.Run, "\\\n", " ")
			for _, line := range strings.Split(script, "\n") {
				line, ok := strings.CutPrefix(strings.TrimSpace(line), `"$RUNNER_TEMP/class-lint"`)
				if !ok {
					continue
				}
				line = expr.ReplaceAllString(line, "1")
				line, _, _ = strings.Cut(line, "||")
				args := shellWords(line)
				cmd, rest, err := root.Find(args)
				if err != nil || cmd == root {
					t.Errorf("workflow runs an unknown subcommand: %q", line)
					continue
				}
				if err := cmd.ParseFlags(rest); err != nil {
					t.Errorf("workflow line %q: %v", line, err)
				}
				seen[cmd.Name()] = true
			}
		}
	}
	for _, want := range []string{"check", "cost", "comment"} {
		if !seen[want] {
			t.Errorf("workflow does not run class-lint %s", want)
		}
	}
}

// shellWords splits a command line on blanks, honouring double quotes.
func shellWords(s string) []string {
	var (
		out    []string
		cur    strings.Builder
		quote  bool
		inWord bool
	)
	for _, r := range s {
		switch {
		case r == '"':
			quote, inWord = !quote, true
		case (r == ' ' || r == '\t') && !quote:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
