package forge_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/lockd-dev/lockd/internal/forge"
	"github.com/lockd-dev/lockd/internal/forge/forgetest"
)

const marker = "<!-- class-lint:review -->"

// env is one Gitea with the author's repository, shared by the subtests;
// each subtest opens its own pull request.
type env struct {
	g    *forgetest.Gitea
	repo *forgetest.Repo
}

func (e env) client(t *testing.T, token string, pageSize int) *forge.Client {
	t.Helper()
	c, err := forge.New(forge.Config{URL: e.g.URL, Token: token, HTTPClient: &http.Client{Timeout: 30 * time.Second}, PageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openPR pushes a branch that appends a line to README and opens a pull
// request of it.
func (e env) openPR(t *testing.T, branch string) forge.PR {
	t.Helper()
	e.repo.Branch(t, branch, "change "+branch, func(dir string) {
		appendFile(t, filepath.Join(dir, "README"), branch+"\n")
	})
	return forge.PR{Owner: e.repo.Owner, Repo: e.repo.Name, Index: e.repo.OpenPR(t, branch, branch)}
}

// markerComments returns the comments on pr that contain the marker.
func (e env) markerComments(t *testing.T, pr forge.PR) []*gitea.Comment {
	t.Helper()
	all, _, err := e.g.Client(t, e.g.Author).ListIssueComments(pr.Owner, pr.Repo, pr.Index,
		gitea.ListIssueCommentOptions{ListOptions: gitea.ListOptions{Page: -1}})
	if err != nil {
		t.Fatal(err)
	}
	var found []*gitea.Comment
	for _, c := range all {
		if strings.Contains(c.Body, marker) {
			found = append(found, c)
		}
	}
	return found
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestForge(t *testing.T) {
	g := forgetest.Start(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README"), []byte("forge test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := env{g: g, repo: g.NewRepo(t, "forge", src, ".")}
	bot := e.client(t, g.Admin.Token, 0)

	t.Run("upsert creates, leaves alone, then edits one comment", func(t *testing.T) {
		pr := e.openPR(t, "upsert")
		ctx := t.Context()
		// The author quoting the marker must not make the bot edit the
		// author's comment.
		if _, _, err := g.Client(t, g.Author).CreateIssueComment(pr.Owner, pr.Repo, pr.Index,
			gitea.CreateIssueCommentOption{Body: "what is " + marker + " for?"}); err != nil {
			t.Fatal(err)
		}
		first, err := bot.Upsert(ctx, pr, marker, "## review\n\nall good\n")
		if err != nil {
			t.Fatal(err)
		}
		if first.Action != forge.Created || first.CommentID == 0 || !strings.Contains(first.URL, fmt.Sprintf("/pulls/%d#issuecomment-%d", pr.Index, first.CommentID)) {
			t.Fatalf("first upsert: %+v, want created with the comment's URL", first)
		}
		again, err := bot.Upsert(ctx, pr, marker, "## review\n\nall good\n")
		if err != nil {
			t.Fatal(err)
		}
		if again != (forge.Result{Action: forge.Unchanged, CommentID: first.CommentID, URL: first.URL}) {
			t.Fatalf("same body again: %+v, want unchanged %d", again, first.CommentID)
		}
		edited, err := bot.Upsert(ctx, pr, marker, "## review\n\none problem\n")
		if err != nil {
			t.Fatal(err)
		}
		if edited.Action != forge.Edited || edited.CommentID != first.CommentID {
			t.Fatalf("new body: %+v, want comment %d edited", edited, first.CommentID)
		}
		found := e.markerComments(t, pr)
		if len(found) != 2 { // the author's question and the bot's review
			t.Fatalf("%d comments hold the marker, want the author's and the bot's", len(found))
		}
		got := found[1]
		if got.ID != first.CommentID || got.Poster.UserName != g.Admin.Name {
			t.Fatalf("second marker comment is %d by %s, want %d by %s", got.ID, got.Poster.UserName, first.CommentID, g.Admin.Name)
		}
		if want := marker + "\n## review\n\none problem\n"; got.Body != want {
			t.Fatalf("stored body %q, want %q", got.Body, want)
		}
	})

	t.Run("upsert reads every page of comments", func(t *testing.T) {
		pr := e.openPR(t, "pages")
		author := g.Client(t, g.Author)
		const n = forge.DefaultPageSize + 10
		for i := range n {
			if _, _, err := author.CreateIssueComment(pr.Owner, pr.Repo, pr.Index,
				gitea.CreateIssueCommentOption{Body: fmt.Sprintf("comment %d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		// The bot's comment is number n+1, on the second page: a search of
		// the first page alone would post a second one.
		first, err := bot.Upsert(t.Context(), pr, marker, "paged")
		if err != nil {
			t.Fatal(err)
		}
		for _, pageSize := range []int{0, 7, n + 1} { // default, many pages, exactly one full page
			again, err := e.client(t, g.Admin.Token, pageSize).Upsert(t.Context(), pr, marker, "paged")
			if err != nil {
				t.Fatal(err)
			}
			if again.Action != forge.Unchanged || again.CommentID != first.CommentID {
				t.Fatalf("page size %d: %+v, want comment %d unchanged", pageSize, again, first.CommentID)
			}
		}
		if found := e.markerComments(t, pr); len(found) != 1 {
			t.Fatalf("%d comments hold the marker after %d others, want 1", len(found), n)
		}
	})

	t.Run("upsert truncates a report over the size limit", func(t *testing.T) {
		pr := e.openPR(t, "big")
		line := strings.Repeat("x", 99) + "\n"
		big := strings.Repeat(line, 2*forge.MaxCommentBytes/len(line))
		first, err := bot.Upsert(t.Context(), pr, marker, big)
		if err != nil {
			t.Fatal(err)
		}
		found := e.markerComments(t, pr)
		if len(found) != 1 {
			t.Fatalf("%d marker comments, want 1", len(found))
		}
		body := found[0].Body
		if len(body) > forge.MaxCommentBytes || !strings.Contains(body, "truncated") || !strings.Contains(body, "CI log") {
			t.Fatalf("stored body has %d bytes (limit %d) and ends %q", len(body), forge.MaxCommentBytes, body[max(len(body)-200, 0):])
		}
		if !strings.HasPrefix(body, marker+"\n"+line) {
			t.Fatalf("stored body starts %q, want the marker and the report", body[:200])
		}
		again, err := bot.Upsert(t.Context(), pr, marker, big)
		if err != nil {
			t.Fatal(err)
		}
		if again.Action != forge.Unchanged || again.CommentID != first.CommentID {
			t.Fatalf("same big report again: %+v, want unchanged", again)
		}
	})

	t.Run("status on the head commit", func(t *testing.T) {
		pr := e.openPR(t, "status")
		head := strings.TrimSpace(e.repo.Git(t, "rev-parse", "HEAD"))
		for _, st := range []forge.State{forge.Success, forge.Failure} {
			sha, err := bot.SetStatus(t.Context(), pr, forge.Status{
				Context: "class-lint", State: st, Description: "class rules", TargetURL: g.URL + "/ci/1",
			})
			if err != nil {
				t.Fatal(err)
			}
			if sha != head {
				t.Fatalf("status set on %s, want the head commit %s", sha, head)
			}
			combined, _, err := g.Client(t, g.Author).GetCombinedStatus(pr.Owner, pr.Repo, head)
			if err != nil {
				t.Fatal(err)
			}
			if len(combined.Statuses) != 1 {
				t.Fatalf("%d statuses on %s, want 1", len(combined.Statuses), head)
			}
			got := combined.Statuses[0]
			if got.Context != "class-lint" || string(got.State) != string(st) || got.TargetURL != g.URL+"/ci/1" || got.Description != "class rules" {
				t.Fatalf("status %+v, want class-lint %s", got, st)
			}
		}
	})

	t.Run("the documented scopes are enough", func(t *testing.T) {
		pr := e.openPR(t, "scopes")
		scoped := e.client(t, g.Token(t, g.Author.Name, "write:issue,write:repository,read:user"), 0)
		if _, err := scoped.Upsert(t.Context(), pr, marker, "scoped"); err != nil {
			t.Fatal(err)
		}
		if _, err := scoped.SetStatus(t.Context(), pr, forge.Status{Context: "class-lint", State: forge.Success}); err != nil {
			t.Fatal(err)
		}
		noUser := e.client(t, g.Token(t, g.Author.Name, "write:issue,write:repository"), 0)
		_, err := noUser.Upsert(t.Context(), pr, marker, "scoped")
		if err == nil || !strings.Contains(err.Error(), "read:user") {
			t.Fatalf("upsert without read:user: %v, want an error naming the scopes", err)
		}
	})

	t.Run("errors say what to do and hide the token", func(t *testing.T) {
		pr := e.openPR(t, "errors")
		const badToken = "0123456789abcdef0123456789abcdef01234567"
		tests := []struct {
			name   string
			client *forge.Client
			pr     forge.PR
			want   string
		}{
			{"bad token", e.client(t, badToken, 0), pr, "refused the token"},
			{"no such pull request", bot, forge.PR{Owner: pr.Owner, Repo: pr.Repo, Index: 999}, "not found"},
			{"no such repository", bot, forge.PR{Owner: pr.Owner, Repo: "nope", Index: 1}, "not found"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := tt.client.Upsert(t.Context(), tt.pr, marker, "body")
				if err == nil {
					t.Fatal("upsert succeeded")
				}
				_, serr := tt.client.SetStatus(t.Context(), tt.pr, forge.Status{Context: "class-lint", State: forge.Success})
				if serr == nil {
					t.Fatal("set status succeeded")
				}
				for _, err := range []error{err, serr} {
					msg := err.Error()
					if !strings.HasPrefix(msg, "forge: ") || !strings.Contains(msg, tt.want) {
						t.Errorf("error %q, want a forge: error saying %q", msg, tt.want)
					}
					for _, tok := range []string{badToken, g.Admin.Token} {
						if strings.Contains(msg, tok) {
							t.Errorf("error %q holds the token", msg)
						}
					}
				}
			})
		}
	})
}

func TestFit(t *testing.T) {
	note := "CI log"
	tests := []struct {
		name  string
		body  string
		limit int
		want  string // prefix of the result
		fence bool   // the result closes a code fence before the note
	}{
		{"fits", "a\nb\n", 4, "a\nb\n", false},
		{"cut on a line boundary", strings.Repeat("line\n", 200), 400, "line\n", false},
		{"cut inside a code block", "## r\n```\n" + strings.Repeat("code\n", 200), 400, "## r\n```\ncode\n", true},
		{"one long line", strings.Repeat("é", 400), 401, "éé", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := forge.Fit(tt.body, tt.limit)
			if len(got) > tt.limit && len(tt.body) > tt.limit {
				t.Fatalf("%d bytes, over the limit %d", len(got), tt.limit)
			}
			if !strings.HasPrefix(got, tt.want) {
				t.Fatalf("result %q does not start %q", got, tt.want)
			}
			if len(tt.body) <= tt.limit {
				if got != tt.body {
					t.Fatalf("result %q, want the body unchanged", got)
				}
				return
			}
			if !strings.Contains(got, note) || !strings.Contains(got, "truncated") {
				t.Fatalf("result %q has no truncation note", got)
			}
			kept, _, _ := strings.Cut(got, "\n**This report")
			if closes := strings.HasSuffix(kept, "```\n"); closes != tt.fence {
				t.Fatalf("closes a fence: %v, want %v (%q)", closes, tt.fence, kept[max(len(kept)-40, 0):])
			}
			kept = strings.TrimSuffix(kept, "```\n")
			if !strings.HasSuffix(kept, "\n") || !strings.HasPrefix(tt.body, strings.TrimSuffix(kept, "\n")) {
				t.Fatalf("kept part %q is not a prefix of the body ending in a line break", kept)
			}
		})
	}
}

func TestParsePR(t *testing.T) {
	tests := []struct {
		repo  string
		index int64
		want  forge.PR
		err   string
	}{
		{"alice/classes", 3, forge.PR{Owner: "alice", Repo: "classes", Index: 3}, ""},
		{"classes", 3, forge.PR{}, "not owner/name"},
		{"a/b/c", 3, forge.PR{}, "not owner/name"},
		{"/b", 3, forge.PR{}, "not owner/name"},
		{"a/b", 0, forge.PR{}, "not positive"},
	}
	for _, tt := range tests {
		t.Run(tt.repo, func(t *testing.T) {
			got, err := forge.ParsePR(tt.repo, tt.index)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "forge: ") {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestNewNeedsURLAndToken(t *testing.T) {
	for _, cfg := range []forge.Config{{Token: "t"}, {URL: "http://127.0.0.1:1"}} {
		if _, err := forge.New(cfg); err == nil || !strings.HasPrefix(err.Error(), "forge: ") {
			t.Errorf("New(%+v): %v, want a forge: error", cfg, err)
		}
	}
}
