// Package rig starts what a benchmark runs against: ONE etcd and one lockd
// in front of it, as separate processes. On the embedded default lockd
// runs etcd in its own process and the other systems reach that member
// over its client URL; with an external etcd, etcd is its own process and
// lockd reaches it over gRPC like everyone else.
package rig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/ci/internal/classdir"
	"github.com/lockd-dev/lockd/ci/internal/cluster"
	"github.com/lockd-dev/lockd/ci/internal/proc"
	"github.com/lockd-dev/lockd/pkg/client"
)

// Modes.
const (
	Embedded = "embedded"
	External = "external"
)

// Namespace, class and identities the rig's classes grant.
const (
	Namespace = "bench"
	Class     = "bench/std"
	// DurableClass is the same class with durable fairness; it owns the
	// keys under DurablePrefix, Class the rest of the namespace.
	DurableClass  = "bench/fifo"
	DurablePrefix = "bench/d/"
	ClassTTL      = 15 * time.Second
)

// Identity is the SPIFFE ID of benchmark client i (insecure loopback
// header); the classes grant Identities of them the bench/ prefix.
func Identity(i int) string { return fmt.Sprintf("spiffe://bench.local/c/%d", i) }

// ErrStart: the rig could not start.
var ErrStart = errors.New("rig: start")

// Config configures the rig.
type Config struct {
	Dir  string
	Mode string
	// Exe runs an etcd member when given "member" and member flags (the
	// benchmark re-executes itself; see ci/internal/cluster).
	Exe string
	// Lockd is the lockd binary.
	Lockd string
	// Identities is how many client identities the classes grant.
	Identities int
	// Pprof serves lockd's profiles on its metrics listener.
	Pprof bool
	// Audit is lockd's --audit (empty: its default, on with the embedded
	// etcd).
	Audit string
	// Env is added to lockd's environment (OTEL_* for tracing).
	Env []string
	// ClientOptions are added to every Go client the load generator opens
	// against this lockd.
	ClientOptions []client.Option
	// LockdArgs are added to lockd's flags.
	LockdArgs []string
}

// Rig is the running etcd and lockd.
type Rig struct {
	Mode string
	// EtcdEndpoints are etcd's client URLs (for raw clients).
	EtcdEndpoints []string
	Lockd         *proc.Lockd
	// ClientOptions are Config.ClientOptions.
	ClientOptions []client.Option
	etcd          *cluster.Cluster
}

// Start starts etcd and lockd and waits until lockd is ready. The ports
// are free when picked, but another process may bind one before lockd or
// etcd does: a lockd that exits before it is ready is started again, on
// new ports and a new data directory, up to three times.
func Start(ctx context.Context, c Config) (*Rig, error) {
	if c.Identities == 0 {
		c.Identities = 64
	}
	classes := filepath.Join(c.Dir, "classes")
	if err := WriteClasses(classes, c.Identities); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		r, err := start(ctx, c, classes, try)
		if err == nil || !errors.Is(err, proc.ErrExited) || try == 3 {
			return r, err
		}
	}
}

// start is one try of Start.
func start(ctx context.Context, c Config, classes string, try int) (*Rig, error) {
	ports, err := proc.FreePorts(6)
	if err != nil {
		return nil, err
	}
	data, log := filepath.Join(c.Dir, "lockd"), filepath.Join(c.Dir, "lockd.log")
	if try > 1 {
		data, log = fmt.Sprintf("%s-%d", data, try), fmt.Sprintf("%s/lockd-%d.log", c.Dir, try)
	}
	r := &Rig{Mode: c.Mode, ClientOptions: c.ClientOptions}
	l := &proc.Lockd{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), Metrics: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	l.Name, l.Bin, l.Log, l.Env = "lockd", c.Lockd, log, c.Env
	l.Args = []string{"--insecure-loopback", "--listen", l.Addr, "--metrics-listen", l.Metrics,
		"--classes", classes, "--data-dir", data, "--log-level", "warn"}
	if c.Pprof {
		l.Args = append(l.Args, "--debug-pprof")
	}
	l.Args = append(l.Args, c.LockdArgs...)
	if c.Audit != "" {
		l.Args = append(l.Args, "--audit", c.Audit)
	}
	switch c.Mode {
	case Embedded:
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
		l.Args = append(l.Args, "--etcd-client-url", client, "--etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", ports[3]))
		r.EtcdEndpoints = []string{client}
	case External:
		cl, err := cluster.Start(ctx, cluster.Config{Dir: filepath.Join(c.Dir, "etcd"), Exe: c.Exe, Members: 1, Ports: ports[2:4]})
		if err != nil {
			return nil, err
		}
		r.etcd = cl
		r.EtcdEndpoints = cl.Endpoints()
		id, err := cl.ID(ctx)
		if err != nil {
			r.Close()
			return nil, err
		}
		// A first deployment on a new cluster: lockd creates epoch 1.
		l.Args = append(l.Args, "--etcd-endpoints", strings.Join(r.EtcdEndpoints, ","), "--bootstrap-epoch-cluster-id", id)
	default:
		return nil, fmt.Errorf("%w: mode must be %s or %s, got %q", ErrStart, Embedded, External, c.Mode)
	}
	r.Lockd = l
	if err := l.Start(); err != nil {
		r.Close()
		return nil, err
	}
	if err := l.WaitReady(ctx, 60*time.Second); err != nil {
		r.Close()
		return nil, fmt.Errorf("%w: %w; the end of %s:\n%s", ErrStart, err, l.Log, l.LogTail(20))
	}
	return r, nil
}

// LockdPID and EtcdPID are the processes to measure; on the embedded
// default they are the same process.
func (r *Rig) LockdPID() int { return r.Lockd.PID() }

// EtcdPID is etcd's process id (lockd's on the embedded default).
func (r *Rig) EtcdPID() int {
	if r.etcd == nil {
		return r.Lockd.PID()
	}
	return r.etcd.Members[0].PID()
}

// Close stops lockd and etcd.
func (r *Rig) Close() {
	if r.Lockd != nil {
		r.Lockd.Stop(10 * time.Second)
	}
	if r.etcd != nil {
		r.etcd.Close()
	}
}

// WriteClasses writes the benchmark's class (fenced, 15 s TTL: keepalives
// every 5 s, as the seed sizes them), the same with durable fairness, and a
// grant of bench/ to each identity.
func WriteClasses(dir string, identities int) error {
	ids := make([]string, identities)
	for i := range ids {
		ids[i] = Identity(i)
	}
	return classdir.Write(dir, classdir.Fenced{Namespace: Namespace, Name: "std", DurableName: "fifo", Resource: "bench", TTL: ClassTTL}, ids)
}

// Usage is a process's CPU time and resident memory.
type Usage struct {
	CPU time.Duration
	RSS int64
}

// ReadUsage reads /proc for pid.
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, err
	}
	// Fields after the command (which may hold spaces) start after ")".
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 22 {
		return Usage{}, fmt.Errorf("rig: short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	rssPages, _ := strconv.ParseInt(f[21], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return Usage{CPU: time.Duration(ut+st) * time.Second / hz, RSS: rssPages * int64(os.Getpagesize())}, nil
}
