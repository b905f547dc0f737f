package cmdutil

import (
	"context"
	"time"

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
