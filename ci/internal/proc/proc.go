// Package proc runs the child processes of the gate and the benchmarks:
// start, signal (kill, pause, resume), stop and restart, with output to a
// log file, and lockd processes with a readiness wait.
package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process that can be killed, paused and restarted.
type Proc struct {
	// Name names the process in errors.
	Name string
	// Bin and Args are the command.
	Bin  string
	Args []string
	// Log receives stderr (and stdout unless OnLine is set), appended.
	Log string
	// OnLine, when set, receives each stdout line.
	OnLine func(string)
	// Env is added to this process's environment (KEY=value).
	Env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process (again, after it exited).
func (p *Proc) Start() error {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout io.ReadCloser
	if p.OnLine != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			_ = logf.Close()
			return err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("gate: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	lines := make(chan struct{})
	if stdout != nil {
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.OnLine(sc.Text())
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

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("gate: %s is not running", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Kill SIGKILLs the process and waits for it.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGKILL)
	p.Wait(0)
}

// Stop sends SIGTERM and waits up to d, then SIGKILLs.
func (p *Proc) Stop(d time.Duration) {
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	if !p.Wait(d) {
		p.Kill()
	}
}

// Wait waits up to d (0: forever) for the process to exit.
func (p *Proc) Wait(d time.Duration) bool {
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

// Lockd is one lockd process.
type Lockd struct {
	Proc
	// Addr is the gRPC address, Metrics the HTTP one.
	Addr, Metrics string
}

// PID is the running process's id (0 when not running).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// ErrExited: the process exited while it was awaited.
var ErrExited = errors.New("proc: the process exited")

// exited is closed when the process started last has exited (nil before
// any start).
func (p *Proc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// LogTail is the last n lines of the process's log, for an error that
// outlives the log file (a test's temporary directory).
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// WaitReady polls /readyz until it answers 200. A lockd that exits
// meanwhile ends the wait at once with ErrExited.
func (a *Lockd) WaitReady(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	exited := a.exited()
	last := ""
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Metrics+"/readyz", nil)
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
			return fmt.Errorf("gate: %s not ready after %s: %s", a.Name, d, last)
		case <-exited:
			return fmt.Errorf("%w: %s exited before it was ready", ErrExited, a.Name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePorts returns n free loopback TCP ports, chosen below the kernel's
// ephemeral range when it can be read: a port from the range (what
// listening on :0 gives) can be taken by any outgoing connection between
// this check and the process's bind (a lockd then exits "address already
// in use"), while ports below it are only ever taken by a bind.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	var ports []int
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	low := ephemeralLow()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("proc: no free port below %d after %d tries", low, tries)
		}
		addr := "127.0.0.1:0"
		if low > minPort {
			addr = "127.0.0.1:" + strconv.Itoa(minPort+rand.IntN(low-minPort))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, err
			}
			continue // taken: another
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// minPort is the lowest port FreePorts picks below the ephemeral range.
const minPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (0 when
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

// Series reads every series of the metric family name from addr's
// /metrics, by the series as written (name and labels); an empty map when
// it cannot.
func Series(ctx context.Context, addr, name string) map[string]float64 {
	out := map[string]float64{}
	eachSeries(ctx, addr, name, func(series string, v float64) bool {
		out[series] = v
		return true
	})
	return out
}

// eachSeries calls f with each series of the metric family name at
// http://addr/metrics (name and labels as exposed) and its value, until f
// returns false.
func eachSeries(ctx context.Context, addr, name string, f func(series string, v float64) bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		if !f(line[:i], v) {
			return
		}
	}
}

// Metric reads one value from the Prometheus text at http://addr/metrics:
// the first series of the metric named name, or the one series name names
// with its labels exactly as exposed (`lockd_audit_lag_revisions{cluster="1f"}`).
// ok is false when it cannot be read or is not there.
func Metric(ctx context.Context, addr, name string) (float64, bool) {
	var v float64
	found := false
	eachSeries(ctx, addr, name, func(_ string, x float64) bool {
		v, found = x, true
		return false
	})
	return v, found
}
