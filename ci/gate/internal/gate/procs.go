package gate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process the gate can kill, pause and restart.
type proc struct {
	name string
	bin  string
	args []string
	log  string
	// onLine, when set, receives each stdout line.
	onLine func(string)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start() error {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout io.ReadCloser
	if p.onLine != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			_ = logf.Close()
			return err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("gate: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	lines := make(chan struct{})
	if stdout != nil {
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.onLine(sc.Text())
			}
		}()
	} else {
		close(lines)
	}
	go func() {
		<-lines
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("gate: %s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGKILL)
	p.wait(0)
}

// stop sends SIGTERM and waits up to d, then SIGKILLs.
func (p *proc) stop(d time.Duration) {
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	if !p.wait(d) {
		p.kill()
	}
}

func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	if d == 0 {
		<-done
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// arbiter is one lockd process.
type arbiter struct {
	proc
	addr, metrics string
}

// waitReady polls /readyz until it answers 200.
func (a *arbiter) waitReady(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	last := ""
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.metrics+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = strings.TrimSpace(string(b))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gate: %s not ready after %s: %s", a.name, d, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	var ports []int
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeClasses writes the gate's lock classes: one fenced class with the
// shortest TTL the rules allow, and a grant per worker.
func writeClasses(dir string, workers int) error {
	if err := os.MkdirAll(filepath.Join(dir, Namespace), 0o755); err != nil {
		return err
	}
	cls := fmt.Sprintf(`apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata:
  name: %s
  namespace: %s
spec:
  purpose: correctness
  enforcement: fenced
  ttl: %s
  tier: entity
  resource: gate-register
`, ClassName, Namespace, TTL)
	var b strings.Builder
	for i := range workers {
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, `apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata:
  name: w%d
  namespace: %s
spec:
  spiffeID: %s
  prefixes: ["%s/"]
`, i, Namespace, workerID(i), Namespace)
	}
	if err := os.WriteFile(filepath.Join(dir, Namespace, "classes.yaml"), []byte(cls), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, Namespace, "grants.yaml"), []byte(b.String()), 0o644)
}

func workerID(i int) string { return fmt.Sprintf("spiffe://gate.local/worker/%d", i) }
