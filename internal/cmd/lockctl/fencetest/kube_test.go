package fencetest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/fencetest"
	"github.com/lockd-dev/lockd/internal/kubetest"
	"github.com/lockd-dev/lockd/internal/pausetest"
)

var pauseTestResults = schema.GroupVersionResource{Group: class.Group, Version: class.Version, Resource: "pausetestresults"}

func createNamespace(t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	_, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(t.Context(), ns, metav1.CreateOptions{})
	require.NoError(t, err)
}

// TestWriteResultCreatesOrReplacesThePauseTestResult writes results to a
// real API server: the first is created, a later run's replaces its spec
// under the same name, and a caller RBAC refuses gets the API server's
// Forbidden.
func TestWriteResultCreatesOrReplacesThePauseTestResult(t *testing.T) {
	api := kubetest.Start(t)
	api.ApplyCRDs(t, kubetest.CRDDir(t))
	dyn, err := dynamic.NewForConfig(api.RESTConfig())
	require.NoError(t, err)
	createNamespace(t, dyn, "payments")
	res := pausetest.Result{Namespace: "payments", Class: "ledger-writes", Resource: "ledger-db", ResourceSchemaVersion: "3",
		RanAt: time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC), FirstToken: 281474976710712, SecondToken: 281474976710720}
	results := dyn.Resource(pauseTestResults).Namespace("payments")

	created, err := fencetest.WriteResult(t.Context(), dyn, res)
	require.NoError(t, err)
	require.True(t, created)
	first, err := results.Get(t.Context(), "ledger-writes", metav1.GetOptions{})
	require.NoError(t, err)

	later := res
	later.RanAt, later.ResourceSchemaVersion, later.FirstToken, later.SecondToken = res.RanAt.AddDate(0, 3, 0), "4", 281474976710800, 281474976710810
	created, err = fencetest.WriteResult(t.Context(), dyn, later)
	require.NoError(t, err)
	require.False(t, created, "the same name: replaced")
	got, err := results.Get(t.Context(), "ledger-writes", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, first.GetUID(), got.GetUID(), "the same object")
	o, problems := class.ParseObject(got.Object)
	require.Empty(t, problems)
	require.Equal(t, later.RanAt, o.PauseTest.RanAt)
	require.Equal(t, later.Expires(), o.PauseTest.Expires)
	require.Equal(t, "4", o.PauseTest.ResourceSchemaVersion)
	require.Equal(t, "281474976710800", o.PauseTest.FirstToken)
	require.Equal(t, "281474976710810", o.PauseTest.SecondToken)

	// A caller without RBAC on pausetestresults: the API server's refusal.
	cfg := rest.CopyConfig(api.RESTConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:payments:fence-test", Groups: []string{"system:authenticated"}}
	nobody, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = fencetest.WriteResult(t.Context(), nobody, later)
	require.Error(t, err)
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.ErrorContains(t, err, "fencetest: creating PauseTestResult payments/ledger-writes")
}
