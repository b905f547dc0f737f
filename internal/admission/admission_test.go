package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// apiserverClass is a LockClass as the API server sends it: with the
// metadata it adds and a status.
const apiserverClass = `{
  "apiVersion": "locks.lockd.dev/v1alpha1",
  "kind": "LockClass",
  "metadata": {
    "name": "report-export",
    "namespace": "payments",
    "uid": "6a1c2f0e-3b7d-4c5e-9f1a-2b3c4d5e6f70",
    "resourceVersion": "48213",
    "generation": 3,
    "creationTimestamp": "2026-11-02T09:14:07Z",
    "labels": {"app.kubernetes.io/managed-by": "argocd"},
    "annotations": {"argocd.argoproj.io/tracking-id": "lock-classes:locks.lockd.dev/LockClass:payments/report-export"},
    "finalizers": ["locks.lockd.dev/registry"],
    "managedFields": [{"manager": "argocd-controller", "operation": "Apply", "apiVersion": "locks.lockd.dev/v1alpha1",
      "time": "2026-11-02T09:14:07Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:ttl": {}}}}]
  },
  "spec": {
    "keys": ["payments/reports/"],
    "purpose": "correctness",
    "enforcement": "advisory",
    "ttl": "60s",
    "tier": "entity",
    "resource": "reports-bucket",
    "riskOwner": "payments-oncall",
    "waiverExpires": "2026-06-30"
  },
  "status": {"conditions": [{"type": "Loaded", "status": "True"}]}
}`

func TestAdmissionDocument(t *testing.T) {
	got, err := document(json.RawMessage(apiserverClass), "payments")
	require.NoError(t, err)
	want := `{"apiVersion":"locks.lockd.dev/v1alpha1","kind":"LockClass","metadata":{"name":"report-export","namespace":"payments"},` +
		`"spec":{"enforcement":"advisory","keys":["payments/reports/"],"purpose":"correctness","resource":"reports-bucket","riskOwner":"payments-oncall","tier":"entity","ttl":"60s","waiverExpires":"2026-06-30"}}`
	require.Equal(t, want, string(got))

	// The namespace comes from the request when the object has none, and
	// numbers are quoted in messages as written.
	got, err = document(json.RawMessage(`{"metadata":{"name":"x"},"spec":{"ttl":1e3}}`), "demo")
	require.NoError(t, err)
	require.Equal(t, `{"metadata":{"name":"x","namespace":"demo"},"spec":{"ttl":1e3}}`, string(got))

	for _, bad := range []string{``, `[1]`, `{`, `"x"`} {
		_, err := document(json.RawMessage(bad), "demo")
		require.Error(t, err, bad)
	}
}

