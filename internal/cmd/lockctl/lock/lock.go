// Package lock is `lockctl lock`: hold a lock while a command runs.
package lock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	ossignal "os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
)

// Environment variables set for the command.
const (
	EnvToken = "LOCK_TOKEN"
	EnvKey   = "LOCK_KEY"
	EnvEpoch = "LOCK_EPOCH"
)

// acquireSlack is how much longer than --wait lockctl waits for lockd to
// answer an Acquire before giving up with a timeout.
const acquireSlack = 15 * time.Second

// Options are `lockctl lock`'s inputs.
type Options struct {
	IO     *iostreams.IOStreams
	Client func() (*client.Client, error)
	// Describe renders an error from lockd with what to do about it
	// (cmdutil.Factory.Describe); nil: cmdutil.Describe without a target.
	Describe func(error) string
	// Environ is the environment the command inherits (os.Environ).
	Environ func() []string

	Key     string
	Class   string
	Wait    time.Duration
	Grace   time.Duration
	Command []string
}

// NewCmdLock returns `lockctl lock`. runF, when set, replaces the run
// function (tests).
func NewCmdLock(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Describe: f.Describe, Environ: os.Environ}
	cmd := &cobra.Command{
		Use:   "lock <key> [--wait 30s] [--grace 10s] -- <command> [args...]",
		Short: "Run a command while holding a lock",
		Long: cmdutil.Docf(`
			Acquire <key>, run <command> while the lock is held, then release it.

			The key's class (its TTL, enforcement and posture) is decided in review:
			it is the class of the key's namespace whose spec.keys has the longest
			prefix of the key; lockctl inspect <key> names it. --class is only a
			check: lockd refuses the lock, naming the key's class, if it is another.

			The command inherits stdin, stdout and stderr, and gets these variables
			in its environment:

			  %[1]s  the fencing token, in decimal: present it on every write to
			              the guarded resource (a fenced class rejects stale tokens)
			  %[2]s    the key
			  %[3]s  the token's epoch (diagnostics)

			The command is dead by the lock's local deadline, which passes before the
			store can expire the session and grant the key to someone else. When a
			keepalive fails, lockctl sends SIGTERM --grace before the deadline (at
			once when less time is left) and SIGKILL at the deadline; a keepalive
			that recovers before the SIGTERM cancels both. When lockd says the lock
			is gone (the session expired, operators released it by force, the epoch
			advanced) the command gets SIGKILL at once. lockctl then prints the
			reason on one line to stderr and exits 79. A paused machine is the one
			case no client can cover: only a fenced resource rejects a late write.
			SIGINT, SIGTERM and SIGHUP sent to lockctl are
			forwarded to the command. When stdin is not a terminal the command runs
			in its own process group and signals reach the whole group; on a
			terminal it stays in lockctl's group so job control works (a Ctrl-C from
			the terminal then reaches it directly).

			Exit status:
			  <n>  the command's own exit code (128+signal if a signal killed it)
			  75   timed out waiting for the lock (raise --wait)
			  77   permission denied: no grant for this identity and key
			  69   lockd or its store is unavailable, or lockd is sealed
			  79   the lock was lost while the command ran
			  80   the key is already held by this identity under another
			       session: a leaked hold (lockctl inspect <key>)
			  2    usage error; also when --class names a class that does not
			       own the key, or no class owns the key (the error names the
			       namespace and the key's class)
			  1    any other error
		`, EnvToken, EnvKey, EnvEpoch),
		Example: cmdutil.Example(`
			# Run a migration while holding payments/ledger/migrate (under the key's class)
			$ lockctl lock payments/ledger/migrate -- ./migrate.sh --apply

			# Wait up to two minutes in line; SIGTERM the job 30s before a failing lock's deadline
			$ lockctl lock demo/nightly --wait 2m --grace 30s -- make nightly

			# Use the token in a shell command, and check the key is ledger-writes'
			$ lockctl lock payments/ledger/42 --class ledger-writes -- sh -c 'curl -H "Fencing-Token: $LOCK_TOKEN" ...'
		`),
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) == 0:
				return cli.Usagef("missing <key>: lockctl lock <key> -- <command>")
			case dash < 0:
				return cli.Usagef("missing -- before the command: lockctl lock %s -- <command>", args[0])
			case dash == 0:
				return cli.Usagef("missing <key> before --")
			case dash > 1:
				return cli.Usagef("unexpected argument %q before --: only the key goes there", args[1])
			case len(args) == 1:
				return cli.Usagef("missing command after --")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Key = args[0]
			opts.Command = args[1:]
			if opts.Wait < 0 {
				return cli.Usagef("--wait must not be negative")
			}
			if opts.Grace < 0 {
				return cli.Usagef("--grace must not be negative")
			}
			if runF != nil {
				return runF(opts)
			}
			return lockRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Class, "class", cmdutil.Getenv("LOCKCTL_CLASS"), "the class the key must belong to, \"name\" or \"namespace/name\": a check, refused if the key is another class's (default: the key's own; env LOCKCTL_CLASS)")
	cmd.Flags().DurationVar(&opts.Wait, "wait", envDuration("LOCKCTL_WAIT", 0), "how long to wait in line for the lock; 0 tries once (env LOCKCTL_WAIT)")
	cmd.Flags().DurationVar(&opts.Grace, "grace", envDuration("LOCKCTL_GRACE", 10*time.Second), "when keepalives fail, send SIGTERM this long before the lock's deadline, SIGKILL at it (env LOCKCTL_GRACE)")
	return cmd
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := cmdutil.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func lockRun(opts *Options) error {
	sigs := make(chan os.Signal, 4)
	ossignal.Notify(sigs, forwarded...)
	defer ossignal.Stop(sigs)

	c, err := opts.Client()
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	fence := NewFence(nil)
	l, err := acquire(opts, c, sigs, fence.OnFence)
	if err != nil {
		return err
	}
	if l.Unprotected() {
		arb, seq := l.Spooled()
		fmt.Fprintf(opts.IO.ErrOut, "lockctl: %s was granted without an etcd quorum (class %s is open on quorum loss): unprotected, token 0, "+
			"another holder may hold it at the same time; it ends when quorum returns (grant %d of lockd %s)\n", opts.Key, l.Class(), seq, arb)
	}

	cmd := exec.Command(opts.Command[0], opts.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = opts.IO.In, opts.IO.Out, opts.IO.ErrOut
	cmd.Env = commandEnv(opts.Environ(), l)
	group := !opts.IO.IsStdinTTY()
	if group {
		setGroup(cmd)
	}
	if err := fence.Start(cmd, group); errors.Is(err, ErrFencedBeforeStart) {
		return &cli.ExitError{Code: cli.ExitLockLost, Err: fmt.Errorf("lock %s lost before %q could start (%s): not run", opts.Key, opts.Command[0], lostReason(l.Err()))}
	} else if err != nil {
		release(opts, l)
		return &cli.ExitError{Code: cli.ExitFailure, Err: fmt.Errorf("cannot run %q: %w", opts.Command[0], unwrapExec(err))}
	}
	sup := &Supervision{Lock: l, Fence: fence, Cmd: cmd, Group: group, Grace: opts.Grace, Signals: sigs, Stderr: opts.IO.ErrOut}
	lostErr, err := sup.Run()
	if lostErr != nil {
		return &cli.ExitError{Code: cli.ExitLockLost, Err: lostErr, Silent: true}
	}
	release(opts, l)
	code, ok := exitCode(err)
	if !ok {
		return fmt.Errorf("waiting for %q: %w", opts.Command[0], err)
	}
	if code == 0 {
		return nil
	}
	return &cli.ExitError{Code: code, Silent: true}
}

// acquire takes the lock. A signal while waiting in line abandons the
// wait and exits 128+signal.
func acquire(opts *Options, c *client.Client, sigs <-chan os.Signal, onFence func(*client.Lock)) (*client.Lock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opts.Wait+acquireSlack)
	defer cancel()
	type result struct {
		l   *client.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, opts.Key, opts.Class, onFence, client.Wait(opts.Wait), client.WaitOutLeak(func(h client.LeakedHold) {
			fmt.Fprintln(opts.IO.ErrOut, leakedHoldLine(h, opts.Wait))
		}))
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, &cli.ExitError{
				Code: cmdutil.ExitCodeFor(r.err),
				Err:  fmt.Errorf("cannot lock %s: %s", opts.Key, opts.describe(r.err)),
			}
		}
		return r.l, nil
	case sig := <-sigs:
		cancel()
		if r := <-done; r.err == nil {
			release(opts, r.l)
		}
		return nil, &cli.ExitError{Code: 128 + signalNumber(sig), Err: fmt.Errorf("interrupted while waiting for %s", opts.Key)}
	}
}

