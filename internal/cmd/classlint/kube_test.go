package classlint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/internal/kubetest"
)

// deployDir is the repository's deploy/.
var deployDir = filepath.Join("..", "..", "..", "deploy")

// startKube starts a real kube-apiserver with the project's CRDs applied
// and returns it and a dynamic client of group system:masters.
func startKube(t *testing.T) (*kubetest.APIServer, dynamic.Interface) {
	t.Helper()
	api := kubetest.Start(t)
	api.ApplyCRDs(t, kubetest.CRDDir(t))
	dyn, err := dynamic.NewForConfig(api.RESTConfig())
	require.NoError(t, err)
	return api, dyn
}

// manifest reads the YAML documents of a file under deploy/.
func manifest(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, rel))
	require.NoError(t, err)
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj := map[string]any{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj), rel)
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
	return out
}

// apply creates objs on the server cfg reaches, mapping their kinds to
// resources by the server's discovery.
func apply(t *testing.T, cfg *rest.Config, objs ...*unstructured.Unstructured) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "%s", gvk)
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		_, err = ri.Create(t.Context(), obj, metav1.CreateOptions{})
		require.NoError(t, err, "%s %s", gvk.Kind, obj.GetName())
	}
}

// kubeconfigAs writes a kubeconfig for api that impersonates user in
// groups (the test's own token may impersonate anyone), so RBAC judges
// the requests as that user's.
func kubeconfigAs(t *testing.T, api *kubetest.APIServer, user string, groups ...string) string {
	t.Helper()
	cfg := api.RESTConfig()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["impersonated"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, Impersonate: user, ImpersonateGroups: groups}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "impersonated"}
	kc.CurrentContext = "kubetest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

func namespaceObject(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
}

func fromYAMLDoc(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
	return &unstructured.Unstructured{Object: obj}
}