func TestAdmissionValidate(t *testing.T) {
	h := NewHandler(func() time.Time { return testNow }, nil, WithPeers(peerList{}))
	expired := "advisory-waiver: spec.waiverExpires: waiver expired: 2026-06-30 is not in the future (now 2026-11-30T12:00:00Z)"
	relabelled := strings.Replace(apiserverClass, `"argocd"`, `"flux"`, 1)
	respecced := strings.Replace(apiserverClass, `"60s"`, `"90s"`, 1)
	gvk := GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: "LockClass"}
	for _, tc := range []struct {
		name      string
		req       Request
		allowed   bool
		message   string
		warnings  []string
		namespace string
	}{
		{name: "create expired", req: Request{Operation: OperationCreate, Kind: gvk, Object: json.RawMessage(apiserverClass)},
			message: expired},
		{name: "update metadata only", req: Request{Operation: OperationUpdate, Kind: gvk,
			Object: json.RawMessage(relabelled), OldObject: json.RawMessage(apiserverClass)},
			allowed: true, warnings: []string{"existing object: " + expired}},
		{name: "update spec", req: Request{Operation: OperationUpdate, Kind: gvk,
			Object: json.RawMessage(respecced), OldObject: json.RawMessage(apiserverClass)},
			message: expired},
		{name: "delete", req: Request{Operation: OperationDelete, Kind: gvk, OldObject: json.RawMessage(apiserverClass)},
			allowed: true},
		{name: "connect", req: Request{Operation: OperationConnect, Kind: GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}},
			allowed: true},
		{name: "no object", req: Request{Operation: OperationCreate, Kind: gvk},
			message: "request.object: missing: CREATE and UPDATE reviews carry the object"},
		{name: "other group", req: Request{Operation: OperationCreate, Kind: GroupVersionKind{Group: "example.com", Version: "v1", Kind: "LockClass"},
			Object: json.RawMessage(apiserverClass)},
			message: "kind LockClass (example.com/v1) is not validated by this webhook: it validates LockClass, LockGrant, PauseTestResult, LockNamespace in group locks.lockd.dev; check the rules of its ValidatingWebhookConfiguration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.UID = "uid-" + tc.name
			resp := h.Validate(t.Context(), &tc.req)
			require.Equal(t, tc.req.UID, resp.UID)
			require.Equal(t, tc.allowed, resp.Allowed)
			require.Equal(t, tc.warnings, resp.Warnings)
			if tc.allowed {
				require.Nil(t, resp.Result)
				return
			}
			require.Equal(t, &Status{Status: "Failure", Message: tc.message, Reason: "Forbidden", Code: 403}, resp.Result)
		})
	}
}

func TestAdmissionHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(NewHandler(func() time.Time { return testNow }, nil))
	defer srv.Close()
	for _, tc := range []struct {
		name, method, contentType, body string
		code                            int
		message                         string
	}{
		{"get", http.MethodGet, "", "", http.StatusMethodNotAllowed, "admission: method GET not allowed: POST an admission.k8s.io/v1 AdmissionReview"},
		{"content type", http.MethodPost, "application/yaml", "{}", http.StatusUnsupportedMediaType, `admission: Content-Type must be application/json, got "application/yaml"`},
		{"not json", http.MethodPost, "application/json", "apiVersion: v1", http.StatusBadRequest,
			"admission: bad request: body is not an AdmissionReview in JSON: invalid character 'a' looking for beginning of value"},
		{"not a review", http.MethodPost, "application/json; charset=utf-8", `{"apiVersion":"v1","kind":"ConfigMap"}`, http.StatusBadRequest,
			`admission: bad request: want apiVersion admission.k8s.io/v1 and kind AdmissionReview, got "v1" and "ConfigMap" (list only v1 in the webhook's admissionReviewVersions)`},
		{"v1beta1", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`, http.StatusBadRequest,
			`admission: bad request: want apiVersion admission.k8s.io/v1 and kind AdmissionReview, got "admission.k8s.io/v1beta1" and "AdmissionReview" (list only v1 in the webhook's admissionReviewVersions)`},
		{"no request", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest,
			"admission: bad request: the AdmissionReview has no request"},
		{"no uid", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`, http.StatusBadRequest,
			"admission: bad request: request.uid is empty"},
		{"too large", http.MethodPost, "application/json", `{"x":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge,
			"admission: request body larger than 7340032 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			require.Equal(t, tc.code, resp.StatusCode, string(body))
			require.Equal(t, tc.message, strings.TrimSpace(string(body)))
		})
	}

	// The server still answers after bad requests.
	body, err := json.Marshal(Review{APIVersion: ReviewAPIVersion, Kind: ReviewKind, Request: &Request{
		UID: "after", Operation: OperationDelete, Kind: GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: "LockGrant"}}})
	require.NoError(t, err)
	resp, err := srv.Client().Post(srv.URL, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var rev Review
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rev))
	require.Equal(t, Review{APIVersion: ReviewAPIVersion, Kind: ReviewKind, Response: &Response{UID: "after", Allowed: true}}, rev)
}
