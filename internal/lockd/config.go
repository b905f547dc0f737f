package lockd

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/operator"
	"github.com/lockd-dev/lockd/internal/store"
	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// DevSPIFFEID is the identity of the client SVID the dev PKI writes to
// <data-dir>/pki/dev.crt.
const DevSPIFFEID = "spiffe://lockd.local/dev"

// LogLevels and LogFormats are the values --log-level and --log-format
// accept.
var (
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"json", "text"}
)

// ClusterConfig is an etcd cluster lockd fronts besides the coord cluster.
type ClusterConfig struct {
	// Name is the cluster's name (a DNS label, unique).
	Name string
	// Tiers are the tiers whose keys live in it; never the coord tier.
	Tiers []string
	// Endpoints and the TLS files reach it, as EtcdEndpoints and EtcdCA,
	// EtcdCert and EtcdKey reach the coord cluster.
	Endpoints     []string
	CA, Cert, Key string
	// Backend, when set, is the store to use instead (tests); Close leaves
	// it open.
	Backend *store.Backend
}

// Config is everything a lockd is built from. The lockd command fills it
// from flags and LOCKD_* environment variables; pkg/lockdtest fills it for
// tests. Start from DefaultConfig: New rejects a zero Config.
type Config struct {
	// DataDir holds the embedded etcd member (etcd/), the dev PKI (pki/)
	// and lockctl.yaml.
	DataDir string
	// Listen is the gRPC address, host:port.
	Listen string
	// MetricsListen is the HTTP address for /metrics, /healthz and /readyz.
	MetricsListen string
	// ClassesDir is the lock class directory, watched for changes (with
	// ClassesFrom "dir").
	ClassesDir string
	// ClassesFrom is where the classes come from: ClassesFromDir (the
	// default, ClassesDir) or ClassesFromKubernetes (the LockClass,
	// LockGrant and LockNamespace objects of the API server Kubeconfig
	// names, or of the cluster lockd runs in; the last good set is cached
	// in DataDir).
	ClassesFrom string
	// Kubeconfig is the kubeconfig file for ClassesFromKubernetes; empty
	// uses the in-cluster configuration.
	Kubeconfig string
	// ClassesSyncTimeout bounds how long lockd waits for the API server at
	// start before it serves the cached set (kubeclasses.DefaultSyncTimeout
	// when zero).
	ClassesSyncTimeout time.Duration

	// EtcdEndpoints selects an external etcd cluster; empty starts the
	// embedded single-member etcd in DataDir/etcd.
	EtcdEndpoints []string
	// EtcdCA, EtcdCert and EtcdKey configure client TLS to the external
	// cluster; all empty means plaintext.
	EtcdCA, EtcdCert, EtcdKey string
	// Topology is a topology file (package topology): the clusters and the
	// region. The lockd command reads it into EtcdEndpoints, the TLS
	// files and Region before the daemon starts.
	Topology string
	// Cluster names the etcd cluster lockd fronts (the topology's name for
	// it); empty: "embedded" for the embedded member, else "etcd".
	Cluster string
	// Clusters are the etcd clusters lockd fronts besides the one above
	// (the coord cluster), each serving the tiers it names; a tier not
	// named by one of them lives on the coord cluster. Empty: one cluster
	// serves every tier.
	Clusters []ClusterConfig
	// CoordServesEntity: the coord cluster serves the entity tier too, as
	// its first shard, beside the Clusters that serve it.
	CoordServesEntity bool
	// EmbeddedShards, with the embedded etcd, start one more embedded
	// member per name, each an entity shard beside the embedded cluster
	// (which stays the first shard): for development. Shard i (from 1)
	// listens on the client and peer ports of EtcdClientURL plus 2i and
	// 2i+1, its data in DataDir/shards/NAME.
	EmbeddedShards []string
	// EtcdClientURL and EtcdPeerURL are where the embedded member listens
	// (lockd itself talks to it in-process; these are for etcdctl).
	EtcdClientURL, EtcdPeerURL string

	// TLSCert, TLSKey and TLSClientCA configure server mutual TLS. All
	// empty (and InsecureLoopback unset) uses the dev PKI in DataDir/pki.
	TLSCert, TLSKey, TLSClientCA string
	// InsecureLoopback serves plaintext gRPC on a loopback address and
	// trusts the identity the client asserts in a header. Tests only.
	InsecureLoopback bool
	// EdgeIdentities are the SPIFFE IDs of the proxies (Envoy) in front of
	// lockd: a request whose mTLS peer is one of them is made for the
	// caller in its x-forwarded-client-cert header, and refused without a
	// valid one (identity.Extractor.Edges). Not with InsecureLoopback.
	EdgeIdentities []string
	// DebugPprof serves net/http/pprof on the metrics listener.
	DebugPprof bool
	// OIDC operator sign-in: when OIDCIssuer is set, force-release and
	// epoch-advance calls need an operator access token from it.
	OIDCIssuer, OIDCAudience, OIDCRolesClaim, OIDCRole, OIDCCA string
	// OIDCACR are acr values accepted as a second factor besides amr.
	OIDCACR []string

	// Operators are the SPIFFE IDs allowed to advance the epoch and to see
	// the tokens of others.
	Operators []string
	// RequestTimeout bounds each etcd call.
	RequestTimeout time.Duration
	// MaxBatch is how many grants and releases of different keys one etcd
	// transaction may commit together (1: each alone); MaxTxnOps is the
	// etcd clusters' --max-txn-ops, which a batch stays within.
	MaxBatch, MaxTxnOps int
	// OpenAfter is how long lockd goes without an etcd quorum before it
	// grants classes with onQuorumLoss: open from memory (unprotected,
	// spooled in <DataDir>/spool). It must outlast an etcd election.
	OpenAfter time.Duration
	// Region is the region this lockd serves: keys of namespaces homed to
	// another (LockNamespace) are refused with WRONG_REGION, never
	// forwarded. Empty serves every namespace, while the classes name at
	// most one region.
	Region string
	// RegionEndpoints are other regions' lockd addresses (region → host:port),
	// named in a WRONG_REGION refusal.
	RegionEndpoints map[string]string
	// BootstrapEpochClusterID (hex) lets lockd create epoch 1 on an external
	// cluster with this ID that has no epoch record, if its data dir records
	// no epoch. Empty: a store without a record stays sealed until two
	// operators initialise it.
	BootstrapEpochClusterID string
	// MaxSessionsPerIdentity and MaxWaitersPerIdentity are per-identity
	// quotas on this lockd.
	MaxSessionsPerIdentity, MaxWaitersPerIdentity int
	// ValidateRate and ValidateBurst limit ValidateToken calls per identity.
	ValidateRate  float64
	ValidateBurst int

	// LogLevel is one of debug, info, warn, error.
	LogLevel string
	// LogFormat is json or text.
	LogFormat string
	// LogOutput receives the logs (one line per event); nil means io.Discard.
	LogOutput io.Writer
	// Now is the clock for certificates and class waivers; nil means time.Now.
	Now func() time.Time

	// Backend, when set, is the store to use instead of opening one from
	// the Etcd* fields; Close leaves it open (its owner closes it). Its
	// Fresh field says whether lockd may create the first epoch on it.
	Backend *store.Backend
	// StateFile is where lockd remembers the highest (epoch, cluster ID)
	// it served; empty means <DataDir>/epoch-state.json.
	StateFile string
	// PollInterval is how often a waiter re-reads its key besides the
	// watch (the arbiter's default when zero).
	PollInterval time.Duration
	// Registry receives lockd's metrics and is served on /metrics; nil
	// means a new registry that also has the Go and process collectors.
	Registry *prometheus.Registry
	// OperatorVerifier, when set, verifies operator tokens instead of one
	// built from the OIDC* fields.
	OperatorVerifier *operator.Verifier
	// ShutdownGrace bounds how long Close waits for in-flight calls before
	// it closes the remaining streams; zero means 5s.
	ShutdownGrace time.Duration

	// Audit is the audit history (tailer, sink, archive).
	Audit AuditConfig

	// TracerProvider, when set, traces lockd's gRPC server and, for an
	// external etcd, its etcd client (the embedded etcd is called in
	// process: its calls have no spans of their own). nil: no tracing. The
	// lockd command builds one from the OTEL_* environment (tracing.FromEnv).
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns the defaults of the lockd command's flags.
func DefaultConfig() Config {
	return Config{
		DataDir:                "./.lockd",
		Listen:                 "127.0.0.1:7420",
		MetricsListen:          "127.0.0.1:7421",
		ClassesDir:             "./classes",
		ClassesFrom:            ClassesFromDir,
		EtcdClientURL:          "http://127.0.0.1:7422",
		EtcdPeerURL:            "http://127.0.0.1:7423",
		RequestTimeout:         5 * time.Second,
		MaxBatch:               arbiter.DefaultMaxBatch,
		MaxTxnOps:              arbiter.DefaultMaxTxnOps,
		OpenAfter:              arbiter.DefaultOpenAfter,
		MaxSessionsPerIdentity: arbiter.DefaultMaxSessionsPerIdentity,
		MaxWaitersPerIdentity:  arbiter.DefaultMaxWaitersPerIdentity,
		ValidateRate:           arbiter.DefaultValidateRate,
		ValidateBurst:          arbiter.DefaultValidateBurst,
		LogLevel:               "info",
		LogFormat:              "json",
		Audit:                  defaultAuditConfig(),
	}
}

func (o *Config) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// embedded reports whether lockd starts its own etcd.
func (o *Config) embedded() bool { return o.Backend == nil && len(o.EtcdEndpoints) == 0 }

// DevPKI reports whether the server certificate comes from the dev PKI.
func (o *Config) DevPKI() bool {
	return !o.InsecureLoopback && o.TLSCert == "" && o.TLSKey == "" && o.TLSClientCA == ""
}

// ErrConfig marks a Config that breaks a rule; the message names each
// field (as its lockd flag) and its rule.
var ErrConfig = errors.New("lockd: invalid configuration")

// Validate checks every field and returns all violations at once, each
// naming the flag and the rule. The error wraps ErrConfig.
func (o *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	o.Audit.validate(add)
	if o.OIDCIssuer != "" && o.OIDCAudience == "" {
		add("--oidc-audience: required with --oidc-issuer (the audience lockd's tokens carry)")
	}
	if o.OIDCIssuer == "" && (o.OIDCAudience != "" || o.OIDCCA != "" || len(o.OIDCACR) > 0) {
		add("--oidc-issuer: required by the other --oidc-* flags")
	}
	if strings.TrimSpace(o.DataDir) == "" {
		add("--data-dir: must not be empty")
	}
	switch o.ClassesFrom {
	case "", ClassesFromDir:
		if strings.TrimSpace(o.ClassesDir) == "" {
			add("--classes: must not be empty")
		}
	case ClassesFromKubernetes:
	default:
		add("--classes-from %q: must be one of %s", o.ClassesFrom, strings.Join(ClassSources, ", "))
	}
	if o.Kubeconfig != "" && o.ClassesFrom != ClassesFromKubernetes {
		add("--kubeconfig: only with --classes-from kubernetes")
	}
	if o.ClassesSyncTimeout < 0 {
		add("--classes-sync-timeout %s: must not be negative", o.ClassesSyncTimeout)
	}
	if err := checkHostPort(o.Listen); err != nil {
		add("--listen %q: %v", o.Listen, err)
	}
	if err := checkHostPort(o.MetricsListen); err != nil {
		add("--metrics-listen %q: %v", o.MetricsListen, err)
	}
	if o.Listen != "" && o.Listen == o.MetricsListen && !strings.HasSuffix(o.Listen, ":0") {
		add("--metrics-listen %q: must differ from --listen", o.MetricsListen)
	}

	switch {
	case o.Backend != nil:
		if len(o.EtcdEndpoints) > 0 {
			add("--etcd-endpoints: cannot be combined with a given store backend")
		}
	case o.embedded():
		if o.EtcdCA != "" || o.EtcdCert != "" || o.EtcdKey != "" {
			add("--etcd-ca, --etcd-cert, --etcd-key: only apply to an external cluster; set --etcd-endpoints too")
		}
		if o.BootstrapEpochClusterID != "" {
			add("--bootstrap-epoch-cluster-id: only applies to an external cluster (the embedded store creates its first epoch itself)")
		}
		clientOK := checkEtcdURL("--etcd-client-url", o.EtcdClientURL, add)
		peerOK := checkEtcdURL("--etcd-peer-url", o.EtcdPeerURL, add)
		if clientOK && peerOK && o.EtcdClientURL == o.EtcdPeerURL {
			add("--etcd-peer-url %q: must differ from --etcd-client-url", o.EtcdPeerURL)
		}
	default:
		for _, ep := range o.EtcdEndpoints {
			if strings.TrimSpace(ep) == "" {
				add("--etcd-endpoints: empty entry in %q", strings.Join(o.EtcdEndpoints, ","))
				break
			}
		}
		if (o.EtcdCert == "") != (o.EtcdKey == "") {
			add("--etcd-cert, --etcd-key: must be given together")
		}
		if o.BootstrapEpochClusterID != "" {
			if id, err := strconv.ParseUint(o.BootstrapEpochClusterID, 16, 64); err != nil || id == 0 {
				add("--bootstrap-epoch-cluster-id %q: must be an etcd cluster ID in hex, as etcdctl endpoint status prints it", o.BootstrapEpochClusterID)
			}
		}
	}
	if len(o.EmbeddedShards) > 0 && !o.embedded() {
		add("--embedded-shard: only with the embedded etcd (not with --etcd-endpoints or --topology)")
	}
	seen := map[string]bool{"embedded": true}
	for _, name := range o.EmbeddedShards {
		if !dnsLabel.MatchString(name) || seen[name] {
			add("--embedded-shard %q: must be a DNS label, unique, and not \"embedded\" (the embedded cluster's name)", name)
		}
		seen[name] = true
	}
	for _, c := range o.Clusters {
		if c.Backend == nil && len(c.Endpoints) == 0 {
			add("cluster %q: endpoints: required", c.Name)
		}
		if (c.Cert == "") != (c.Key == "") {
			add("cluster %q: tls cert and key: must be given together", c.Name)
		}
	}
	if o.MaxSessionsPerIdentity < 1 || o.MaxWaitersPerIdentity < 1 {
		add("--max-sessions-per-identity %d and --max-waiters-per-identity %d: must be at least 1", o.MaxSessionsPerIdentity, o.MaxWaitersPerIdentity)
	}

	switch {
	case o.InsecureLoopback:
		if o.TLSCert != "" || o.TLSKey != "" || o.TLSClientCA != "" {
			add("--insecure-loopback: cannot be combined with --tls-cert, --tls-key or --tls-client-ca")
		}
		if err := identity.CheckLoopback(o.Listen); err != nil {
			add("--insecure-loopback: --listen must be a loopback address (127.0.0.0/8, ::1 or localhost): %w", err)
		}
	case !o.DevPKI():
		if o.TLSCert == "" || o.TLSKey == "" || o.TLSClientCA == "" {
			add("--tls-cert, --tls-key, --tls-client-ca: give all three, or none to use the dev PKI in <data-dir>/pki")
		}
	}

	o.validateEdges(add)
	for _, op := range o.Operators {
		if _, err := spiffeid.FromString(op); err != nil {
			add("--operators %q: not a SPIFFE ID: %v", op, err)
		}
	}
	if o.ValidateRate <= 0 || o.ValidateBurst < 1 {
		add("--validate-rate %v and --validate-burst %d: must be positive", o.ValidateRate, o.ValidateBurst)
	}
	if o.RequestTimeout <= 0 {
		add("--request-timeout %s: must be positive", o.RequestTimeout)
	}
	if o.MaxBatch < 1 {
		add("--max-batch %d: must be at least 1 (1 commits every grant and release in a transaction of its own)", o.MaxBatch)
	}
	if o.MaxTxnOps < arbiter.MinMaxTxnOps {
		add("--etcd-max-txn-ops %d: must be at least %d and no more than the etcd clusters' own --max-txn-ops", o.MaxTxnOps, arbiter.MinMaxTxnOps)
	}
	if o.Region != "" && !lockkey.IsDNSLabel(o.Region) {
		add("--region %q: must be a DNS label, as a LockNamespace's spec.region", o.Region)
	}
	for _, r := range slices.Sorted(maps.Keys(o.RegionEndpoints)) {
		switch addr := o.RegionEndpoints[r]; {
		case !lockkey.IsDNSLabel(r):
			add("--region-endpoint %s=%s: %q is not a region name (a DNS label)", r, addr, r)
		case checkHostPort(addr) != nil:
			add("--region-endpoint %s=%s: the address must be host:port: %w", r, addr, checkHostPort(addr))
		}
	}
	if o.OpenAfter < arbiter.MinOpenAfter {
		add("--open-after %s: must be at least %s (longer than an etcd election)", o.OpenAfter, arbiter.MinOpenAfter)
	}
	if !slices.Contains(LogLevels, o.LogLevel) {
		add("--log-level %q: must be one of %s", o.LogLevel, strings.Join(LogLevels, ", "))
	}
	if !slices.Contains(LogFormats, o.LogFormat) {
		add("--log-format %q: must be one of %s", o.LogFormat, strings.Join(LogFormats, ", "))
	}
	if o.ShutdownGrace < 0 {
		add("shutdown grace %s: must not be negative", o.ShutdownGrace)
	}
	if len(errs) == 0 {
		return nil
	}
	return configError{errors.Join(errs...)}
}

// configError is the violations of a Config: its message is theirs, one
// per line, and it matches ErrConfig.
type configError struct{ err error }

func (e configError) Error() string   { return e.err.Error() }
func (e configError) Unwrap() []error { return []error{ErrConfig, e.err} }

// checkHostPort accepts "host:port" and ":port" with a numeric port.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port: %w", err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("port %q must be a number from 0 to 65535", port)
	}
	return nil
}

// checkEtcdURL checks a URL for the embedded member: http, with host:port.
func checkEtcdURL(flag, raw string, add func(string, ...any)) bool {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		add("%s %q: %v", flag, raw, err)
	case u.Scheme != "http":
		add("%s %q: must be an http:// URL (the embedded member does not serve TLS)", flag, raw)
	case u.Port() == "" || u.Hostname() == "":
		add("%s %q: must name a host and a port, e.g. http://127.0.0.1:7422", flag, raw)
	case u.Path != "" && u.Path != "/":
		add("%s %q: must not have a path", flag, raw)
	case identity.CheckLoopback(u.Host) != nil:
		// The embedded member serves plaintext without authentication:
		// anyone who reaches it could write any key, the epoch record
		// included.
		add("%s %q: must be a loopback address (127.0.0.0/8, ::1 or localhost): the embedded etcd has no TLS and no authentication; run an external cluster to reach etcd from elsewhere", flag, raw)
	default:
		return true
	}
	return false
}

// dnsLabel is a cluster name's form.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// shardURL is url with its port moved up by delta.
func shardURL(raw string, delta int) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return "", err
	}
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port+delta))
	return u.String(), nil
}
