package classlint

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"code.gitea.io/sdk/gitea"

	"github.com/lockd-dev/lockd/internal/forge/forgetest"
)

func TestCommentUsage(t *testing.T) {
	tests := []struct {
		name  string
		token string
		args  []string
		want  string
	}{
		{"no token", "", []string{"--gitea-url", "http://127.0.0.1:1", "--repo", "a/b", "--pr", "1"}, "set GITEA_TOKEN"},
		{"no url", "t0ken", []string{"--repo", "a/b", "--pr", "1"}, "--gitea-url is required"},
		{"no repo", "t0ken", []string{"--gitea-url", "http://127.0.0.1:1", "--pr", "1"}, "pass --repo owner/name"},
		{"bad repo", "t0ken", []string{"--gitea-url", "http://127.0.0.1:1", "--repo", "b", "--pr", "1"}, "not owner/name"},
		{"no pr", "t0ken", []string{"--gitea-url", "http://127.0.0.1:1", "--repo", "a/b"}, "not positive"},
		{"token as a flag", "t0ken", []string{"--token", "x"}, "unknown flag"},
		{"an argument", "t0ken", []string{"classes"}, "unknown command"},
		{"bad --now", "t0ken", []string{"--gitea-url", "http://127.0.0.1:1", "--repo", "a/b", "--pr", "1", "--now", "today"}, "RFC 3339"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tokenEnv, tt.token)
			var out, errOut bytes.Buffer
			if code := Main(append([]string{"comment"}, tt.args...), &out, &errOut); code != ExitUsage {
				t.Fatalf("exit %d, want %d; out %q err %q", code, ExitUsage, out.String(), errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.want) {
				t.Fatalf("stderr %q does not say %q", errOut.String(), tt.want)
			}
		})
	}
}

// commentFixture is a class repository that passes every rule at
// fixtureNow: a fenced class with a current pause-test result. (The
// repository's own example classes fail fenced-pause-test until the fencing
// kit has run against their resources.)
var commentFixture = filepath.Join("testdata", "rules", "ttl-range", "pass")

