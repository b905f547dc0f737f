// Package lockdtest runs a real lockd for tests: the same assembly the
// lockd binary runs (internal/lockd: arbiter, class watcher, gRPC keepalive
// policy, HTTP endpoints), on an embedded etcd in a temp dir (or a given
// backend), on loopback ports in insecure-loopback mode so tests pick an
// identity per client. Options.Classes loads your own lock classes.
//
// Env's Backend, Arbiter and Server fields are lockd's internal types, there
// for lockd's own tests; outside the module use Addr, Client and Raw.
package lockdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/internal/operator"
	"github.com/lockd-dev/lockd/internal/server"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Test identities granted by Classes.
const (
	Alice    = "spiffe://test.local/alice"    // t/
	Bob      = "spiffe://test.local/bob"      // t/
	Carol    = "spiffe://test.local/carol"    // t/carol/ only
	Operator = "spiffe://test.local/operator" // operator, no grants
	// Operator2 is a second operator, for two-person approvals.
	Operator2 = "spiffe://test.local/operator-2"
)

// Classes is the test class set: namespace t, whose keys are class "std"'s
// (15s, fenced) but for t/fast/… (class "fast", 5s) and t/fifo/… (class
// "fifo", 5s with durable fairness); namespace other, whose keys are class
// "std"'s but for other/cache/… (class "cache", an efficiency class).
var Classes = map[string]string{
	"t/classes.yaml": `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: fast, namespace: t}
spec:
  keys: ["t/fast/"]
  nestedIn: [std]
  purpose: correctness
  enforcement: fenced
  ttl: 5s
  tier: entity
  resource: test-db
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: std, namespace: t}
spec:
  keys: ["t/"]
  purpose: correctness
  enforcement: fenced
  ttl: 15s
  tier: entity
  resource: test-db
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: fifo, namespace: t}
spec:
  keys: ["t/fifo/"]
  nestedIn: [std]
  purpose: correctness
  enforcement: fenced
  ttl: 5s
  tier: entity
  fairness: durable
  resource: test-db
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: alice, namespace: t}
spec:
  spiffeID: ` + Alice + `
  prefixes: ["t/"]
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: bob, namespace: t}
spec:
  spiffeID: ` + Bob + `
  prefixes: ["t/"]
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: carol, namespace: t}
spec:
  spiffeID: ` + Carol + `
  prefixes: ["t/carol/"]
`,
	"other/classes.yaml": `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: std, namespace: other}
spec:
  keys: ["other/"]
  purpose: correctness
  enforcement: fenced
  ttl: 15s
  tier: entity
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: cache, namespace: other}
spec:
  keys: ["other/cache/"]
  nestedIn: [std]
  purpose: efficiency
  enforcement: advisory
  ttl: 30s
  tier: entity
  riskOwner: other-team
  waiverExpires: "2099-01-01"
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: other, namespace: other}
spec:
  spiffeID: spiffe://test.local/other
  prefixes: ["other/"]
`,
}

// OpenClasses is Classes plus class "cache" of namespace t, owning
// t/cache/…: an efficiency class (advisory, 30s) that declares
// onQuorumLoss: open, for tests of what lockd grants without an etcd
// quorum (with StartCluster and Options.OpenAfter).
func OpenClasses() map[string]string {
	c := maps.Clone(Classes)
	c["t/open.yaml"] = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: cache, namespace: t}
spec:
  keys: ["t/cache/"]
  nestedIn: [std]
  purpose: efficiency
  enforcement: advisory
  ttl: 30s
  tier: entity
  onQuorumLoss: open
  riskOwner: cache-team
  waiverExpires: "2099-01-01"
