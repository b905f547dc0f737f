package classlint

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/forge"
)

// commentMarker is the hidden first line of class-lint's pull-request
// comment, by which the next run finds the comment again to edit it.
const commentMarker = "<!-- class-lint:review -->"

// statusContext names class-lint's commit status.
const statusContext = "class-lint"

// tokenEnv is the environment variable holding the Gitea access token. The
// token is never a flag: flags end up in shell history and process lists.
const tokenEnv = "GITEA_TOKEN"

// CommentOptions are the options of class-lint comment.
type CommentOptions struct {
	GiteaURL      string
	Repo          string
	PR            int64
	Dir           string
	Base          string
	PrometheusURL string
	TargetURL     string
	// Token is the Gitea access token, from GITEA_TOKEN.
	Token      string
	HTTPClient *http.Client
	Now        func() time.Time
	Out        io.Writer
	ErrOut     io.Writer
}

func newCommentCmd(stdout, stderr io.Writer) *cobra.Command {
	opts := CommentOptions{Now: time.Now, Out: stdout, ErrOut: stderr}
	cmd := &cobra.Command{
		Use:   "comment --gitea-url URL --repo OWNER/NAME --pr N",
		Short: "Post the review of a class directory on a Gitea pull request",
		Long: `comment runs the class rules, lists the rehomes against --base (keys that move
to a class of another tier or to one open on quorum loss, or lose their class;
this needs only git) and, with --prometheus, prices the renewal cost of the
change; it posts the result as one comment on the pull request, and sets the
class-lint commit status on the pull request's head commit.

Each run edits the same comment, found again by a hidden marker; a run whose
review is unchanged leaves the comment alone. A review longer than Gitea's
comment limit is truncated, with a note pointing to the CI log.

The Gitea access token comes from the ` + tokenEnv + ` environment variable; it needs the
write:issue, write:repository and read:user scopes.

Exit status: 0 when the rules pass, 1 when they fail (after posting), 2 on a
usage error or when Gitea refuses the request, 69 when Gitea or Prometheus
cannot be reached (refused, no such host, timed out or a 5xx).`,
		Example: `  GITEA_TOKEN=… class-lint comment --gitea-url https://gitea.example.com \
      --repo platform/lock-classes --pr 42 --base origin/main`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Token = os.Getenv(tokenEnv)
			opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
			return commentRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.GiteaURL, "gitea-url", "", "Gitea base URL, such as https://gitea.example.com (required)")
	f.StringVar(&opts.Repo, "repo", "", "repository of the pull request, as owner/name (required)")
	f.Int64Var(&opts.PR, "pr", 0, "pull request number (required)")
	f.StringVar(&opts.Dir, "dir", "classes", "class directory to review")
	f.StringVar(&opts.Base, "base", "", "git ref the rehomes and the cost report compare the classes with, such as origin/main (default origin/main, then main, then HEAD)")
	f.StringVar(&opts.PrometheusURL, "prometheus", "", "Prometheus URL to price the renewal cost of TTL changes (default: no cost report)")
	f.Var(&nowFlag{now: &opts.Now}, "now", "review as of this RFC 3339 time instead of the clock (for reproducible reports)")
	f.StringVar(&opts.TargetURL, "target-url", "", "link for the commit status, such as the CI job (default: the review comment)")
	return cmd
}

// commentRun reviews opts.Dir, posts the review on the pull request and
// sets the commit status. Failed rules are a silent ExitViolations (the
// review says what they are); an unreachable Gitea or Prometheus exits 69
// and any other error 2 (Main's classify).
func commentRun(ctx context.Context, opts CommentOptions) error {
	if opts.Token == "" {
		return cli.Usagef("set %s to a Gitea access token with the write:issue, write:repository and read:user scopes", tokenEnv)
	}
	if opts.GiteaURL == "" {
		return cli.Usagef("--gitea-url is required, such as --gitea-url https://gitea.example.com")
	}
	pr, err := forge.ParsePR(opts.Repo, opts.PR)
	if err != nil {
		return cli.Usagef("%v: pass --repo owner/name and --pr N", err)
	}
	client, err := forge.New(forge.Config{URL: opts.GiteaURL, Token: opts.Token, HTTPClient: opts.HTTPClient})
	if err != nil {
		return cli.Usage(err)
	}

	body, failed, err := review(ctx, reviewOptions{
		Dir: opts.Dir, Base: opts.Base, PrometheusURL: opts.PrometheusURL, Now: opts.Now,
	})
	if err != nil {
		return err
	}

	res, err := client.Upsert(ctx, pr, commentMarker, body)
	if err != nil {
		return err
	}
	st := forge.Status{Context: statusContext, State: forge.Success, Description: "class rules pass", TargetURL: opts.TargetURL}
	if failed {
		st.State, st.Description = forge.Failure, "class rules fail: see the review comment"
	}
	if st.TargetURL == "" {
		st.TargetURL = res.URL
	}
	if _, err := client.SetStatus(ctx, pr, st); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "%s: review %s: %s\n", pr, res.Action, res.URL)
	if failed {
		return &cli.ExitError{Code: ExitViolations, Silent: true}
	}
	return nil
}
