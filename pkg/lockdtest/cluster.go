package lockdtest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/lockd-dev/lockd/internal/store"
)

// Cluster is a three-member etcd cluster run in the test process, each
// member a real etcd server on its own loopback ports and data dir. Stop
// and Restart produce quorum loss the way an outage does: stop two members
// and the third has no leader; restart them and it has one again.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	members []*clusterMember
}

type clusterMember struct {
	name, dir, client, peer string
	e                       *embed.Etcd // nil while stopped
	// held keeps a stopped member's ports bound, so that no other test
	// process (FreeAddr only listens and closes) starts a server there
	// that lockd would then reach instead: connections are accepted and
	// closed at once, like a member that is down.
	held []net.Listener
}

// StartCluster starts a three-member cluster in dir and stops it at cleanup.
func StartCluster(t testing.TB, dir string) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	for i := range 3 {
		c.members = append(c.members, &clusterMember{name: fmt.Sprintf("m%d", i), dir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
			client: "http://" + FreeAddr(t), peer: "http://" + FreeAddr(t)})
	}
	t.Cleanup(func() {
		for i := range c.members {
			c.stop(i, false)
			c.release(i)
		}
	})
	// Members of a new cluster wait for each other: start them together.
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.start(i) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return eps
}

func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.name+"="+m.peer)
	}
	return strings.Join(parts, ",")
}

func (c *Cluster) start(i int) error {
	m := c.members[i]
	c.release(i)
	cfg, err := store.NewEtcdConfig(store.EmbeddedConfig{DataDir: m.dir, Name: m.name, ClientURL: m.client, PeerURL: m.peer,
		ClusterToken: "lockdtest-cluster"})
	if err != nil {
		return err
	}
	cfg.InitialCluster = c.initialCluster()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("lockdtest: start etcd member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("lockdtest: etcd member %s: %w", m.name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("lockdtest: etcd member %s not ready after 60s", m.name)
	}
	c.mu.Lock()
	m.e = e
	c.mu.Unlock()
	return nil
}

// Stop stops member i (a no-op when it is stopped). Its ports stay bound
// by the test (connections are closed at once) until Restart.
func (c *Cluster) Stop(i int) { c.stop(i, true) }

func (c *Cluster) stop(i int, hold bool) {
	c.mu.Lock()
	m := c.members[i]
	e := m.e
	m.e = nil
	c.mu.Unlock()
	if e == nil {
		return
	}
	e.Close()
	if !hold {
		return
	}
	for _, u := range []string{m.client, m.peer} {
		addr := strings.TrimPrefix(u, "http://")
		var l net.Listener
		var err error
		for range 50 { // the port is free once etcd's listeners are closed
			if l, err = net.Listen("tcp", addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			c.t.Logf("lockdtest: could not hold the port of stopped member %s (%s): %v", m.name, addr, err)
			continue
		}
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				_ = conn.Close()
			}
		}()
		c.mu.Lock()
		m.held = append(m.held, l)
		c.mu.Unlock()
	}
}

// release frees the ports held for stopped member i.
func (c *Cluster) release(i int) {
	c.mu.Lock()
	held := c.members[i].held
	c.members[i].held = nil
	c.mu.Unlock()
	for _, l := range held {
		_ = l.Close()
	}
}

// Restart starts stopped members again from their data dirs, together (a
// member alone cannot become ready without a quorum).
func (c *Cluster) Restart(members ...int) {
	c.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(members))
	for j, i := range members {
		wg.Add(1)
		go func() { defer wg.Done(); errs[j] = c.start(i) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}
