// Package cluster runs a 3-member etcd 3.6 cluster as separate OS processes
// for the release gate, and injects faults into it: SIGKILL and restart
// from the data dir, SIGSTOP and SIGCONT, isolating a member with network
// namespaces, and a restore from snapshot with a new cluster token.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Errors.
var (
	ErrNetns    = errors.New("cluster: network namespaces")
	ErrStart    = errors.New("cluster: start")
	ErrNoLeader = errors.New("cluster: no leader")
)

// Config describes the cluster.
type Config struct {
	// Dir holds the members' data dirs and logs.
	Dir string
	// Exe is the program that runs one member when started with the
	// arguments "member" and the member flags (the gate re-executes itself).
	Exe string
	// Members is the cluster size (3 when 0).
	Members int
	// Netns puts each member in its own network namespace, which Isolate
	// needs. Without it members listen on loopback ports.
	Netns bool
	// Ports gives loopback ports when Netns is off: two per member.
	Ports []int
}

// Member is one etcd process.
type Member struct {
	Index     int
	Name      string
	ClientURL string
	PeerURL   string
	DataDir   string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is the running cluster.
type Cluster struct {
	cfg     Config
	net     *network
	token   string
	Members []*Member
	cli     *clientv3.Client
}

// Start creates and starts the members and waits until the cluster has a
// leader.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	c := &Cluster{cfg: cfg, token: fmt.Sprintf("gate-%d", time.Now().UnixNano())}
	if cfg.Netns {
		n, err := newNetwork()
		if err != nil {
			return nil, err
		}
		c.net = n
	} else if len(cfg.Ports) < 2*cfg.Members {
		return nil, fmt.Errorf("%w: %d loopback ports needed", ErrStart, 2*cfg.Members)
	}
	for i := range cfg.Members {
		m := &Member{Index: i, Name: fmt.Sprintf("m%d", i), DataDir: filepath.Join(cfg.Dir, fmt.Sprintf("m%d", i))}
		if c.net != nil {
			if err := c.net.addMember(i); err != nil {
				c.Close()
				return nil, err
			}
			m.ClientURL = "http://" + c.net.ip(i) + ":2379"
			m.PeerURL = "http://" + c.net.ip(i) + ":2380"
		} else {
			m.ClientURL = fmt.Sprintf("http://127.0.0.1:%d", cfg.Ports[2*i])
			m.PeerURL = fmt.Sprintf("http://127.0.0.1:%d", cfg.Ports[2*i+1])
		}
		c.Members = append(c.Members, m)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		c.Close()
		return nil, err
	}
	for _, m := range c.Members {
		if err := c.startMember(m); err != nil {
			c.Close()
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: client: %w", ErrStart, err)
	}
	c.cli = cli
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.WaitHealthy(wctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ID is the cluster ID (hex, as lockd's --bootstrap-epoch-cluster-id and
// etcdctl print it).
func (c *Cluster) ID(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.cli.Get(cctx, "/gate/cluster-id")
	if err != nil {
		return "", fmt.Errorf("cluster: reading the cluster ID: %w", err)
	}
	return fmt.Sprintf("%x", resp.Header.ClusterId), nil
}

// Client is a client of the whole cluster, for the gate's own use.
func (c *Cluster) Client() *clientv3.Client { return c.cli }

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.Members {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

func (c *Cluster) startMember(m *Member) error {
	args := []string{"member", "--name", m.Name, "--data-dir", m.DataDir, "--client-url", m.ClientURL,
		"--peer-url", m.PeerURL, "--initial-cluster", c.initialCluster(), "--token", c.token}
	name := c.cfg.Exe
	if c.net != nil {
		args = append([]string{"netns", "exec", c.net.ns(m.Index), c.cfg.Exe}, args...)
		name = "ip"
	}
	logf, err := os.OpenFile(filepath.Join(c.cfg.Dir, "logs", m.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a signal to the gate's terminal does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("%w: member %s: %w", ErrStart, m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// PID is the member's process id (0 when not running). With network
// namespaces it is the member itself: ip netns exec replaces its process.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

func (m *Member) signal(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return fmt.Errorf("cluster: member %s is not running", m.Name)
	}
	return m.cmd.Process.Signal(sig)
}

// Kill SIGKILLs a member and waits for it to exit.
func (c *Cluster) Kill(m *Member) error {
	if err := m.signal(syscall.SIGKILL); err != nil {
		return err
	}
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	<-done
	return nil
}

// Restart starts a killed member again from its data dir.
func (c *Cluster) Restart(m *Member) error { return c.startMember(m) }

// Pause SIGSTOPs a member; Resume SIGCONTs it.
func (c *Cluster) Pause(m *Member) error { return m.signal(syscall.SIGSTOP) }

// Resume continues a paused member.
func (c *Cluster) Resume(m *Member) error { return m.signal(syscall.SIGCONT) }

// Isolate cuts a member off from its peers and clients (link down).
func (c *Cluster) Isolate(m *Member) error {
	if c.net == nil {
		return fmt.Errorf("%w: isolation needs the cluster started with network namespaces", ErrNetns)
	}
	return c.net.setLink(m.Index, false)
}

// Heal reconnects an isolated member.
func (c *Cluster) Heal(m *Member) error {
	if c.net == nil {
		return nil
	}
	return c.net.setLink(m.Index, true)
}

// CanIsolate reports whether Isolate works on this cluster.
func (c *Cluster) CanIsolate() bool { return c.net != nil }

// Leader returns the member that is leader now, asking each member.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	for _, m := range c.Members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.cli.Status(sctx, m.ClientURL)
		cancel()
		if err != nil {
			continue
		}
		if st.Leader != 0 && st.Leader == st.Header.MemberId {
			return m, nil
		}
	}
	return nil, ErrNoLeader
}

// WaitHealthy waits until every member answers and agrees on one leader.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		last = c.healthy(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: not healthy: %w", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context) error {
	var leader uint64
	for _, m := range c.Members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.cli.Status(sctx, m.ClientURL)
		cancel()
		if err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return fmt.Errorf("member %s: no agreed leader", m.Name)
		}
		leader = st.Leader
	}
	// A linearizable read proves the leader serves.
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.cli.Get(sctx, "/gate/health")
	return err
}

// Snapshot saves a snapshot of the cluster to path.
func (c *Cluster) Snapshot(ctx context.Context, path string) error {
	rc, err := c.cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("cluster: snapshot: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		_ = f.Close()
		return fmt.Errorf("cluster: snapshot: %w", err)
	}
	return f.Close()
}

// Restore kills every member, restores each data dir from the snapshot with
// a new cluster token (so etcd assigns a new cluster ID, as etcdutl does in
// a real disaster recovery) and starts the members again.
func (c *Cluster) Restore(ctx context.Context, snap string) error {
	if err := c.killAll(); err != nil {
		return err
	}
	c.token = fmt.Sprintf("gate-restored-%d", time.Now().UnixNano())
	for _, m := range c.Members {
		old := m.DataDir + fmt.Sprintf(".before-restore-%d", time.Now().UnixNano())
		if err := os.Rename(m.DataDir, old); err != nil {
			return err
		}
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: snap, Name: m.Name, OutputDataDir: m.DataDir, PeerURLs: []string{m.PeerURL},
			InitialCluster: c.initialCluster(), InitialClusterToken: c.token,
		})
		if err != nil {
			return fmt.Errorf("cluster: restore %s: %w", m.Name, err)
		}
	}
	return c.startAll(ctx)
}

