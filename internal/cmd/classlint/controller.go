package classlint

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/lockd-dev/lockd/internal/classcontroller"
	"github.com/lockd-dev/lockd/internal/cli"
)

// controllerName is the controller's user agent, event source and field
// manager.
const controllerName = classcontroller.FieldManager

// ControllerOptions are the options of class-lint controller.
type ControllerOptions struct {
	// Kubeconfig is a kubeconfig file; empty means the in-cluster
	// configuration (the pod's service account).
	Kubeconfig string
	// LeaderElectionNamespace and LeaderElectionID name the Lease that
	// elects the one replica that writes.
	LeaderElectionNamespace, LeaderElectionID string
	// Resync is how often every class is reconciled with no event.
	Resync time.Duration
	// ErrOut receives the logs.
	ErrOut io.Writer
}

func newControllerCmd(stderr io.Writer) *cobra.Command {
	opts := ControllerOptions{
		Kubeconfig:              os.Getenv("KUBECONFIG"),
		LeaderElectionNamespace: "lockd-system",
		LeaderElectionID:        "class-lint-controller",
		Resync:                  classcontroller.DefaultResync,
		ErrOut:                  stderr,
	}
	cmd := &cobra.Command{
		Use:   "controller [--kubeconfig FILE]",
		Short: "Mark each LockClass fenced, or not, from its PauseTestResults (the class controller)",
		Long: `controller is the class controller. It watches LockClasses and PauseTestResults
in every namespace and writes each LockClass's status: status.fenced,
status.fencedUntil, status.pauseTestResult and a condition of type Fenced
whose reason and message say why. A class declared enforcement: fenced is
marked fenced only while a PauseTestResult of its namespace names the class,
its spec.resource and its spec.resourceSchemaVersion, and has run within the
last year and not expired; lockd serves the class as fenced only while that
status says so. Every other class is marked not fenced, with the reason
(DeclaredAdvisory, NoResource, NoPauseTest, PauseTestExpired,
SchemaVersionChanged, ResourceMismatch, PauseTestInFuture, Invalid).

The status is written again when a class or a result changes, a second after
the result in use expires (no event needed), and at every --resync; only the
status subresource is written, and only when it changes. It carries the
generation of the spec it was computed for (observedGeneration).

Run two replicas: one, elected through the coordination.k8s.io Lease
--leader-election-id in --leader-election-namespace, writes; the others wait
to take over. A replica that loses the Lease stops writing and exits 69, so
that it is restarted as a candidate. Leader election keeps one writer in the
steady state but does not fence: for a moment during a handover two replicas
may both write, and since each writes what the objects say they agree.

The controller does not run the pause test (lockctl fence-test does, and
writes the PauseTestResult) and refuses no object (the admission webhook and
class-lint check do; a class that breaks a rule lockd applies at load is
marked not fenced, reason Invalid). deploy/controller/ has the
manifests and the RBAC it needs; docs/class-controller.md explains.

Without --kubeconfig (or $KUBECONFIG) it uses the pod's service account.
SIGTERM or SIGINT stops it and releases the Lease, so another replica takes
over at once.

Exit status: 0 after SIGTERM or SIGINT, 2 when no Kubernetes configuration can
be loaded, 69 when the leader Lease was lost.`,
		Example: `  # In a pod, with the service account of deploy/controller/
  class-lint controller

  # From a workstation, against the cluster of a kubeconfig
  class-lint controller --kubeconfig ~/.kube/config --leader-election-namespace lockd-system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Resync <= 0 {
				return cli.Usagef("--resync must be positive: it is how often every class is reconciled with no event")
			}
			if opts.LeaderElectionNamespace == "" || opts.LeaderElectionID == "" {
				return cli.Usagef("--leader-election-namespace and --leader-election-id must not be empty: they name the Lease that elects the one replica that writes")
			}
			cfg, err := restConfig(opts.Kubeconfig)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if code := controllerRun(ctx, opts, cfg); code != ExitOK {
				return &cli.ExitError{Code: code, Silent: true} // logged
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Kubeconfig, "kubeconfig", opts.Kubeconfig, "kubeconfig file of the cluster (env KUBECONFIG); empty: the in-cluster configuration")
	f.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", opts.LeaderElectionNamespace, "namespace of the leader election Lease")
	f.StringVar(&opts.LeaderElectionID, "leader-election-id", opts.LeaderElectionID, "name of the leader election Lease")
	f.DurationVar(&opts.Resync, "resync", opts.Resync, "how often every class is reconciled with no event")
	_ = cmd.MarkFlagFilename("kubeconfig")
	return cmd
}

// controllerRun runs the controller on the cluster cfg reaches until ctx
// is done or the Lease is lost, and returns the exit code.
func controllerRun(ctx context.Context, opts ControllerOptions, cfg *rest.Config) int {
	log := slog.New(slog.NewTextHandler(opts.ErrOut, nil))
	klog.SetSlogLogger(log.With("component", "client-go"))

	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = controllerName
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		log.Error("cannot make a Kubernetes client", "err", err)
		return ExitUsage
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Error("cannot make a Kubernetes client", "err", err)
		return ExitUsage
	}

	events := record.NewBroadcaster(record.WithContext(ctx))
	defer events.Shutdown()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	recorder := events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: controllerName})

	ctrl, err := classcontroller.New(classcontroller.Config{Client: dyn, Resync: opts.Resync, Log: log, Recorder: recorder})
	if err != nil {
		log.Error("cannot start the class controller", "err", err)
		return ExitUsage
	}
	log.Info("class controller starting", "server", cfg.Host, "lease", opts.LeaderElectionNamespace+"/"+opts.LeaderElectionID, "resync", opts.Resync)
	err = ctrl.RunElected(ctx, classcontroller.Election{Client: kc, Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionID})
	switch {
	case err == nil:
		log.Info("stopped")
		return ExitOK
	case errors.Is(err, classcontroller.ErrLeaseLost):
		return ExitUnavailable // logged by RunElected
	default:
		log.Error("the class controller stopped", "err", err)
		return cli.ExitFailure
	}
}

// restConfig loads a kubeconfig file, or the in-cluster configuration when
// path is empty.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, cli.Usagef("no --kubeconfig and not in a pod (%w): pass --kubeconfig FILE or set KUBECONFIG", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, cli.Usagef("--kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}
