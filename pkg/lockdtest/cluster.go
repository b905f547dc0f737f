package lockdtest

import (
	"fmt"
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
			c.Stop(i)
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

// Stop stops member i (a no-op when it is stopped).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	e := c.members[i].e
	c.members[i].e = nil
	c.mu.Unlock()
	if e != nil {
		e.Close()
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
