// Package store connects lockd to etcd: an embedded single-member etcd for the
// default development setup, or an external cluster.
//
// Either way the arbiter gets a clientv3 client for KV, Watch and lease
// grant/revoke, and a raw lease client for forwarding keepalives one-for-one
// (clientv3's own KeepAlive renews on its own and must not be used for client
// sessions).
package store

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/featuregate"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// ErrStart reports that the store could not be started or reached.
var ErrStart = errors.New("store: start")

// Backend is what the arbiter needs from etcd.
type Backend struct {
	// Client serves KV, Watch, lease grant/revoke/TTL and maintenance.
	Client *clientv3.Client
	// Leases is a raw lease client; LeaseKeepAlive on it opens one
	// long-lived stream that forwards each keepalive exactly once.
	Leases pb.LeaseClient
	// KV is a raw KV client: the lock path's transactions are sent on it
	// as etcd's own messages (internal/etcdop).
	KV pb.KVClient
	// Embedded is the in-process etcd, nil for an external cluster.
	Embedded *embed.Etcd
	// Fresh: the embedded member started on an empty data dir, so nothing
	// was ever stored in it (lockd may create the first epoch itself).
	Fresh bool

	closers []func()
}

// Close stops the client and, when embedded, the etcd server.
func (b *Backend) Close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// EmbeddedConfig configures the embedded single-member etcd.
type EmbeddedConfig struct {
	// DataDir holds the member's WAL and snapshots.
	DataDir string
	// Name is the member name; "lockd" when empty.
	Name string
	// ClientURL and PeerURL are where the member listens. Empty means
	// unix-socket-free loopback defaults chosen by the caller; lockd itself
	// talks to the member in-process and does not use ClientURL.
	ClientURL, PeerURL string
	// ClusterToken is the initial cluster token (only used on first start).
	ClusterToken string
	// Logger receives etcd's logs; nil silences them.
	Logger *zap.Logger
	// StartTimeout bounds how long to wait for the member to be ready.
	StartTimeout time.Duration
}

// NewEtcdConfig returns the embed configuration lockd uses: lease
// checkpointing (with persistence) on, so a leader change carries remaining
// TTL forward, and WarningUnaryRequestDuration set so etcd does not stringify
// every request.
func NewEtcdConfig(c EmbeddedConfig) (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Dir = c.DataDir
	if c.Name != "" {
		cfg.Name = c.Name
	} else {
		cfg.Name = "lockd"
	}
	clientURL, peerURL := c.ClientURL, c.PeerURL
	if clientURL == "" {
		clientURL = "http://127.0.0.1:0"
	}
	if peerURL == "" {
		peerURL = "http://127.0.0.1:0"
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("%w: client URL: %w", ErrStart, err)
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return nil, fmt.Errorf("%w: peer URL: %w", ErrStart, err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	if c.ClusterToken != "" {
		cfg.InitialClusterToken = c.ClusterToken
	}
	if err := cfg.ServerFeatureGate.(featuregate.MutableFeatureGate).Set("LeaseCheckpoint=true,LeaseCheckpointPersist=true"); err != nil {
		return nil, fmt.Errorf("%w: feature gates: %w", ErrStart, err)
	}
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	logger := c.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	return cfg, nil
}

// StartEmbedded starts a single-member etcd and returns a backend that talks
// to it in-process (etcd's v3client), not through a socket.
func StartEmbedded(c EmbeddedConfig) (*Backend, error) {
	cfg, err := NewEtcdConfig(c)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(c.DataDir, "member"))
	fresh := errors.Is(statErr, fs.ErrNotExist)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: embedded etcd in %s: %w", ErrStart, c.DataDir, err)
	}
	timeout := c.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("%w: embedded etcd: %w", ErrStart, err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("%w: embedded etcd not ready after %s", ErrStart, timeout)
	}
	cli := v3client.New(e.Server)
	b := &Backend{
		Client:   cli,
		Leases:   adapter.LeaseServerToLeaseClient(v3rpc.NewQuotaLeaseServer(e.Server)),
		KV:       adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.Server)),
		Embedded: e,
		Fresh:    fresh,
	}
	b.closers = append(b.closers, e.Close, func() { _ = cli.Close() })
	return b, nil
}

// ExternalConfig configures a connection to an etcd cluster.
type ExternalConfig struct {
	// Endpoints of the cluster members.
	Endpoints []string
	// CAFile, CertFile, KeyFile configure client TLS; all empty means plaintext.
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds the first connection.
	DialTimeout time.Duration
	// Logger receives client logs; nil silences them.
	Logger *zap.Logger
	// DialOptions are added to the client's gRPC dial options (tracing).
	DialOptions []grpc.DialOption
}

// ConnectExternal connects to an etcd cluster.
func ConnectExternal(c ExternalConfig) (*Backend, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no etcd endpoints", ErrStart)
	}
	var tlsCfg *tls.Config
	if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
		info := transport.TLSInfo{TrustedCAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("%w: etcd TLS: %w", ErrStart, err)
		}
	}
	logger := c.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	dt := c.DialTimeout
	if dt == 0 {
		dt = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            c.Endpoints,
		TLS:                  tlsCfg,
		DialTimeout:          dt,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               logger,
		DialOptions:          c.DialOptions,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: etcd %v: %w", ErrStart, c.Endpoints, err)
	}
	b := &Backend{Client: cli, Leases: pb.NewLeaseClient(cli.ActiveConnection()), KV: pb.NewKVClient(cli.ActiveConnection())}
	b.closers = append(b.closers, func() { _ = cli.Close() })
	return b, nil
}
