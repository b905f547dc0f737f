// Package lockdcmd is the lockd command: the gRPC lock arbiter on etcd, and
// the dev-cert helper that issues development client certificates.
//
// Main returns an exit code; only package main calls os.Exit.
package lockdcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/lockd"
)

// Exit codes returned by Main: internal/cli's table, the one lockctl and
// class-lint use.
const (
	// ExitOK means lockd ran and stopped cleanly.
	ExitOK = cli.ExitOK
	// ExitError means lockd failed at start-up or while serving.
	ExitError = cli.ExitFailure
	// ExitUsage means the command line or a LOCKD_* variable is wrong.
	ExitUsage = cli.ExitUsage
	// ExitUnavailable means a service lockd needs at start-up (etcd, the
	// OIDC issuer) could not be reached or did not answer in time.
	ExitUnavailable = cli.ExitUnavailable
)

// envPrefix prefixes the environment form of every root flag.
const envPrefix = "LOCKD_"

// envAnnotation marks a flag that may also be set from the environment.
const envAnnotation = "lockd_env"

// Main runs lockd with os.Args and returns the exit code. SIGINT and SIGTERM
// stop the server gracefully; a second signal kills the process.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal terminates
	}()
	return execute(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv, run)
}

// runFunc runs the server; tests substitute it to check flag parsing.
type runFunc func(ctx context.Context, opts *Options) error

// execute runs the command line args and maps the outcome to an exit code.
// Errors go to stderr as "lockd: …".
func execute(ctx context.Context, args []string, stdout, stderr io.Writer,
	lookupEnv func(string) (string, bool), runF runFunc) int {
	root := newRootCmd(stdout, stderr, lookupEnv, runF)
	root.SetArgs(args)
	cmd, err := cli.Execute(ctx, root)
	if err == nil {
		return ExitOK
	}
	cmdPath := ""
	if cmd != nil {
		cmdPath = cmd.CommandPath()
	}
	return cli.Fail(stderr, "lockd", cmdPath, classify(err))
}