// TestComment runs class-lint comment against a real Gitea: the author
// pushes a class repository, opens a pull request that changes a TTL, and
// the bot (the admin) reviews it.
func TestComment(t *testing.T) {
	g := forgetest.Start(t)
	repo := g.NewRepo(t, "lock-classes", commentFixture, "classes")
	classFile := filepath.Join(repo.Dir, "classes", "payments", "classes.yaml")
	repo.Branch(t, "slower-ledger", "ledger-writes: ttl 10s", func(string) {
		setTTL(t, classFile, "5s", "10s")
	})
	pr := repo.OpenPR(t, "slower-ledger", "ledger-writes: ttl 10s")
	head := strings.TrimSpace(repo.Git(t, "rev-parse", "HEAD"))
	author := g.Client(t, g.Author)
	t.Setenv(tokenEnv, g.Admin.Token)

	run := func(t *testing.T, wantCode int, wantAction string, extra ...string) {
		t.Helper()
		args := append([]string{"comment", "--gitea-url", g.URL, "--repo", repo.Owner + "/" + repo.Name,
			"--pr", strconv.FormatInt(pr, 10), "--dir", filepath.Join(repo.Dir, "classes"), "--now", fixtureNow}, extra...)
		var out, errOut bytes.Buffer
		code := Main(args, &out, &errOut)
		if strings.Contains(out.String()+errOut.String(), g.Admin.Token) {
			t.Fatal("class-lint comment printed the token")
		}
		if code != wantCode {
			t.Fatalf("exit %d, want %d; out %q err %q", code, wantCode, out.String(), errOut.String())
		}
		if wantAction == "" {
			return
		}
		line := strings.TrimSpace(out.String())
		if strings.Count(line, "\n") != 0 || !strings.Contains(line, "review "+wantAction+": "+g.URL+"/") {
			t.Fatalf("output %q, want one line saying the review was %s, with its URL", out.String(), wantAction)
		}
	}
	// review returns the one comment holding the marker.
	review := func(t *testing.T) *gitea.Comment {
		t.Helper()
		all, _, err := author.ListIssueComments(repo.Owner, repo.Name, pr, gitea.ListIssueCommentOptions{ListOptions: gitea.ListOptions{Page: -1}})
		if err != nil {
			t.Fatal(err)
		}
		var found []*gitea.Comment
		for _, c := range all {
			if strings.Contains(c.Body, commentMarker) {
				found = append(found, c)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d comments hold the marker, want 1", len(found))
		}
		if found[0].Poster.UserName != g.Admin.Name {
			t.Fatalf("review posted by %s, want %s", found[0].Poster.UserName, g.Admin.Name)
		}
		return found[0]
	}
	status := func(t *testing.T, want gitea.StatusState, targetURL string) {
		t.Helper()
		combined, _, err := author.GetCombinedStatus(repo.Owner, repo.Name, head)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range combined.Statuses {
			if s.Context == statusContext {
				if s.State != want || s.TargetURL != targetURL {
					t.Fatalf("status %s %s → %s, want %s → %s", s.Context, s.State, s.TargetURL, want, targetURL)
				}
				return
			}
		}
		t.Fatalf("no %s status on the head commit %s: %+v", statusContext, head, combined.Statuses)
	}

	// An author's comment first, so the bot's is not the only one.
	if _, _, err := author.CreateIssueComment(repo.Owner, repo.Name, pr, gitea.CreateIssueCommentOption{Body: "please review"}); err != nil {
		t.Fatal(err)
	}

	run(t, ExitOK, "created")
	first := review(t)
	if !strings.HasPrefix(first.Body, commentMarker+"\n") {
		t.Fatalf("review body starts %q, want the marker line", first.Body[:min(len(first.Body), 80)])
	}
	status(t, gitea.StatusSuccess, first.HTMLURL)

	run(t, ExitOK, "unchanged")
	if again := review(t); again.ID != first.ID || again.Body != first.Body {
		t.Fatalf("unchanged run left comment %d, want %d with the same body", again.ID, first.ID)
	}

	// A work-tree change that adds a warning changes the review but does
	// not fail it: the same comment is edited.
	appendFile(t, classFile, advisoryClass)
	run(t, ExitOK, "edited", "--target-url", "https://ci.example.com/job/7")
	edited := review(t)
	if edited.ID != first.ID || edited.Body == first.Body || !strings.Contains(edited.Body, "waiver-expiring") {
		t.Fatalf("edit left comment %d (body changed: %v), want %d naming waiver-expiring:\n%s", edited.ID, edited.Body != first.Body, first.ID, edited.Body)
	}
	status(t, gitea.StatusSuccess, "https://ci.example.com/job/7")

	// A TTL below the floor fails the review: exit 1 after posting, and a
	// failure status.
	setTTL(t, classFile, "10s", "2s")
	run(t, ExitViolations, "edited")
	failed := review(t)
	if failed.ID != first.ID || !strings.Contains(failed.Body, "spec.ttl") {
		t.Fatalf("failing review is comment %d, want %d naming spec.ttl:\n%s", failed.ID, first.ID, failed.Body)
	}
	status(t, gitea.StatusFailure, failed.HTMLURL)

	t.Run("forge errors exit 2 without the token", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := Main([]string{"comment", "--gitea-url", g.URL, "--repo", repo.Owner + "/nope", "--pr", "1",
			"--dir", filepath.Join(repo.Dir, "classes")}, &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), "forge: ") || strings.Contains(errOut.String(), g.Admin.Token) {
			t.Fatalf("exit %d, stderr %q; want 2 and a forge: error without the token", code, errOut.String())
		}
	})
}

// advisoryClass is an advisory class whose waiver lapses three weeks after
// fixtureNow: a warning, not a violation.
const advisoryClass = `---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata:
  name: report-export
  namespace: payments
spec:
  keys: ["payments/reports/"]
  purpose: correctness
  enforcement: advisory
  ttl: 60s
  tier: entity
  resource: reports-bucket
  riskOwner: payments-oncall
  waiverExpires: "2026-12-20"
`

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, s...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setTTL replaces the one "ttl: from" in the class file at path with
// "ttl: to".
func setTTL(t *testing.T, path, from, to string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, repl := "ttl: "+from+"\n", "ttl: "+to+"\n"
	if n := bytes.Count(b, []byte(old)); n != 1 {
		t.Fatalf("%s holds %q %d times, want once", path, old, n)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(repl), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}
