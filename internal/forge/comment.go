package forge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"code.gitea.io/sdk/gitea"
)

// MaxCommentBytes caps the body of the review comment. Gitea stores comment
// bodies in a TEXT column (64 KiB on MySQL, where a longer body fails to
// save) and renders the whole body on every page view and API call, so a
// report past this size is cut rather than posted.
const MaxCommentBytes = 65536

// truncatedNote ends a body that was cut to MaxCommentBytes.
const truncatedNote = "\n**This report was truncated** to fit Gitea's comment size limit (%d bytes): the full report is in the CI log.\n"

// Action says what Upsert did to the comment.
type Action string

// The actions Upsert reports.
const (
	// Created means there was no comment with the marker, and one was posted.
	Created Action = "created"
	// Edited means the comment with the marker was edited in place.
	Edited Action = "edited"
	// Unchanged means the comment with the marker already had this body.
	Unchanged Action = "unchanged"
)

// Result is what Upsert did and to which comment.
type Result struct {
	// Action is created, edited or unchanged.
	Action Action
	// CommentID is the comment's ID.
	CommentID int64
	// URL is the comment's web address.
	URL string
}

// Upsert keeps one comment with body on pr, written by the token's user and
// found again by marker, a hidden first line such as
// "<!-- class-lint:review -->". The posted body is the marker line followed
// by body, cut to MaxCommentBytes on a line boundary with a note saying so.
//
// It edits the first comment of the token's user that contains marker, does
// nothing when that comment already has the same body, and posts a new
// comment when there is none. Comments by other users are never touched,
// even when they quote the marker.
func (c *Client) Upsert(ctx context.Context, pr PR, marker, body string) (Result, error) {
	if marker == "" {
		return Result{}, errors.New("forge: empty comment marker: pass a hidden line such as <!-- class-lint:review -->")
	}
	full := Fit(marker+"\n"+body, MaxCommentBytes)
	api, err := c.api(ctx)
	if err != nil {
		return Result{}, err
	}
	me, resp, err := api.GetMyUserInfo()
	if err != nil {
		return Result{}, c.apiError("look up the token's user", resp, err)
	}
	// Gitea answers a comment list of a missing issue with a 500: ask for
	// the pull request first, for a 404 that says what is wrong.
	if _, resp, err := api.GetPullRequest(pr.Owner, pr.Repo, pr.Index); err != nil {
		return Result{}, c.apiError("get pull request "+pr.String(), resp, err)
	}
	old, err := c.find(api, pr, me.ID, marker)
	if err != nil {
		return Result{}, err
	}
	switch {
	case old == nil:
		cm, resp, err := api.CreateIssueComment(pr.Owner, pr.Repo, pr.Index, gitea.CreateIssueCommentOption{Body: full})
		if err != nil {
			return Result{}, c.apiError("comment on "+pr.String(), resp, err)
		}
		return Result{Action: Created, CommentID: cm.ID, URL: cm.HTMLURL}, nil
	case sameBody(old.Body, full):
		return Result{Action: Unchanged, CommentID: old.ID, URL: old.HTMLURL}, nil
	default:
		cm, resp, err := api.EditIssueComment(pr.Owner, pr.Repo, old.ID, gitea.EditIssueCommentOption{Body: full})
		if err != nil {
			return Result{}, c.apiError(fmt.Sprintf("edit comment %d on %s", old.ID, pr), resp, err)
		}
		return Result{Action: Edited, CommentID: cm.ID, URL: cm.HTMLURL}, nil
	}
}

// find returns the first comment on pr by user userID that contains marker,
// or nil. It asks for the comments page by page until a short page, a busy
// pull request having more than one page of them. Gitea 1.26 ignores the
// page on this endpoint and answers every comment on every page, so a page
// that brings no comment not already seen ends the search too.
func (c *Client) find(api *gitea.Client, pr PR, userID int64, marker string) (*gitea.Comment, error) {
	seen := make(map[int64]bool)
	for page := 1; ; page++ {
		opts := gitea.ListIssueCommentOptions{ListOptions: gitea.ListOptions{Page: page, PageSize: c.cfg.PageSize}}
		comments, resp, err := api.ListIssueComments(pr.Owner, pr.Repo, pr.Index, opts)
		if err != nil {
			return nil, c.apiError(fmt.Sprintf("list comments on %s (page %d)", pr, page), resp, err)
		}
		fresh := 0
		for _, cm := range comments {
			if seen[cm.ID] {
				continue
			}
			seen[cm.ID] = true
			fresh++
			if cm.Poster != nil && cm.Poster.ID == userID && strings.Contains(cm.Body, marker) {
				return cm, nil
			}
		}
		if len(comments) < c.cfg.PageSize || fresh == 0 {
			return nil, nil
		}
	}
}

// sameBody reports whether a stored comment body equals the one about to be
// posted; Gitea stores line endings as sent, but a browser edit turns them
// into CRLF.
func sameBody(stored, body string) bool {
	return strings.ReplaceAll(stored, "\r\n", "\n") == body
}

// Fit returns body unchanged when it has at most limit bytes. Otherwise it
// cuts body at the last line break that leaves room for a closing code fence
// (when the cut is inside one) and a note saying the report was truncated and
// the full report is in the CI log, and appends them. The result has at most
// limit bytes (for any limit above a few hundred) and is valid UTF-8 when
// body is.
func Fit(body string, limit int) string {
	if len(body) <= limit {
		return body
	}
	note := fmt.Sprintf(truncatedNote, limit)
	const fence = "```\n"
	room := max(limit-len(note)-len(fence)-1, 0) // -1: the line break added below
	cut := body[:room]
	if i := strings.LastIndexByte(cut, '\n'); i >= 0 {
		cut = cut[:i+1]
	} else {
		// One line longer than the limit: cut it at a rune boundary.
		for len(cut) > 0 && !utf8.RuneStart(body[len(cut)]) {
			cut = cut[:len(cut)-1]
		}
		cut += "\n"
	}
	if openFence(cut) {
		cut += fence
	}
	return cut + note
}

// openFence reports whether s ends inside a ``` code block.
func openFence(s string) bool {
	open := false
	for line := range strings.Lines(s) {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			open = !open
		}
	}
	return open
}
