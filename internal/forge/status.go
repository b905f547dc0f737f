package forge

import (
	"context"
	"errors"
	"fmt"

	"code.gitea.io/sdk/gitea"
)

// State is the state of a commit status.
type State string

// The states a review sets.
const (
	// Success marks the check as passed.
	Success State = "success"
	// Failure marks the check as failed; branch protection that requires
	// the status then blocks the merge.
	Failure State = "failure"
)

// Status is a commit status: one check's verdict on a commit.
type Status struct {
	// Context names the check, such as "class-lint"; a newer status with
	// the same context replaces the older one.
	Context string
	// State is Success or Failure.
	State State
	// Description is a short summary shown next to the check.
	Description string
	// TargetURL is the link behind the check, such as the review comment
	// or the CI job; empty means none.
	TargetURL string
}

// SetStatus sets st on the head commit of pr, the commit the review was made
// of, and returns that commit's SHA.
func (c *Client) SetStatus(ctx context.Context, pr PR, st Status) (string, error) {
	if st.Context == "" {
		return "", errors.New("forge: commit status without a context: name the check, such as class-lint")
	}
	if st.State != Success && st.State != Failure {
		return "", fmt.Errorf("forge: commit status state %q: use success or failure", st.State)
	}
	api, err := c.api(ctx)
	if err != nil {
		return "", err
	}
	p, resp, err := api.GetPullRequest(pr.Owner, pr.Repo, pr.Index)
	if err != nil {
		return "", c.apiError("get pull request "+pr.String(), resp, err)
	}
	if p.Head == nil || p.Head.Sha == "" {
		return "", fmt.Errorf("forge: pull request %s has no head commit: check it is a pull request, not an issue", pr)
	}
	_, resp, err = api.CreateStatus(pr.Owner, pr.Repo, p.Head.Sha, gitea.CreateStatusOption{
		State:       gitea.StatusState(st.State),
		Context:     st.Context,
		Description: st.Description,
		TargetURL:   st.TargetURL,
	})
	if err != nil {
		return "", c.apiError(fmt.Sprintf("set status %s on %s (commit %s)", st.Context, pr, p.Head.Sha), resp, err)
	}
	return p.Head.Sha, nil
}
