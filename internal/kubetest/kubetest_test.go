package kubetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

var (
	namespaces  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	configMaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	lockClasses = schema.GroupVersionResource{Group: "locks.lockd.dev", Version: "v1alpha1", Resource: "lockclasses"}
)

// demoFast is class demo-fast of classes/demo/classes.yaml.
const demoFast = `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata:
  name: demo-fast
  namespace: demo
spec:
  keys: ["demo/fast/"]
  nestedIn: [demo]
  purpose: correctness
  enforcement: fenced
  ttl: 5s
  tier: entity
  resource: demo-db
`

func TestCRDsEstablishAndTheirRulesRefuseABadTTL(t *testing.T) {
	s := Start(t)
	s.ApplyCRDs(t, CRDDir(t))
	s.ApplyCRDs(t, CRDDir(t)) // again: updates what exists
	dyn := dynamicClient(t, s)
	ctx := t.Context()
	createNamespace(t, dyn, "demo")

	good := fromYAML(t, demoFast)
	_, err := dyn.Resource(lockClasses).Namespace("demo").Create(ctx, good, metav1.CreateOptions{})
	require.NoError(t, err, "a valid LockClass")

	bad := fromYAML(t, demoFast)
	bad.SetName("demo-too-fast")
	require.NoError(t, unstructured.SetNestedField(bad.Object, "1s", "spec", "ttl"))
	_, err = dyn.Resource(lockClasses).Namespace("demo").Create(ctx, bad, metav1.CreateOptions{})
	require.Error(t, err, "a LockClass with ttl 1s")
	require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
	require.Contains(t, err.Error(), "spec.ttl")
	require.Contains(t, err.Error(), "must be between 5s and 300s")
}

func TestStopAndRestartKeepTheObjects(t *testing.T) {
	s := Start(t)
	dyn := dynamicClient(t, s)
	ctx := t.Context()
	createNamespace(t, dyn, "kubetest")
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": "kept", "namespace": "kubetest"},
		"data":       map[string]any{"written": "before the restart"},
	}}
	created, err := dyn.Resource(configMaps).Namespace("kubetest").Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)

	s.Stop()
	stopped, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = dyn.Resource(configMaps).Namespace("kubetest").Get(stopped, "kept", metav1.GetOptions{})
	require.Error(t, err, "a request to a stopped server")

	s.Restart()
	got, err := dyn.Resource(configMaps).Namespace("kubetest").Get(ctx, "kept", metav1.GetOptions{})
	require.NoError(t, err, "after Restart")
	require.Equal(t, created.GetUID(), got.GetUID())
	data, _, _ := unstructured.NestedStringMap(got.Object, "data")
	require.Equal(t, map[string]string{"written": "before the restart"}, data)
}

func TestKubeconfigReachesTheServer(t *testing.T) {
	s := Start(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig())
	require.NoError(t, err)
	require.Equal(t, s.URL(), cfg.Host)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = dyn.Resource(namespaces).Get(t.Context(), "default", metav1.GetOptions{})
	require.NoError(t, err, "get namespace default with the kubeconfig's credentials")
}

func TestBinaryNamesTheCommandThatBuildsIt(t *testing.T) {
	t.Setenv("LOCKD_KUBE_APISERVER", "")
	t.Setenv("LOCKD_TOOLS", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	_, err := Binary()
	require.Error(t, err)
	require.Contains(t, err.Error(), "bash ci/tools.sh kube")
}

func dynamicClient(t *testing.T, s *APIServer) *dynamic.DynamicClient {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.RESTConfig())
	require.NoError(t, err)
	return dyn
}

func createNamespace(t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata":   map[string]any{"name": name},
	}}
	_, err := dyn.Resource(namespaces).Create(t.Context(), ns, metav1.CreateOptions{})
	require.NoError(t, err, "create namespace %s", name)
}

func fromYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(strings.TrimSpace(doc)), &m))
	return &unstructured.Unstructured{Object: m}
}
