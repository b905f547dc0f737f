package lockd

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockd-dev/lockd/internal/arbiter"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/kubeclasses"
)

// Class sources (--classes-from).
const (
	// ClassesFromDir reads a class directory (--classes), watched for
	// changes: the default.
	ClassesFromDir = "dir"
	// ClassesFromKubernetes watches LockClass, LockGrant and LockNamespace
	// objects in the Kubernetes API (--kubeconfig, or in-cluster).
	ClassesFromKubernetes = "kubernetes"
)

// ClassSources are the values --classes-from accepts.
var ClassSources = []string{ClassesFromDir, ClassesFromKubernetes}

// staleClasses is the age past which /readyz calls the served class set
// stale (it stays ready: lockd serves the last good set).
const staleClasses = time.Minute

// classSource serves the class set: a class directory or the Kubernetes API.
type classSource interface {
	Current() *class.Set
	OnChange(func(*class.Set))
	Close() error
	// confirmed is when the served set was last known current, and why it
	// may not be now (nil when it is).
	confirmed() (time.Time, error)
	// describe names where the classes come from, for the log and /readyz.
	describe() string
}

type dirSource struct {
	*class.Watcher
	dir string
}

func (d dirSource) confirmed() (time.Time, error) { return d.Confirmed(), nil }
func (d dirSource) describe() string              { return "the class directory " + d.dir }

type kubeSource struct {
	*kubeclasses.Source
	host string
}

func (k kubeSource) confirmed() (time.Time, error) {
	st := k.Status()
	return st.Confirmed, st.Err
}

func (k kubeSource) describe() string { return "the Kubernetes API at " + k.host }

// openClasses starts the class source cfg names.
func openClasses(ctx context.Context, cfg *Config, dataDir string, logger *slog.Logger, metrics *arbiter.Metrics) (classSource, error) {
	onReject := func(error) { metrics.ClassReloadFailures.Inc() }
	if cfg.ClassesFrom != ClassesFromKubernetes {
		// Classes load without the clock: a lapsed advisory waiver is
		// class-lint's failure to report, not a reason for lockd to stop
		// serving.
		noClock := func() time.Time { return time.Time{} }
		w, err := class.NewWatcher(cfg.ClassesDir, noClock, logger, onReject)
		if err != nil {
			return nil, fmt.Errorf("load classes from --classes %s: %w", cfg.ClassesDir, err)
		}
		return dirSource{Watcher: w, dir: cfg.ClassesDir}, nil
	}
	rc, err := kubeREST(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	src, err := kubeclasses.New(ctx, kubeclasses.Config{
		REST: rc, CacheFile: filepath.Join(dataDir, "classes-cache.json"), SyncTimeout: cfg.ClassesSyncTimeout,
		Logger: logger, OnReject: onReject,
	})
	if err != nil {
		return nil, fmt.Errorf("--classes-from kubernetes: %w", err)
	}
	return kubeSource{Source: src, host: rc.Host}, nil
}

// kubeREST is the API server's config: from the kubeconfig file, or
// in-cluster when none is named.
func kubeREST(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--classes-from kubernetes without --kubeconfig needs to run in a pod: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return rc, nil
}

// registerClassAge registers lockd_class_set_age_seconds for src.
func registerClassAge(reg prometheus.Registerer, src classSource, now func() time.Time) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockd_class_set_age_seconds",
		Help: "How old the served class set may be: the time since its source (the class directory, or the Kubernetes API) last confirmed it current. It grows while the API server is unreachable and lockd serves the last good set.",
	}, func() float64 {
		at, _ := src.confirmed()
		if at.IsZero() {
			return 0
		}
		return max(now().Sub(at).Seconds(), 0)
	}))
}

// classesNote is /readyz's line about the class set: where it comes from,
// and, when its source has not confirmed it for a while, that lockd serves
// the last good set.
func classesNote(src classSource, now func() time.Time) func() string {
	return func() string {
		at, err := src.confirmed()
		age := now().Sub(at).Round(time.Second)
		if at.IsZero() {
			return "classes: from " + src.describe() + ", never confirmed current: serving the cached set"
		}
		if err == nil && age < staleClasses {
			return fmt.Sprintf("classes: from %s, confirmed %s ago", src.describe(), age)
		}
		why := ""
		if err != nil {
			why = ": " + err.Error()
		}
		return fmt.Sprintf("classes: STALE: %s has not confirmed the set since %s (%s ago); serving the last good set%s",
			src.describe(), at.UTC().Format(time.RFC3339), age, why)
	}
}
