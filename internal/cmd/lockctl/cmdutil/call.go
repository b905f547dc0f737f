package cmdutil

import (
	"context"
	"time"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/pkg/client"
)

// Call dials lockd, runs f with a context bounded by timeout, and closes the
// client afterwards: the shape of every read-only command.
func Call(ctx context.Context, dial func() (*client.Client, error), timeout time.Duration,
	f func(context.Context, *client.Client) error) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx, c)
}

// CallConfirmed is Call for the two-person approvals: unless yes, confirm
// shows what will happen and asks; then do runs with a fresh timeout,
// because the operator may take longer to answer than the call timeout.
func CallConfirmed(ctx context.Context, dial func() (*client.Client, error), timeout time.Duration, yes bool,
	confirm, do func(context.Context, *client.Client) error) error {
	return Call(ctx, dial, timeout, func(ctx context.Context, c *client.Client) error {
		if !yes {
			if err := confirm(ctx, c); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return do(ctx, c)
	})
}

// RequireYes refuses a command that asks for confirmation when stdin is not
// a terminal and --yes was not given: lockctl cannot ask. what completes
// "refusing to …".
func RequireYes(stdinTTY, yes bool, what string) error {
	if !yes && !stdinTTY {
		return cli.Usagef("refusing to %s without --yes: stdin is not a terminal, so lockctl cannot ask", what)
	}
	return nil
}
