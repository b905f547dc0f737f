package classlint

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/classcontroller"
)

var validatingWebhookConfigurations = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}

func webhookCaseNamed(t *testing.T, name string) webhookCase {
	t.Helper()
	for _, c := range webhookCases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no webhook case %q", name)
	return webhookCase{}
}

// TestTheAPIServerRefusesWhatTheWebhookDenies registers class-lint webhook
// with a real API server through deploy/'s ValidatingWebhookConfiguration
// (its service swapped for the webhook's URL on 127.0.0.1 and its CA): a
// good class is created, a class breaking a rule only the webhook checks
// is refused with the webhook's message, status writes never reach the
// webhook, and with the webhook stopped every create or update is refused
// (failurePolicy Fail) while status writes and deletes still work.
func TestTheAPIServerRefusesWhatTheWebhookDenies(t *testing.T) {
	api, dyn := startKube(t)
	apply(t, api.RESTConfig(), namespaceObject("payments"))
	w := startWebhook(t)
	stopped := false
	defer func() {
		if !stopped {
			w.stop(t)
		}
	}()

	docs := manifest(t, "webhook/validatingwebhookconfiguration.yaml")
	require.Len(t, docs, 1)
	vwc := docs[0]
	hooks, _, err := unstructured.NestedSlice(vwc.Object, "webhooks")
	require.NoError(t, err)
	require.Len(t, hooks, 1)
	hook := hooks[0].(map[string]any)
	require.Equal(t, "Fail", hook["failurePolicy"])
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.pki.cert.Raw})
	hook["clientConfig"] = map[string]any{"url": w.url, "caBundle": base64.StdEncoding.EncodeToString(caPEM)}
	require.NoError(t, unstructured.SetNestedSlice(vwc.Object, hooks, "webhooks"))
	_, err = dyn.Resource(validatingWebhookConfigurations).Create(t.Context(), vwc, metav1.CreateOptions{})
	require.NoError(t, err)

	classes := dyn.Resource(classcontroller.LockClasses).Namespace("payments")
	good := fromYAMLDoc(t, webhookCaseNamed(t, "valid class").object)
	bad := webhookCaseNamed(t, "key prefix outside the namespace")
	require.Contains(t, bad.object, "billing/refunds/", "a rule CEL cannot check: the namespace of a key")

	// The API server reads webhook configurations from a cache: wait until
	// it calls the webhook, with dry runs (sideEffects: None allows them).
	eventually(t, 30*time.Second, "the API server calls the webhook", func() (bool, string) {
		_, err := classes.Create(t.Context(), fromYAMLDoc(t, bad.object), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), bad.message), fmt.Sprint(err)
	})

	_, err = classes.Create(t.Context(), good, metav1.CreateOptions{})
	require.NoError(t, err, "a good class is admitted")

	_, err = classes.Create(t.Context(), fromYAMLDoc(t, bad.object), metav1.CreateOptions{})
	require.Error(t, err, "a class with a key outside its namespace")
	require.True(t, apierrors.IsForbidden(err), "want 403 Forbidden, got %v", err)
	var refused apierrors.APIStatus
	require.ErrorAs(t, err, &refused)
	require.Equal(t, `admission webhook "classes.locks.lockd.dev" denied the request: `+bad.message, refused.Status().Message,
		"the client gets the webhook's message")

	// Status writes use the status subresource, which the configuration
	// does not send to the webhook.
	gen := int64(1)
	writeStatus := func(reason string) error {
		cur, err := classes.Get(t.Context(), good.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := class.StatusFor(class.FenceProof{Reason: reason, Message: "written by the test"}, gen)
		st.Conditions[0].LastTransitionTime = time.Now().UTC().Format(time.RFC3339)
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		cur.Object["status"] = content
		_, err = classes.UpdateStatus(t.Context(), cur, metav1.UpdateOptions{})
		return err
	}
	require.NoError(t, writeStatus(class.ReasonNoPauseTest))

	// The webhook stops: the API server fails closed.
	w.stop(t)
	stopped = true
	other := fromYAMLDoc(t, webhookCaseNamed(t, "valid class").object)
	other.SetName("ledger-reads")
	require.NoError(t, unstructured.SetNestedStringSlice(other.Object, []string{"payments/ledger-reads/"}, "spec", "keys"))
	_, err = classes.Create(t.Context(), other, metav1.CreateOptions{})
	require.Error(t, err, "a good class while the webhook is down")
	require.True(t, apierrors.IsInternalError(err), "want 500 InternalError, got %v", err)
	require.Contains(t, err.Error(), `failed calling webhook "classes.locks.lockd.dev"`)

	cur, err := classes.Get(t.Context(), good.GetName(), metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(cur.Object, "20s", "spec", "ttl"))
	_, err = classes.Update(t.Context(), cur, metav1.UpdateOptions{})
	require.True(t, apierrors.IsInternalError(err), "a spec update while the webhook is down: %v", err)

	require.NoError(t, writeStatus(class.ReasonNoResource), "status writes do not depend on the webhook")
	require.NoError(t, classes.Delete(t.Context(), good.GetName(), metav1.DeleteOptions{}), "deletes are not sent to the webhook")
}