// Rebuild kills every member, moves its data dir aside and starts it
// again empty with the same cluster token: a cluster rebuilt from its
// manifests after losing its disks. It gets the same cluster ID, an empty
// key space and revisions from the start.
func (c *Cluster) Rebuild(ctx context.Context) error {
	if err := c.killAll(); err != nil {
		return err
	}
	for _, m := range c.Members {
		if err := os.Rename(m.DataDir, m.DataDir+fmt.Sprintf(".before-rebuild-%d", time.Now().UnixNano())); err != nil {
			return err
		}
	}
	return c.startAll(ctx)
}

// killAll SIGKILLs every member (a paused one too) and waits for it.
func (c *Cluster) killAll() error {
	for _, m := range c.Members {
		_ = m.signal(syscall.SIGCONT)
		if err := c.Kill(m); err != nil {
			return err
		}
	}
	return nil
}

// startAll starts every member from its data dir and waits until the
// cluster is healthy.
func (c *Cluster) startAll(ctx context.Context) error {
	for _, m := range c.Members {
		if err := c.startMember(m); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return c.WaitHealthy(wctx)
}

// Close stops every member and removes the network namespaces.
func (c *Cluster) Close() {
	if c.cli != nil {
		_ = c.cli.Close()
	}
	for _, m := range c.Members {
		_ = m.signal(syscall.SIGCONT)
		_ = m.signal(syscall.SIGKILL)
		m.mu.Lock()
		done := m.done
		m.mu.Unlock()
		if done != nil {
			<-done
		}
	}
	if c.net != nil {
		c.net.close(len(c.Members))
	}
}
