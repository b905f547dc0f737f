package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

// Options are docrun's flags.
type Options struct {
	// Root is the tree to copy (default: the current directory).
	Root string
	// Files are the Markdown files, relative to Root.
	Files []string
	// BlockTimeout bounds each block; ReadyTimeout the served lockd's start.
	BlockTimeout, ReadyTimeout time.Duration
	// ReadyURL is what a served block is ready at; ReadyFile must exist too.
	ReadyURL, ReadyFile string
	// Keep leaves the copy in place (its path is printed).
	Keep bool
}

func run(args []string, out io.Writer) int {
	o := Options{}
	fs := flag.NewFlagSet("docrun", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.Root, "root", ".", "the tree to copy and run in")
	fs.DurationVar(&o.BlockTimeout, "block-timeout", 4*time.Minute, "longest a block may run")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 3*time.Minute, "longest a served lockd may take to be ready (go run compiles it first)")
	fs.StringVar(&o.ReadyURL, "ready-url", "http://127.0.0.1:7421/readyz", "a served block is ready when this answers 200")
	fs.StringVar(&o.ReadyFile, "ready-file", ".lockd/lockctl.yaml", "and this file exists in the copy")
	fs.BoolVar(&o.Keep, "keep", false, "keep the copy of the tree")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Files = fs.Args()
	if len(o.Files) == 0 {
		fmt.Fprintln(out, "docrun: name the Markdown files to run, e.g. go run ./ci/docrun README.md docs/*.md")
		return 2
	}
	failed, err := Run(context.Background(), o, out)
	if err != nil {
		fmt.Fprintf(out, "docrun: %v\n", err)
		return 1
	}
	if failed > 0 {
		fmt.Fprintf(out, "docrun: %d block(s) failed\n", failed)
		return 1
	}
	fmt.Fprintln(out, "docrun: every block ran as written")
	return 0
}

