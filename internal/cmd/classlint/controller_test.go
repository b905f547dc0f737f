package classlint

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/classcontroller"
)

// TestClassLintControllerRunsWithTheRBACOfItsManifests runs class-lint
// controller as deploy/controller/ deploys it: with the arguments of its
// Deployment, as its service account, with no rights but those of
// rbac.yaml, against a real API server. It marks a class with a current
// result fenced and one without not fenced, holds the Lease, records an
// Event, and on SIGTERM stops cleanly and releases the Lease.
func TestClassLintControllerRunsWithTheRBACOfItsManifests(t *testing.T) {
	api, dyn := startKube(t)
	cfg := api.RESTConfig()
	apply(t, cfg, manifest(t, "namespace.yaml")...)
	apply(t, cfg, manifest(t, "controller/serviceaccount.yaml")...)
	apply(t, cfg, manifest(t, "controller/rbac.yaml")...)
	apply(t, cfg, namespaceObject("payments"))

	var args []string
	for _, d := range manifest(t, "controller/deployment.yaml") {
		containers, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		require.NoError(t, err)
		require.Len(t, containers, 1)
		as, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		require.NoError(t, err)
		args = as
		sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
		require.Equal(t, "class-lint-controller", sa)
	}
	require.Equal(t, "controller", args[0])
	kubeconfig := kubeconfigAs(t, api, "system:serviceaccount:lockd-system:class-lint-controller",
		"system:serviceaccounts", "system:serviceaccounts:lockd-system", "system:authenticated")

	now := time.Now().UTC().Truncate(time.Second)
	apply(t, cfg, fromYAMLDoc(t, fencedClass("payments", "ledger", "10s")), fromYAMLDoc(t, fencedClass("payments", "refunds", "10s")),
		fromYAMLDoc(t, fmt.Sprintf(`
apiVersion: locks.lockd.dev/v1alpha1
kind: PauseTestResult
metadata: {name: ledger, namespace: payments}
spec:
  class: ledger
  resource: test-db
  outcome: pass
  ranAt: %q
  expires: %q
  tokens: {first: "5", second: "6"}
`, now.Add(-time.Hour).Format(time.RFC3339), now.Add(24*time.Hour).Format(time.RFC3339))))

	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- Main(append(args, "--kubeconfig", kubeconfig), os.Stdout, logs) }()
	defer func() {
		if t.Failed() {
			t.Logf("class-lint controller log:\n%s", logs.String())
		}
	}()

	status := func(name string) (class.ClassStatus, bool) {
		obj, err := dyn.Resource(classcontroller.LockClasses).Namespace("payments").Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		return class.ClassStatusOf(obj.Object)
	}
	eventually(t, 30*time.Second, "ledger is marked fenced", func() (bool, string) {
		st, ok := status("ledger")
		return ok && st.Fenced, fmt.Sprintf("%+v", st)
	})
	eventually(t, 30*time.Second, "refunds is marked not fenced", func() (bool, string) {
		st, ok := status("refunds")
		return ok && !st.Fenced && st.Conditions[0].Reason == class.ReasonNoPauseTest, fmt.Sprintf("%+v", st)
	})

	kc, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	lease, err := kc.CoordinationV1().Leases("lockd-system").Get(t.Context(), "class-lint-controller", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, lease.Spec.HolderIdentity)
	host, _ := os.Hostname()
	require.True(t, strings.HasPrefix(*lease.Spec.HolderIdentity, host+"_"), *lease.Spec.HolderIdentity)
	eventually(t, 30*time.Second, "an Event on ledger", func() (bool, string) {
		evs, err := kc.CoreV1().Events("payments").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=ledger"})
		require.NoError(t, err)
		for _, e := range evs.Items {
			if e.Reason == class.ReasonPauseTestCurrent && e.Type == "Normal" && e.Source.Component == "class-lint-controller" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", evs.Items)
	})
	require.NotContains(t, strings.ToLower(logs.String()), "forbidden", "the manifests' RBAC lets it do all it does")

	// The control: as the service account, a class's spec cannot be
	// written, only its status.
	saCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	saDyn, err := dynamic.NewForConfig(saCfg)
	require.NoError(t, err)
	obj, err := saDyn.Resource(classcontroller.LockClasses).Namespace("payments").Get(t.Context(), "ledger", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(obj.Object, "20s", "spec", "ttl"))
	_, err = saDyn.Resource(classcontroller.LockClasses).Namespace("payments").Update(t.Context(), obj, metav1.UpdateOptions{})
	require.True(t, apierrors.IsForbidden(err), "the controller may not write a spec: %v", err)

	// Kubernetes stops the pod with SIGTERM.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, ExitOK, code, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("class-lint controller did not stop on SIGTERM:\n%s", logs.String())
	}
	lease, err = kc.CoordinationV1().Leases("lockd-system").Get(t.Context(), "class-lint-controller", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "", "the Lease is released on SIGTERM: %+v", lease.Spec)
	require.Contains(t, logs.String(), "msg=stopped")
}