// classify gives an error from lockd its exit code: ExitUsage for a
// mistake in the command line or environment (cli.Execute has marked
// cobra's own), ExitUnavailable when a service lockd needs could not be
// reached (by error type: a failed dial or DNS lookup, an HTTP request
// without an answer, the store unavailable, a start-up deadline), and
// ExitError for anything else.
func classify(err error) error {
	var ue *cli.UsageError
	switch {
	case errors.As(err, &ue):
		return cli.Usage(err)
	case cli.Unreachable(err), errors.Is(err, arbiter.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return cli.Exit(ExitUnavailable, err)
	default:
		return cli.Exit(ExitError, err)
	}
}

// EnvName returns the environment variable for a flag: LOCKD_ and the flag
// name upper-cased with '-' as '_', e.g. LOCKD_DATA_DIR for --data-dir.
func EnvName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func newRootCmd(stdout, stderr io.Writer, lookupEnv func(string) (string, bool), runF runFunc) *cobra.Command {
	opts := DefaultOptions()
	opts.LogOutput = stderr

	cmd := &cobra.Command{
		Use:   "lockd [flags]",
		Short: "Serve fenced locks over gRPC, arbitrated on etcd",
		Long: `lockd is a lock service. It grants holds on keys to callers identified by
their SPIFFE ID (mutual TLS), arbitrated on etcd, and fences every grant with
a token that increases across grants and store restores.

Without --etcd-endpoints lockd starts an embedded single-member etcd in
<data-dir>/etcd. Without --tls-cert/--tls-key/--tls-client-ca it creates a
development PKI in <data-dir>/pki (a CA, a server certificate and a client
SVID for ` + DevSPIFFEID + `) and, in embedded mode, writes
<data-dir>/lockctl.yaml so lockctl can connect at once. The dev PKI is for
development only: its CA key sits unencrypted on disk.

Lock classes are read from --classes and reloaded when files change; an
invalid change is rejected and the last good set keeps serving. With
--classes-from kubernetes they are the LockClass, LockGrant and
LockNamespace objects of the API server (--kubeconfig, or the cluster lockd
runs in), watched; an invalid object gets a Warning event and its last good
version keeps serving, and while the API server is unreachable the last good
set keeps serving, cached in <data-dir> for a restart.

Every flag can also be set with an environment variable: LOCKD_ followed by
the flag name in upper case with '-' as '_' (LOCKD_DATA_DIR for --data-dir).
A flag given on the command line wins over the variable. List flags take a
comma-separated value.

/metrics, /healthz and /readyz are served over plain HTTP on --metrics-listen.
SIGINT or SIGTERM stops lockd gracefully.

Exit status: 0 stopped cleanly, 1 failed at start-up or while serving, 2 usage
error (a flag, argument or LOCKD_* variable), 69 etcd or the OIDC issuer could
not be reached at start-up. docs/operating.md has the table.`,
		Example: `  # Development: embedded etcd, dev PKI and ./classes, state in ./.lockd
  lockd

  # Issue a client certificate for another identity from the dev CA
  lockd dev-cert spiffe://lockd.local/payments/worker --out ./worker-svid

  # Production: an external etcd cluster and your own certificates
  lockd --etcd-endpoints https://etcd-0:2379,https://etcd-1:2379,https://etcd-2:2379 \
    --etcd-ca /etc/lockd/etcd-ca.crt --etcd-cert /etc/lockd/etcd.crt --etcd-key /etc/lockd/etcd.key \
    --tls-cert /etc/lockd/tls.crt --tls-key /etc/lockd/tls.key --tls-client-ca /etc/lockd/clients-ca.crt \
    --listen 0.0.0.0:7420 --metrics-listen 0.0.0.0:7421 --classes /etc/lockd/classes \
    --operators spiffe://example.org/ops/oncall

  # The clusters and the region from a topology file (docs/operating.md)
  lockd --topology /etc/lockd/topology.yaml --tls-cert /etc/lockd/tls.crt --tls-key /etc/lockd/tls.key \
    --tls-client-ca /etc/lockd/clients-ca.crt --listen 0.0.0.0:7420

  # Classes from the Kubernetes API instead of a directory
  lockd --classes-from kubernetes --kubeconfig ~/.kube/config

  # The same settings from the environment
  LOCKD_LISTEN=0.0.0.0:7420 LOCKD_LOG_FORMAT=text lockd

  # Tests only: plaintext gRPC, the caller's identity taken from a header
  lockd --insecure-loopback --listen 127.0.0.1:7420`,
		Args:          usageArgs(cobra.NoArgs),
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyEnv(cmd.Flags(), lookupEnv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"etcd-client-url", "etcd-peer-url"} {
				if cmd.Flags().Changed(name) && len(opts.EtcdEndpoints) > 0 {
					return cli.Usagef("--%s: configures the embedded etcd and cannot be combined with --etcd-endpoints", name)
				}
			}
			if err := applyTopology(cmd.Flags(), &opts); err != nil {
				return err
			}
			return runF(cmd.Context(), &opts)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &cli.UsageError{Err: err} })

	pf := cmd.PersistentFlags()
	pf.StringVar(&opts.DataDir, "data-dir", opts.DataDir, "directory for the embedded etcd, the dev PKI (pki/) and lockctl.yaml")
	pf.StringVar(&opts.LogLevel, "log-level", opts.LogLevel, "log level: "+strings.Join(logLevels, "|"))
	pf.StringVar(&opts.LogFormat, "log-format", opts.LogFormat, "log format, one line per event: "+strings.Join(logFormats, "|"))

	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", opts.Listen, "gRPC listen address (host:port)")
	f.StringVar(&opts.MetricsListen, "metrics-listen", opts.MetricsListen, "HTTP listen address for /metrics, /healthz and /readyz")
	f.StringVar(&opts.ClassesDir, "classes", opts.ClassesDir, "lock class directory, reloaded on change (with --classes-from dir)")
	f.StringVar(&opts.ClassesFrom, "classes-from", opts.ClassesFrom, "where the classes come from: "+strings.Join(lockd.ClassSources, "|"))
	f.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig file for --classes-from kubernetes (default: the cluster lockd runs in)")
	f.DurationVar(&opts.ClassesSyncTimeout, "classes-sync-timeout", 0, "with --classes-from kubernetes: how long to wait for the API server at start before serving the cached set (default 10s)")
	addEtcdFlags(f, &opts)
	f.StringVar(&opts.Topology, "topology", "", "a topology file naming the etcd cluster of each tier (coord, entity), with endpoints and TLS, and the region (docs/operating.md); replaces --etcd-endpoints, --etcd-ca, --etcd-cert, --etcd-key and sets --region")
	f.StringVar(&opts.EtcdClientURL, "etcd-client-url", opts.EtcdClientURL, "embedded etcd client URL (for etcdctl; lockd talks to the member in-process)")
	f.StringVar(&opts.EtcdPeerURL, "etcd-peer-url", opts.EtcdPeerURL, "embedded etcd peer URL")
	f.StringArrayVar(&opts.EmbeddedShards, "embedded-shard", nil, "DEVELOPMENT: start one more embedded etcd member as an entity shard named NAME, beside the embedded cluster (repeatable; shard i listens on --etcd-client-url's port + 2i and + 2i+1; docs/operating.md, Entity shards)")
	f.StringVar(&opts.TLSCert, "tls-cert", "", "server certificate (PEM); with --tls-key and --tls-client-ca, replaces the dev PKI")
	f.StringVar(&opts.TLSKey, "tls-key", "", "server private key (PEM)")
	f.StringVar(&opts.TLSClientCA, "tls-client-ca", "", "CA certificates (PEM) that client SVIDs must chain to")
	f.BoolVar(&opts.InsecureLoopback, "insecure-loopback", false, "TESTS ONLY: plaintext gRPC, caller identity taken unverified from a header; --listen must be loopback")
	f.StringSliceVar(&opts.Operators, "operators", nil, "SPIFFE IDs allowed to advance the epoch and see the tokens of others, comma-separated")
	f.DurationVar(&opts.RequestTimeout, "request-timeout", opts.RequestTimeout, "timeout of each etcd request")
	f.IntVar(&opts.MaxBatch, "max-batch", opts.MaxBatch, "grants and releases of different keys committed together in one etcd transaction while the previous one is in flight (group commit); 1 commits each alone")
	f.IntVar(&opts.MaxTxnOps, "etcd-max-txn-ops", opts.MaxTxnOps, "the etcd clusters' --max-txn-ops: a batch never needs more")
	f.DurationVar(&opts.OpenAfter, "open-after", opts.OpenAfter, "time without an etcd quorum after which classes with onQuorumLoss: open are granted from memory, unprotected (token 0); longer than the cluster's election timeout")
	f.StringVar(&opts.Region, "region", "", "the region this lockd serves: keys of namespaces homed to another region (LockNamespace) are refused with WRONG_REGION; required once the classes name more than one region")
	f.StringToStringVar(&opts.RegionEndpoints, "region-endpoint", nil, "another region's lockd, named in WRONG_REGION refusals: REGION=HOST:PORT, comma-separated for several")
	f.Float64Var(&opts.ValidateRate, "validate-rate", opts.ValidateRate, "ValidateToken calls per second allowed to one identity (apart from grants)")
	f.IntVar(&opts.ValidateBurst, "validate-burst", opts.ValidateBurst, "ValidateToken burst allowed to one identity")
	f.StringVar(&opts.OIDCIssuer, "oidc-issuer", "", "OIDC issuer (e.g. a Keycloak realm URL): operators sign in there; force-release and epoch advance then need their token")
	f.StringVar(&opts.OIDCAudience, "oidc-audience", "", "audience operator tokens must carry (with --oidc-issuer)")
	f.StringVar(&opts.OIDCRolesClaim, "oidc-roles-claim", "realm_access.roles", "dotted claim path of the roles list in operator tokens")
	f.StringVar(&opts.OIDCRole, "oidc-role", "lock-operator", "role operator tokens must carry")
	f.StringSliceVar(&opts.OIDCACR, "oidc-acr", nil, "acr values accepted as multi-factor sign-in, besides amr otp, mfa or hwk")
	f.StringVar(&opts.OIDCCA, "oidc-ca", "", "CA certificate (PEM) to verify the OIDC issuer's TLS")
	f.StringVar(&opts.BootstrapEpochClusterID, "bootstrap-epoch-cluster-id", "", "first deployment on an external cluster: create epoch 1 if the store has no epoch record, only on the etcd cluster with this ID (hex, from etcdctl endpoint status) and only if this lockd's data dir records no epoch; a rebuilt store has another ID, so leaving it set is harmless")
	f.IntVar(&opts.MaxSessionsPerIdentity, "max-sessions-per-identity", opts.MaxSessionsPerIdentity, "sessions one identity may have open on this lockd")
	f.IntVar(&opts.MaxWaitersPerIdentity, "max-waiters-per-identity", opts.MaxWaitersPerIdentity, "waiters one identity may have queued on this lockd")
	f.BoolVar(&opts.DebugPprof, "debug-pprof", false, "serve Go profiles at /debug/pprof/ on the metrics listener (for profiling; never expose it)")
	f.StringVar(&opts.Audit.Mode, "audit", opts.Audit.Mode, "audit history (docs/audit.md): "+strings.Join(auditModes, "|")+"; auto is on with the embedded etcd, off with --etcd-endpoints")
	addAuditFlags(f, &opts)
	addEdgeFlags(f, &opts)

	annotateEnv(pf)
	annotateEnv(f)
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(logLevels, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions(logFormats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("classes-from", cobra.FixedCompletions(lockd.ClassSources, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("classes")
	_ = cmd.MarkPersistentFlagDirname("data-dir")

	cmd.AddCommand(newDevCertCmd(&opts, stdout))
	cmd.AddCommand(newAuditCmd(&opts, nil))
	return cmd
}

// applyEnv sets every flag annotated with an environment variable from that
// variable, unless the flag was given on the command line.
func applyEnv(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(fl *pflag.Flag) {
		names := fl.Annotations[envAnnotation]
		if len(names) == 0 || fl.Changed {
			return
		}
		v, ok := lookupEnv(names[0])
		if !ok {
			return
		}
		if err := fs.Set(fl.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: invalid value for --%s: %w", names[0], v, fl.Name, err))
		}
	})
	if len(errs) > 0 {
		return &cli.UsageError{Err: errors.Join(errs...)}
	}
	return nil
}

// usageArgs marks positional-argument errors as usage errors.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &cli.UsageError{Err: err}
		}
		return nil
	}
}