`
	return c
}

// Worker returns the i-th worker identity (0..63), each granted t/.
func Worker(i int) string { return fmt.Sprintf("spiffe://test.local/w%d", i) }

func init() {
	var b strings.Builder
	for i := range 64 {
		fmt.Fprintf(&b, "---\napiVersion: locks.lockd.dev/v1alpha1\nkind: LockGrant\nmetadata: {name: w%d, namespace: t}\nspec:\n  spiffeID: %s\n  prefixes: [\"t/\"]\n", i, Worker(i))
	}
	Classes["t/workers.yaml"] = strings.TrimPrefix(b.String(), "---\n")
	Classes["t/pausetests.yaml"] = pauseTests(time.Now(), "t", "std", "fast", "fifo")
}

// pauseTests are PauseTestResults, run an hour before now against
// test-db, proving the classes of namespace ns fenced for a year: lockd
// serves a class as fenced only with one (other/std has none, and is
// served as advisory).
func pauseTests(now time.Time, ns string, classes ...string) string {
	ran := now.UTC().Add(-time.Hour).Truncate(time.Second)
	var docs []string
	for _, c := range classes {
		docs = append(docs, fmt.Sprintf(`apiVersion: locks.lockd.dev/v1alpha1
kind: PauseTestResult
metadata: {name: %s, namespace: %s}
spec:
  class: %s
  resource: test-db
  outcome: pass
  ranAt: %q
  expires: %q
  tokens: {first: "281474976710664", second: "281474976710666"}