func (o *Options) describe(err error) string {
	if o.Describe == nil {
		return cmdutil.Describe(err, "")
	}
	return o.Describe(err)
}

func release(opts *Options, l *client.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		fmt.Fprintf(opts.IO.ErrOut, "lockctl: warning: release %s: %s\n", opts.Key, opts.describe(err))
	}
}

// commandEnv is environ with the lock's variables, replacing any
// inherited ones.
func commandEnv(environ []string, l *client.Lock) []string {
	env := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == EnvToken || name == EnvKey || name == EnvEpoch {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		EnvToken+"="+strconv.FormatUint(l.Token(), 10),
		EnvKey+"="+l.Key(),
		EnvEpoch+"="+strconv.FormatUint(uint64(l.Epoch()), 10),
	)
}

// lostReason says in plain words why a lock was lost. It never includes
// the token.
func lostReason(err error) string {
	switch {
	case errors.Is(err, client.ErrExpired):
		return "session expired at lockd"
	case errors.Is(err, client.ErrDeadline):
		return "no keepalive reached lockd before the local deadline: lockd or etcd unreachable"
	case errors.Is(err, client.ErrForced):
		var fe *client.ForcedError
		if errors.As(err, &fe) && fe.Approver != "" {
			return fmt.Sprintf("released by force by operators: requested by %s, approved by %s (%q)", fe.Requester, fe.Approver, fe.Reason)
		}
		return "released by force by operators"
	case errors.Is(err, client.ErrEpoch):
		return "the store was restored and the epoch advanced"
	case errors.Is(err, client.ErrSessionEnded):
		return "the session was ended: the state of one of its holds could not be confirmed"
	case errors.Is(err, client.ErrClosed):
		return "client closed"
	case err == nil:
		return "unknown reason"
	default:
		return err.Error()
	}
}

func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// leakedHoldLine is what lockctl says, once, when it waits out a hold of
// its own identity under another session.
func leakedHoldLine(h client.LeakedHold, wait time.Duration) string {
	who := "another session"
	if h.Session != 0 {
		who = fmt.Sprintf("session %d", h.Session)
	}
	left := "an unknown time"
	if h.SessionTTLLeft > 0 {
		left = h.SessionTTLLeft.Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("lockctl: %s is held by this same identity under %s (a previous run that crashed, or another process with this SPIFFE ID); "+
		"it lapses in %s unless renewed: waiting up to %s", h.Key, who, left, wait)
}