// addEtcdFlags adds the external cluster's flags.
func addEtcdFlags(f *pflag.FlagSet, opts *Options) {
	f.StringSliceVar(&opts.EtcdEndpoints, "etcd-endpoints", nil, "external etcd endpoints, comma-separated (empty: start an embedded etcd in <data-dir>/etcd)")
	f.StringVar(&opts.EtcdCA, "etcd-ca", "", "CA certificate (PEM) to verify the external etcd cluster")
	f.StringVar(&opts.EtcdCert, "etcd-cert", "", "client certificate (PEM) for the external etcd cluster")
	f.StringVar(&opts.EtcdKey, "etcd-key", "", "client key (PEM) for the external etcd cluster")
}

// addAuditFlags adds the audit sink and archive flags.
func addAuditFlags(f *pflag.FlagSet, opts *Options) {
	f.StringVar(&opts.Audit.SQLite, "audit-sqlite", "", "the embedded history file (default <data-dir>/audit.db; unused with --audit-clickhouse)")
	f.StringVar(&opts.Audit.ClickHouse, "audit-clickhouse", "", "write the history to ClickHouse instead: clickhouse://host:9000/database (shared by every lockd of a cluster)")
	f.DurationVar(&opts.Audit.CompactionWindow, "audit-compaction-window", opts.Audit.CompactionWindow, "etcd's compaction retention; the tailer's lag alarm fires at half of it")
	f.StringVar(&opts.Audit.Archive.Endpoint, "audit-archive-endpoint", "", "MinIO/S3 host:port to archive the history to (hourly Parquet; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	f.BoolVar(&opts.Audit.Archive.Insecure, "audit-archive-insecure", false, "talk plain HTTP to --audit-archive-endpoint")
	f.StringVar(&opts.Audit.Archive.Bucket, "audit-archive-bucket", "", "bucket for the hourly Parquet files")
	f.StringVar(&opts.Audit.Archive.ForceBucket, "audit-force-bucket", "", "bucket, created with object lock, for force-release records")
	f.StringVar(&opts.Audit.Archive.ForceMode, "audit-force-mode", opts.Audit.Archive.ForceMode, "object-lock retention mode of force-release records: COMPLIANCE|GOVERNANCE")
	f.DurationVar(&opts.Audit.Archive.ForceRetention, "audit-force-retention", opts.Audit.Archive.ForceRetention, "how long a force-release record cannot be deleted")
	f.DurationVar(&opts.Audit.Archive.Every, "audit-archive-every", opts.Audit.Archive.Every, "how often the last complete hour is archived")
}

// annotateEnv gives every flag of fs its LOCKD_* variable.
func annotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(fl *pflag.Flag) {
		env := EnvName(fl.Name)
		fl.Usage += " [$" + env + "]"
		_ = fs.SetAnnotation(fl.Name, envAnnotation, []string{env})
	})
}