// Run copies the tree, runs every block of o.Files in order and returns how
// many failed.
func Run(ctx context.Context, o Options, out io.Writer) (int, error) {
	var blocks []block
	for _, f := range o.Files {
		fh, err := os.Open(filepath.Join(o.Root, f))
		if err != nil {
			return 0, err
		}
		bs, err := parse(f, fh)
		fh.Close()
		if err != nil {
			return 0, err
		}
		blocks = append(blocks, bs...)
	}
	work, err := os.MkdirTemp("", "docrun-")
	if err != nil {
		return 0, err
	}
	if o.Keep {
		fmt.Fprintf(out, "docrun: the copy is %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	tree := filepath.Join(work, "tree")
	if err := copyTree(o.Root, tree); err != nil {
		return 0, err
	}
	env, err := blockEnv(filepath.Join(work, "home"))
	if err != nil {
		return 0, err
	}
	r := &runner{o: o, out: out, dir: tree, logs: work, env: env}
	defer r.stopAll()
	failed := 0
	for i, b := range blocks {
		if err := r.block(ctx, i, b); err != nil {
			failed++
			fmt.Fprintf(out, "FAIL %s: %v\n", b.where(), err)
		}
	}
	return failed, nil
}

// runner runs blocks in one copy of the tree.
type runner struct {
	o      Options
	out    io.Writer
	dir    string
	logs   string
	env    []string
	groups []int // process groups started, killed at the end
}

func (r *runner) block(ctx context.Context, i int, b block) error {
	switch b.kind {
	case kindSkip:
		fmt.Fprintf(r.out, "SKIP %s: %s\n", b.where(), b.reason)
		return nil
	case kindServe:
		return r.serve(ctx, i, b)
	}
	start := time.Now()
	stdout, stderr, code, err := r.script(ctx, i, b)
	switch {
	case err != nil:
		return fmt.Errorf("%w\n%s", err, show(stdout, stderr))
	case code != b.exit:
		return fmt.Errorf("it exited %d, the doc says %d\n%s", code, b.exit, show(stdout, stderr))
	}
	if b.output != nil {
		got := lines(string(stdout) + string(stderr))
		if ok, at := matches(b.output, got); !ok {
			return fmt.Errorf("the output is not what the doc promises (first unmatched promised line: %q)\n%s", at, show(stdout, stderr))
		}
	} else if len(bytes.TrimSpace(stderr)) > 0 {
		return fmt.Errorf("it wrote to stderr, and the doc promises no output there\n%s", show(stdout, stderr))
	}
	fmt.Fprintf(r.out, "PASS %s (%s)\n", b.where(), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// script runs b as one bash script and returns what it wrote and its exit
// status.
func (r *runner) script(ctx context.Context, i int, b block) (stdout []byte, stderr []byte, code int, err error) {
	outPath := filepath.Join(r.logs, fmt.Sprintf("block-%d.stdout", i))
	errPath := filepath.Join(r.logs, fmt.Sprintf("block-%d.stderr", i))
	outF, err := os.Create(outPath)
	if err != nil {
		return nil, nil, 0, err
	}
	defer outF.Close()
	errF, err := os.Create(errPath)
	if err != nil {
		return nil, nil, 0, err
	}
	defer errF.Close()
	cmd := r.command("bash", "-e", "-o", "pipefail", "-c", b.script)
	cmd.Stdout, cmd.Stderr = outF, errF
	if err := r.start(cmd); err != nil {
		return nil, nil, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(r.o.BlockTimeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		runErr = fmt.Errorf("it did not finish within %s", r.o.BlockTimeout)
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		runErr = ctx.Err()
	}
	stdout, _ = os.ReadFile(outPath)
	stderr, _ = os.ReadFile(errPath)
	var ee *exec.ExitError
	if errors.As(runErr, &ee) {
		return stdout, stderr, ee.ExitCode(), nil
	}
	return stdout, stderr, 0, runErr
}

// serve starts b in the background and waits until lockd is ready.
func (r *runner) serve(ctx context.Context, i int, b block) error {
	for _, addr := range []string{"127.0.0.1:7420", "127.0.0.1:7421"} {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return fmt.Errorf("%s is already in use: stop the other lockd first", addr)
		}
	}
	logPath := filepath.Join(r.logs, fmt.Sprintf("block-%d.serve.log", i))
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := r.command("bash", "-c", b.script)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := r.start(cmd); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(r.o.ReadyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("it exited before it was ready; its output:\n%s", log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := os.Stat(filepath.Join(r.dir, r.o.ReadyFile)); err != nil {
			continue
		}
		if resp, err := http.Get(r.o.ReadyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Fprintf(r.out, "SERVE %s: ready after %s (log %s)\n", b.where(), time.Since(start).Round(100*time.Millisecond), logPath)
				return nil
			}
		}
	}
	log, _ := os.ReadFile(logPath)
	return fmt.Errorf("not ready within %s; its output:\n%s", r.o.ReadyTimeout, log)
}

func (r *runner) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = r.dir, r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

func (r *runner) start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	r.groups = append(r.groups, cmd.Process.Pid)
	return nil
}

// stopAll ends every process a block started: SIGTERM to each group, then
// SIGKILL to what is left after 10 seconds.
func (r *runner) stopAll() {
	for _, g := range r.groups {
		_ = syscall.Kill(-g, syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, g := range r.groups {
		for time.Now().Before(deadline) && syscall.Kill(-g, 0) == nil {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
}

// blockEnv is the environment blocks run in: the caller's, with a fresh
// HOME (no user lockctl config, as on a new machine) but Go's caches kept,
// and no LOCKCTL_ or LOCKD_ settings.
func blockEnv(home string) ([]string, error) {
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || strings.HasPrefix(k, "LOCKCTL_") || strings.HasPrefix(k, "LOCKD_") || k == "NO_COLOR" {
			continue
		}
		env = append(env, kv)
	}
	for _, k := range []string{"GOPATH", "GOCACHE", "GOMODCACHE", "GOTOOLCHAIN"} {
		v, err := exec.Command("go", "env", k).Output()
		if err != nil {
			return nil, fmt.Errorf("go env %s: %w", k, err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(v)))
	}
	return append(env, "HOME="+home), nil
}

// copyTree copies the files git knows in root (tracked, or untracked and
// not ignored) to dst: a fresh copy, with no .lockd of an earlier run.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if err != nil {
			continue // deleted in the work tree
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func show(stdout, stderr []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  --- stdout\n%s", indent(stdout))
	fmt.Fprintf(&b, "  --- stderr\n%s", indent(stderr))
	return b.String()
}

func indent(b []byte) string {
	var s strings.Builder
	for _, l := range lines(string(b)) {
		s.WriteString("  | " + l + "\n")
	}
	return s.String()
}
