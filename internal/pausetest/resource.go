package pausetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/pkg/fence"
)

// Environment of the owner's commands.
const (
	// EnvToken is the fencing token, in decimal (write and check).
	EnvToken = "LOCK_TOKEN"
	// EnvKey is the lock key, which names the record (every command).
	EnvKey = "LOCK_KEY"
	// EnvValue is the value to write (write only).
	EnvValue = "FENCE_TEST_VALUE"
)

// commandTimeout bounds one run of an owner's command.
const commandTimeout = 30 * time.Second

// stderrLimit is how much of a command's stderr a report keeps (the end).
const stderrLimit = 1024

// Spec says how to reach the resource under test: a reference fence by URL
// (fence.Open), or the owner's own commands. It travels to the holder
// child process on its stdin, so it must be plain data.
type Spec struct {
	// URL is postgres://…?table=NAME or s3://bucket?endpoint=host:port&…
	// (credentials from the environment): a reference fence of pkg/fence.
	URL string `json:"url,omitempty"`
	// Write is the owner's guarded write, run by sh -c with LOCK_TOKEN,
	// LOCK_KEY and FENCE_TEST_VALUE set: exit 0 means the resource accepted
	// the write, any other exit that it rejected it.
	Write string `json:"write,omitempty"`
	// Read prints the value the resource holds for LOCK_KEY (trimmed).
	Read string `json:"read,omitempty"`
	// Check, optional, runs when a holder decides to write (before the
	// pause), for write paths that check the fence in a separate step: a
	// non-zero exit refuses the write.
	Check string `json:"check,omitempty"`
}

// Validate checks that exactly one way to reach the resource is given.
func (s Spec) Validate() error {
	cmds := s.Write != "" || s.Read != "" || s.Check != ""
	switch {
	case s.URL != "" && cmds:
		return errors.New("pausetest: give a resource URL or commands (write, read, check), not both")
	case s.URL != "":
		return nil
	case s.Write == "" && s.Read == "":
		return errors.New("pausetest: no resource: give a URL (postgres://…, s3://…) or a write and a read command")
	case s.Write == "":
		return errors.New("pausetest: a read command needs a write command")
	case s.Read == "":
		return errors.New("pausetest: a write command needs a read command: the kit reads the value back")
	}
	return nil
}

// Open returns the resource and a function that releases it.
func (s Spec) Open(ctx context.Context) (fence.Resource, func(), error) {
	if err := s.Validate(); err != nil {
		return nil, nil, err
	}
	if s.URL == "" {
		return &Commands{WriteCmd: s.Write, ReadCmd: s.Read, CheckCmd: s.Check}, func() {}, nil
	}
	r, closeFn, err := fence.Open(ctx, s.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("pausetest: %w", err)
	}
	return r, closeFn, nil
}

// Commands is a fence.Resource driven by the owner's shell commands, so
// that the owner's real write path is what the kit tests. Each command runs
// under sh -c with the process environment plus LOCK_KEY, and LOCK_TOKEN
// (write, check) and FENCE_TEST_VALUE (write).
type Commands struct {
	// WriteCmd writes FENCE_TEST_VALUE; exit 0 means accepted.
	WriteCmd string
	// ReadCmd prints the record's value.
	ReadCmd string
	// CheckCmd, when set, runs in Prepare; a non-zero exit refuses.
	CheckCmd string
}

// Prepare runs the check command, if any, and returns the write. A check
// that exits non-zero is a rejection (fence.ErrStale).
func (c *Commands) Prepare(ctx context.Context, key string, token uint64) (fence.Write, error) {
	if c.CheckCmd != "" {
		if _, err := runCommand(ctx, "check", c.CheckCmd, commandEnv(EnvKey+"="+key, EnvToken+"="+strconv.FormatUint(token, 10)), true); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context, value string) error {
		_, err := runCommand(ctx, "write", c.WriteCmd, commandEnv(EnvKey+"="+key, EnvToken+"="+strconv.FormatUint(token, 10), EnvValue+"="+value), true)
		return err
	}, nil
}

// Read runs the read command and returns its output, trimmed. A non-zero
// exit is an error, not a rejection.
func (c *Commands) Read(ctx context.Context, key string) (string, error) {
	out, err := runCommand(ctx, "read", c.ReadCmd, commandEnv(EnvKey+"="+key), false)
	return strings.TrimSpace(out), err
}

// Describe names the resource without the commands, which may hold
// credentials.
func (c *Commands) Describe() string {
	if c.CheckCmd != "" {
		return "the owner's commands (--check, --write, --read)"
	}
	return "the owner's commands (--write, --read)"
}

// commandEnv is the process environment without the variables of the kit,
// plus vars ("NAME=value").
func commandEnv(vars ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case EnvToken, EnvKey, EnvValue, EnvHolder:
			continue
		}
		env = append(env, kv)
	}
	return append(env, vars...)
}

// runCommand runs script under sh -c and returns its stdout. A non-zero
// exit is an error carrying the end of stderr, wrapping fence.ErrStale when
// exitRejects; failing to run at all, or a timeout, is never a rejection.
func runCommand(ctx context.Context, what, script string, env []string, exitRejects bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = env
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("pausetest: %s command did not finish within %s: %w", what, commandTimeout, ctx.Err())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return "", fmt.Errorf("pausetest: cannot run the %s command: %w", what, err)
	}
	msg := fmt.Sprintf("%s command exited %d", what, ee.ExitCode())
	if tail := stderrTail(stderr.Bytes()); tail != "" {
		msg += " (stderr: " + tail + ")"
	}
	if exitRejects {
		return "", fmt.Errorf("pausetest: %s: %w", msg, fence.ErrStale)
	}
	return "", errors.New("pausetest: " + msg)
}

// stderrTail is the last stderrLimit bytes of b on one line.
func stderrTail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > stderrLimit {
		s = "…" + s[len(s)-stderrLimit:]
	}
	return strings.Join(strings.Fields(s), " ")
}
