package cluster

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lockd-dev/lockd/internal/store"
	"go.etcd.io/etcd/server/v3/embed"
)

// RunMember is the body of one member process: an etcd 3.6 server from
// etcd's embed package with the settings lockd uses for its embedded store
// (lease checkpointing on), joined to the cluster given by the flags.
func RunMember(args []string) error {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("data-dir", "", "data dir")
	clientURL := fs.String("client-url", "", "client URL")
	peerURL := fs.String("peer-url", "", "peer URL")
	initial := fs.String("initial-cluster", "", "initial cluster")
	token := fs.String("token", "", "initial cluster token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := store.NewEtcdConfig(store.EmbeddedConfig{DataDir: *dir, Name: *name, ClientURL: *clientURL, PeerURL: *peerURL, ClusterToken: *token})
	if err != nil {
		return err
	}
	cfg.InitialCluster = *initial
	cfg.ClusterState = embed.ClusterStateFlagNew
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("member %s: %w", *name, err)
	}
	defer e.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "%s member %s ready\n", time.Now().Format(time.RFC3339Nano), *name)
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
	select {
	case err := <-e.Err():
		return err
	case <-sig:
		return nil
	}
}
