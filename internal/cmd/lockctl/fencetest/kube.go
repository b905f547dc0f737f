package fencetest

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/pausetest"
)

// fieldManager names lockctl fence-test's writes in the objects'
// managedFields.
const fieldManager = "lockctl-fence-test"

// pauseTestResults is the PauseTestResult resource.
var pauseTestResults = schema.GroupVersionResource{Group: class.Group, Version: class.Version, Resource: class.Resources[class.KindPauseTestResult]}

// KubeConfig loads the cluster configuration --to-kubernetes writes with:
// the kubeconfig file path when set, else kubectl's ($KUBECONFIG,
// ~/.kube/config), else the pod's service account.
func KubeConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		where := "$KUBECONFIG, ~/.kube/config or a pod's service account"
		if path != "" {
			where = "--kubeconfig " + path
		}
		return nil, cli.Usagef("--to-kubernetes: no cluster configuration from %s: %w", where, err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = fieldManager
	return cfg, nil
}

// WriteResult creates res as a PauseTestResult in its class's namespace,
// or, when one of the same name exists (an earlier run's), replaces its
// spec, labels and annotations with res's. created says which. The object
// is the document of res.YAML, the file a class repository commits.
func WriteResult(ctx context.Context, client dynamic.Interface, res pausetest.Result) (created bool, err error) {
	want := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(res.YAML(), &want.Object); err != nil {
		return false, fmt.Errorf("fencetest: the PauseTestResult does not decode: %w", err)
	}
	api := client.Resource(pauseTestResults).Namespace(res.Namespace)
	_, err = api.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("fencetest: creating PauseTestResult %s/%s: %w", res.Namespace, want.GetName(), err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, want.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		upd := cur.DeepCopy()
		upd.Object["spec"] = want.Object["spec"]
		upd.SetLabels(want.GetLabels())
		upd.SetAnnotations(want.GetAnnotations())
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("fencetest: updating PauseTestResult %s/%s: %w", res.Namespace, want.GetName(), err)
	}
	return false, nil
}

// kubeExitCode is the exit code of a failed write to the API server: 77
// when it refused the caller (RBAC, authentication), else lockctl's usual
// mapping (69 when it could not be reached).
func kubeExitCode(err error) int {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return cli.ExitNoPerm
	}
	if apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return cli.ExitUnavailable
	}
	return cli.ExitCode(err)
}
