package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const doc = "# A doc\n\n" +
	"```sh\necho hello\n```\n\n" +
	"<!-- docrun: output -->\n```text\nhello\n```\n" +
	"<!-- docrun: skip needs a cluster -->\n```sh\nkubectl apply -k deploy/\n```\n\n" +
	"```sh\necho token 42\necho done\n```\n<!-- docrun: output -->\n```text\ntoken …\n…\n```\n\n" +
	"```go\nfmt.Println(\"not run\")\n```\n"

func TestParse(t *testing.T) {
	bs, err := parse("d.md", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 3 {
		t.Fatalf("%d blocks, want 3 sh blocks: %+v", len(bs), bs)
	}
	if bs[0].kind != kindRun || bs[0].script != "echo hello\n" || bs[0].line != 3 {
		t.Errorf("block 1: %+v", bs[0])
	}
	if bs[0].output == nil || bs[0].output[0] != "hello" {
		t.Errorf("the output block after block 1 belongs to it: %+v", bs[0].output)
	}
	if bs[1].kind != kindSkip || bs[1].reason != "needs a cluster" {
		t.Errorf("block 2: %+v", bs[1])
	}
	if bs[2].kind != kindRun || len(bs[2].output) != 2 {
		t.Errorf("block 3: %+v", bs[2])
	}
	for _, bad := range []string{
		"<!-- docrun: skip -->\n```sh\nx\n```\n",      // no reason
		"<!-- docrun: sometimes -->\n```sh\nx\n```\n", // unknown
		"```sh\nnever closed\n",
	} {
		if _, err := parse("bad.md", strings.NewReader(bad)); err == nil {
			t.Errorf("parse(%q) accepted it", bad)
		}
	}
}

func TestMatches(t *testing.T) {
	tests := []struct {
		want, got string
		ok        bool
	}{
		{"a\nb", "a\nb", true},
		{"a\nb", "a\nc", false},
		{"a", "a\nextra", false}, // unpromised output fails
		{"token …", "token 281474976710669", true},
		{"…\nlast", "x\ny\nlast", true},
		{"first\n…", "first", true},
		{"…", "", true},
		{"held: …", "held: no", true},
		{"held: no", "held: yes", false},
	}
	for _, tt := range tests {
		if ok, _ := matches(lines(tt.want), lines(tt.got)); ok != tt.ok {
			t.Errorf("matches(%q, %q) = %v, want %v", tt.want, tt.got, ok, tt.ok)
		}
	}
}

// The runner on a tree of its own: the README's blocks pass, and one broken
// line (a misspelt command), a block that writes to stderr, and output the
// doc does not promise each fail.
func TestRunFailsOnABrokenLine(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("good.md", doc)
	write("broken.md", "```sh\necho ok\nehco typo\n```\n")
	write("exit.md", "<!-- docrun: exit 3 -->\n```sh\nexit 3\n```\n")
	write("stderr.md", "```sh\necho oops >&2\n```\n")
	write("unpromised.md", "```sh\necho token 42\necho surprise\n```\n<!-- docrun: output -->\n```text\ntoken …\n```\n")
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	for _, tt := range []struct {
		file   string
		failed int
		say    string
	}{
		{"good.md", 0, "SKIP good.md:"},
		{"broken.md", 1, "it exited 127, the doc says 0"},
		{"exit.md", 0, "PASS exit.md:2"},
		{"stderr.md", 1, "it wrote to stderr"},
		{"unpromised.md", 1, "not what the doc promises"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			var out strings.Builder
			failed, err := Run(context.Background(), Options{Root: root, Files: []string{tt.file}, BlockTimeout: time.Minute}, &out)
			if err != nil {
				t.Fatal(err)
			}
			if failed != tt.failed || !strings.Contains(out.String(), tt.say) {
				t.Fatalf("failed %d (want %d), output lacks %q:\n%s", failed, tt.failed, tt.say, out.String())
			}
		})
	}
}
