// Package forge posts a bot's review on a Gitea pull request: one issue
// comment that the bot edits in place on every run (found again by a hidden
// marker), and a commit status on the pull request's head commit.
//
// It talks to Gitea through code.gitea.io/sdk/gitea with the HTTP client the
// caller gives it. Errors start with "forge:" and never contain the token.
package forge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"code.gitea.io/sdk/gitea"
)

// DefaultPageSize is the number of comments asked for per page when looking
// for the bot's comment. It is Gitea's default [api] MAX_RESPONSE_ITEMS: a
// larger page size would be capped by the server, the page would come back
// short, and the search would stop early.
const DefaultPageSize = 50

// Config says which Gitea to talk to and as whom.
type Config struct {
	// URL is the Gitea base URL, such as https://gitea.example.com.
	URL string
	// Token is a Gitea access token. Posting a review needs the
	// write:issue, write:repository and read:user scopes; the token's user
	// is the one whose comment is edited.
	Token string
	// HTTPClient sends the requests; nil means a client with no timeout,
	// so give one with a Timeout in commands.
	HTTPClient *http.Client
	// PageSize is the number of comments per page when listing them;
	// zero means DefaultPageSize.
	PageSize int
}

// Client posts reviews on one Gitea. It holds no connection state, and its
// methods may be called concurrently.
type Client struct {
	cfg Config
}

// New returns a Client for cfg. It does not contact Gitea.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("forge: no Gitea URL: pass the server's base URL, such as https://gitea.example.com")
	}
	if cfg.Token == "" {
		return nil, errors.New("forge: no Gitea token: create an access token with the write:issue, write:repository and read:user scopes")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	cfg.URL = strings.TrimSuffix(cfg.URL, "/")
	return &Client{cfg: cfg}, nil
}

// PR names a pull request.
type PR struct {
	// Owner is the user or organization that owns the repository.
	Owner string
	// Repo is the repository name.
	Repo string
	// Index is the pull request number.
	Index int64
}

// ParsePR returns the pull request number index of repo, written owner/name.
func ParsePR(repo string, index int64) (PR, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return PR{}, fmt.Errorf("forge: repository %q is not owner/name", repo)
	}
	if index <= 0 {
		return PR{}, fmt.Errorf("forge: pull request number %d is not positive", index)
	}
	return PR{Owner: owner, Repo: name, Index: index}, nil
}

// String returns owner/repo#index.
func (p PR) String() string { return fmt.Sprintf("%s/%s#%d", p.Owner, p.Repo, p.Index) }

// api returns an SDK client bound to ctx. The SDK keeps one context per
// client, so each call gets its own; it skips the SDK's server-version probe,
// which would cost a request per call and which every supported Gitea passes.
func (c *Client) api(ctx context.Context) (*gitea.Client, error) {
	api, err := gitea.NewClient(c.cfg.URL,
		gitea.SetToken(c.cfg.Token),
		gitea.SetHTTPClient(c.cfg.HTTPClient),
		gitea.SetContext(ctx),
		gitea.SetGiteaVersion(""),
	)
	if err != nil {
		return nil, fmt.Errorf("forge: Gitea client for %s: %w", c.cfg.URL, err)
	}
	return api, nil
}

// ErrUnreachable: Gitea could not be reached or could not answer: the
// connection was refused, the name did not resolve, the request timed out,
// or Gitea answered with a 5xx. Errors wrapping it name the URL; test for
// it with errors.Is.
var ErrUnreachable = errors.New("cannot reach Gitea")

// apiError wraps an error from the SDK with what was being done and, for the
// status codes that have one, what to do about it. A failure to reach Gitea
// wraps ErrUnreachable.
func (c *Client) apiError(what string, resp *gitea.Response, err error) error {
	if unreachable(resp, err) {
		return fmt.Errorf("forge: %s: %w at %s (check --gitea-url and that Gitea is up): %w", what, ErrUnreachable, c.cfg.URL, err)
	}
	hint := ""
	if resp != nil {
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			hint = " (Gitea refused the token: check it is valid and not expired)"
		case http.StatusForbidden:
			hint = " (the token lacks permission: it needs the write:issue, write:repository and read:user scopes, and write access to the repository)"
		case http.StatusNotFound:
			hint = " (not found: check the repository and pull request number, and that the token's user can see them)"
		}
	}
	return fmt.Errorf("forge: %s%s: %w", what, hint, err)
}

// unreachable reports whether a request got no usable answer: a 5xx, or no
// response at all because the transport failed (the HTTP client's
// *url.Error, or a net.Error). It reads types and status codes, never
// error text.
func unreachable(resp *gitea.Response, err error) bool {
	if resp != nil && resp.Response != nil {
		return resp.StatusCode >= 500
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne)
}