`, c, ns, c, ran.Format(time.RFC3339), ran.AddDate(1, 0, 0).Add(-time.Minute).Format(time.RFC3339)))
	}
	return strings.Join(docs, "---\n")
}

// WriteClasses writes Classes under dir.
func WriteClasses(t testing.TB, dir string) { writeClassFiles(t, dir, Classes) }

// writeClassFiles writes each file (path relative to dir: body) under dir.
func writeClassFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Options configures Start.
type Options struct {
	// Classes are the lock class files to load (path relative to the
	// classes directory: YAML body); nil loads this package's Classes.
	// lockd watches the directory (Env.ClassesDir): write to it to reload.
	Classes map[string]string
	// Backend to use; nil starts an embedded etcd in a temp dir.
	Backend *store.Backend
	// DataDir for the embedded etcd (a temp dir when empty).
	DataDir string
	// RequestTimeout for the arbiter (default 5s).
	RequestTimeout time.Duration
	// PollInterval for waiters (default 1s).
	PollInterval time.Duration
	// Registry receives lockd's metrics (a private one when nil).
	Registry *prometheus.Registry
	// Addr is the gRPC listen address (a free loopback port when empty):
	// set it to restart lockd where clients already point.
	Addr string
	// OperatorTokens, when set, makes force-release and epoch-advance calls
	// need an OIDC operator token verified by it.
	OperatorTokens *operator.Verifier
	// StateFile is the arbiter's state file (one in a fresh temp dir when
	// empty, so a restart remembers nothing unless it is set).
	StateFile string
	// FreshStore: Backend is a store nothing was ever written to (an
	// external connection to a new member): create the first epoch. An
	// embedded backend started on an empty dir is fresh by itself.
	FreshStore bool
	// Audit turns on the audit history (a tailer into an SQLite file in a
	// temp dir), so History answers.
	Audit bool
	// MaxSessionsPerIdentity and MaxWaitersPerIdentity are the arbiter's
	// quotas (its defaults when zero).
	MaxSessionsPerIdentity, MaxWaitersPerIdentity int
	// TracerProvider traces lockd (nil: no tracing).
	TracerProvider trace.TracerProvider
	// ExternalEtcd starts etcd as a separate server (embedded in the test
	// process, on loopback ports) and has lockd connect to it over gRPC, as
	// it does to an external cluster: lockd's own etcd client, with its
	// tracing. Backend must be nil.
	ExternalEtcd bool
	// LogOutput receives lockd's logs at debug level, as JSON (none when
	// nil).
	LogOutput io.Writer
	// OpenAfter is lockd's --open-after (its default when zero).
	OpenAfter time.Duration
	// LockdDataDir is lockd's own data dir (arbiter ID, spool, state): set
	// it to restart lockd with what it kept. A temp dir when empty.
	LockdDataDir string
	// Region and RegionEndpoints are lockd's --region and
	// --region-endpoint: with LockNamespace objects among Classes, keys of
	// namespaces homed elsewhere are refused with WRONG_REGION.
	Region          string
	RegionEndpoints map[string]string
	// Clusters are etcd clusters lockd fronts besides Backend (the coord
	// cluster), each with the tiers it serves: lockd's topology split.
	Clusters []lockd.ClusterConfig
	// Kubeconfig, when set, has lockd read its classes from the Kubernetes
	// API server it names (--classes-from kubernetes) instead of a class
	// directory; Classes is then not written anywhere. Set LockdDataDir to
	// restart lockd with the class set it cached.
	Kubeconfig string
}

// Env is a running lockd.
type Env struct {
	Backend *store.Backend
	Arbiter *arbiter.Arbiter
	// Addr is the gRPC address; MetricsAddr serves /metrics, /healthz and
	// /readyz.
	Addr        string
	MetricsAddr string
	// DataDir is the embedded etcd's directory ("" for a given Backend).
	DataDir string
	// ClassesDir is the watched class directory.
	ClassesDir string
	Server     *server.Server
	// Daemon is the assembled lockd.
	Daemon *lockd.Daemon
}

// Stop stops lockd (not the backend): gRPC, HTTP, the arbiter and the
// class watcher.
func (e *Env) Stop() { e.Daemon.Close() }

// StartEmbedded starts an embedded etcd in dir; the caller closes it.
func StartEmbedded(t testing.TB, dir string) *store.Backend {
	t.Helper()
	b, err := startEmbedded(dir, func() (string, string) { return FreeAddr(t), FreeAddr(t) })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startEmbedded starts an embedded etcd in dir on the client and peer
// addresses addrs gives. FreeAddr's port is free when it answers, but
// another process (tests of other packages run alongside) may bind it
// before etcd does: then it tries new addresses, a few times. etcd binds
// its listeners before it writes anything to dir.
func startEmbedded(dir string, addrs func() (client, peer string)) (*store.Backend, error) {
	var err error
	for range 5 {
		c, p := addrs()
		var b *store.Backend
		b, err = store.StartEmbedded(store.EmbeddedConfig{DataDir: dir, ClientURL: "http://" + c, PeerURL: "http://" + p})
		if !errors.Is(err, syscall.EADDRINUSE) {
			return b, err
		}
	}
	return nil, err
}

// FreeAddr returns a free loopback host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// daemonConfig is the lockd configuration Start runs for o, on backend b, with
// classes in classesDir and state in dataDir: the binary's defaults, on
// loopback ports in insecure-loopback mode, with two operators.
func daemonConfig(o Options, b *store.Backend, classesDir, dataDir string) lockd.Config {
	cfg := lockd.DefaultConfig()
	cfg.DataDir = dataDir
	cfg.ClassesDir = classesDir
	cfg.Listen = o.Addr
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.InsecureLoopback = true
	cfg.Operators = []string{Operator, Operator2}
	cfg.Backend = b
	cfg.Registry = o.Registry
	cfg.OperatorVerifier = o.OperatorTokens
	cfg.StateFile = o.StateFile
	cfg.PollInterval = o.PollInterval
	cfg.ShutdownGrace = time.Millisecond // Stop is a crash, not a drain
	if o.RequestTimeout != 0 {
		cfg.RequestTimeout = o.RequestTimeout
	}
	cfg.TracerProvider = o.TracerProvider
	cfg.Region, cfg.RegionEndpoints = o.Region, o.RegionEndpoints
	cfg.Clusters = o.Clusters
	if o.Kubeconfig != "" {
		cfg.ClassesFrom, cfg.Kubeconfig, cfg.ClassesSyncTimeout = lockd.ClassesFromKubernetes, o.Kubeconfig, 3*time.Second
	}
	if o.OpenAfter != 0 {
		cfg.OpenAfter = o.OpenAfter
	}
	if o.LogOutput != nil {
		cfg.LogOutput, cfg.LogLevel, cfg.LogFormat = o.LogOutput, "debug", "json"
	}
	cfg.Audit.Mode = lockd.AuditOff
	if o.Audit {
		cfg.Audit.Mode = lockd.AuditOn
	}
	if o.MaxSessionsPerIdentity != 0 {
		cfg.MaxSessionsPerIdentity = o.MaxSessionsPerIdentity
	}
	if o.MaxWaitersPerIdentity != 0 {
		cfg.MaxWaitersPerIdentity = o.MaxWaitersPerIdentity
	}
	return cfg
}

// Start runs lockd for the test; it stops at cleanup.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	e := &Env{Backend: o.Backend, DataDir: o.DataDir, ClassesDir: t.TempDir()}
	classes := o.Classes
	if classes == nil {
		classes = Classes
	}
	writeClassFiles(t, e.ClassesDir, classes)
	if e.Backend == nil {
		if e.DataDir == "" {
			e.DataDir = t.TempDir()
		}
		e.Backend = StartEmbedded(t, e.DataDir)
		t.Cleanup(e.Backend.Close)
	}
	b := e.Backend
	if o.FreshStore && !b.Fresh {
		fresh := *b
		fresh.Fresh = true
		b = &fresh
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lockdDir := o.LockdDataDir
	if lockdDir == "" {
		lockdDir = t.TempDir()
	}
	cfg := daemonConfig(o, b, e.ClassesDir, lockdDir)
	if o.ExternalEtcd {
		if o.Backend != nil {
			t.Fatal("lockdtest: ExternalEtcd with a Backend")
		}
		// lockd dials the member itself; a new member may get epoch 1.
		resp, err := b.Client.Get(ctx, "/")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Backend = nil
		cfg.EtcdEndpoints = []string{b.Embedded.Config().ListenClientUrls[0].String()}
		cfg.BootstrapEpochClusterID = strconv.FormatUint(resp.Header.GetClusterId(), 16)
	}
	d, err := lockd.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Serve()
	t.Cleanup(d.Close)
	e.Daemon, e.Arbiter, e.Server = d, d.Arbiter(), d.Service()
	e.Addr, e.MetricsAddr = d.Addr(), d.MetricsAddr()
	return e
}

// Client returns a pkg/client Client claiming id, closed at cleanup.
func (e *Env) Client(t testing.TB, id string, opts ...client.Option) *client.Client {
	t.Helper()
	return ClientAt(t, e.Addr, id, opts...)
}

// ClientAt returns a Client for a lockd at addr claiming id.
func ClientAt(t testing.TB, addr, id string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(append([]client.Option{client.WithTarget(addr), client.WithInsecureIdentity(id)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Raw returns raw lock.v1 clients claiming id.
func (e *Env) Raw(t testing.TB, id string) (lockv1.LockServiceClient, lockv1.AdminServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(e.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(identity.InsecurePerRPC(id)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return lockv1.NewLockServiceClient(conn), lockv1.NewAdminServiceClient(conn)
}

// AdvanceEpoch advances the epoch from `from` the only way lockd allows:
// Operator requests, Operator2 approves.
func (e *Env) AdvanceEpoch(t testing.TB, from uint32, reason string) *lockv1.ApproveEpochAdvanceResponse {
	t.Helper()
	_, op1 := e.Raw(t, Operator)
	_, op2 := e.Raw(t, Operator2)
	req, err := op1.RequestEpochAdvance(context.Background(), &lockv1.RequestEpochAdvanceRequest{FromEpoch: from, Reason: reason})
	if err != nil {
		t.Fatalf("request epoch advance: %v", err)
	}
	resp, err := op2.ApproveEpochAdvance(context.Background(), &lockv1.ApproveEpochAdvanceRequest{Id: req.GetId()})
	if err != nil {
		t.Fatalf("approve epoch advance: %v", err)
	}
	return resp
}

// WaitFor polls cond every 20ms and fails the test if it is not true
// within d; what says what was awaited.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
