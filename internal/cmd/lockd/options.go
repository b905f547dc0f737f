package lockdcmd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/identity"
)

// DevSPIFFEID is the identity of the client SVID the dev PKI writes to
// <data-dir>/pki/dev.crt.
const DevSPIFFEID = "spiffe://lockd.local/dev"

// Log levels and formats accepted by --log-level and --log-format.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"json", "text"}
)

// Options is everything the lockd server is configured with. The cobra
// command fills it from flags and LOCKD_* environment variables; tests build
// it directly (start from DefaultOptions).
type Options struct {
	// DataDir holds the embedded etcd member (etcd/), the dev PKI (pki/)
	// and lockctl.yaml.
	DataDir string
	// Listen is the gRPC address, host:port.
	Listen string
	// MetricsListen is the HTTP address for /metrics, /healthz and /readyz.
	MetricsListen string
	// ClassesDir is the lock class directory, watched for changes.
	ClassesDir string

	// EtcdEndpoints selects an external etcd cluster; empty starts the
	// embedded single-member etcd in DataDir/etcd.
	EtcdEndpoints []string
	// EtcdCA, EtcdCert and EtcdKey configure client TLS to the external
	// cluster; all empty means plaintext.
	EtcdCA, EtcdCert, EtcdKey string
	// EtcdClientURL and EtcdPeerURL are where the embedded member listens
	// (lockd itself talks to it in-process; these are for etcdctl).
	EtcdClientURL, EtcdPeerURL string

	// TLSCert, TLSKey and TLSClientCA configure server mutual TLS. All
	// empty (and InsecureLoopback unset) uses the dev PKI in DataDir/pki.
	TLSCert, TLSKey, TLSClientCA string
	// InsecureLoopback serves plaintext gRPC on a loopback address and
	// trusts the identity the client asserts in a header. Tests only.
	InsecureLoopback bool
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
}

// DefaultOptions returns the flag defaults.
func DefaultOptions() Options {
	return Options{
		DataDir:                "./.lockd",
		Listen:                 "127.0.0.1:7420",
		MetricsListen:          "127.0.0.1:7421",
		ClassesDir:             "./classes",
		EtcdClientURL:          "http://127.0.0.1:7422",
		EtcdPeerURL:            "http://127.0.0.1:7423",
		RequestTimeout:         5 * time.Second,
		MaxSessionsPerIdentity: arbiter.DefaultMaxSessionsPerIdentity,
		MaxWaitersPerIdentity:  arbiter.DefaultMaxWaitersPerIdentity,
		ValidateRate:           arbiter.DefaultValidateRate,
		ValidateBurst:          arbiter.DefaultValidateBurst,
		LogLevel:               "info",
		LogFormat:              "json",
	}
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// embedded reports whether lockd starts its own etcd.
func (o *Options) embedded() bool { return len(o.EtcdEndpoints) == 0 }

// devPKI reports whether the server certificate comes from the dev PKI.
func (o *Options) devPKI() bool {
	return !o.InsecureLoopback && o.TLSCert == "" && o.TLSKey == "" && o.TLSClientCA == ""
}

// usageError is a mistake in the command line or environment; Main exits
// with ExitUsage for it.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// validate checks every option and returns all violations at once, each
// naming the flag and the rule.
func (o *Options) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if o.OIDCIssuer != "" && o.OIDCAudience == "" {
		add("--oidc-audience: required with --oidc-issuer (the audience lockd's tokens carry)")
	}
	if o.OIDCIssuer == "" && (o.OIDCAudience != "" || o.OIDCCA != "" || len(o.OIDCACR) > 0) {
		add("--oidc-issuer: required by the other --oidc-* flags")
	}
	if strings.TrimSpace(o.DataDir) == "" {
		add("--data-dir: must not be empty")
	}
	if strings.TrimSpace(o.ClassesDir) == "" {
		add("--classes: must not be empty")
	}
	if err := checkHostPort(o.Listen); err != nil {
		add("--listen %q: %v", o.Listen, err)
	}
	if err := checkHostPort(o.MetricsListen); err != nil {
		add("--metrics-listen %q: %v", o.MetricsListen, err)
	}
	if o.Listen != "" && o.Listen == o.MetricsListen {
		add("--metrics-listen %q: must differ from --listen", o.MetricsListen)
	}

	if o.embedded() {
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
	} else {
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
	case !o.devPKI():
		if o.TLSCert == "" || o.TLSKey == "" || o.TLSClientCA == "" {
			add("--tls-cert, --tls-key, --tls-client-ca: give all three, or none to use the dev PKI in <data-dir>/pki")
		}
	}

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
	if !slices.Contains(logLevels, o.LogLevel) {
		add("--log-level %q: must be one of %s", o.LogLevel, strings.Join(logLevels, ", "))
	}
	if !slices.Contains(logFormats, o.LogFormat) {
		add("--log-format %q: must be one of %s", o.LogFormat, strings.Join(logFormats, ", "))
	}
	if len(errs) == 0 {
		return nil
	}
	return &usageError{err: errors.Join(errs...)}
}

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
