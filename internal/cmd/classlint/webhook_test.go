package classlint

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/internal/admission"
	"github.com/lockd-dev/lockd/internal/class"
)

// webhookNow is the time the webhook under test validates at.
const webhookNow = "2026-11-30T12:00:00Z"

// webhookCase is one object posted to the webhook.
type webhookCase struct {
	name      string
	operation admission.Operation
	object    string // YAML, as a class author writes it
	old       string // YAML of the stored object, for UPDATE and DELETE
	allowed   bool
	message   string
	warnings  []string
}

var webhookCases = []webhookCase{
	{name: "valid class", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec:
  purpose: correctness
  enforcement: fenced
  ttl: 15s
  tier: entity
  onQuorumLoss: closed
  fairness: best-effort
  resource: ledger-db
  resourceSchemaVersion: "7"
`, allowed: true},
	{name: "fairness durable", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {purpose: correctness, enforcement: fenced, tier: entity, fairness: durable, resource: ledger-db, resourceSchemaVersion: "7"}
`, allowed: true},
	{name: "ttl out of range", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {purpose: correctness, enforcement: fenced, ttl: 2s, tier: entity, resource: ledger-db}
`, message: "ttl-range: spec.ttl: must be between 5s and 300s, got 2s"},
	{name: "advisory ttl below floor", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {purpose: correctness, enforcement: advisory, tier: entity, riskOwner: payments-oncall, waiverExpires: "2027-06-30"}
`, message: "advisory-ttl-floor: spec.ttl: advisory classes must have a ttl of at least 30s, got 15s (the default)"},
	{name: "advisory without risk owner", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, waiverExpires: "2027-06-30"}
`, message: "advisory-risk-owner: spec.riskOwner: is required for advisory classes"},
	{name: "expired waiver", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, message: "advisory-waiver: spec.waiverExpires: waiver expired: 2026-11-01 is not in the future (now 2026-11-30T12:00:00Z)"},
	{name: "waiver lapsing soon", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-12-12"}
`, allowed: true, warnings: []string{
		"waiver-expiring: spec.waiverExpires: waiver lapses in 11 days (2026-12-12): fence the resource or renew the waiver with the risk owner payments-oncall"}},
	{name: "onQuorumLoss open on correctness", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {purpose: correctness, enforcement: fenced, tier: entity, onQuorumLoss: open, resource: ledger-db}
`, message: "quorum-loss-open: spec.onQuorumLoss: open is not allowed for purpose correctness: a lock granted without quorum may be held twice"},
	{name: "missing tier", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {purpose: correctness, enforcement: fenced, resource: ledger-db}
`, message: "tier-required: spec.tier: is required (one of entity, coord)"},
	{name: "unknown field", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {purpose: correctness, enforcement: fenced, tier: entity, ttlSeconds: 15, resource: ledger-db}
`, message: "schema: spec.ttlSeconds: unknown field"},
	{name: "several problems", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: Ledger, namespace: payments}
spec: {purpose: speed, enforcement: advisory, ttl: 10m, tier: entity}
`, message: `schema: metadata.name: must be a DNS label ([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?), got "Ledger"; ` +
		`schema: spec.purpose: must be one of correctness, efficiency, got "speed"; ` +
		`ttl-range: spec.ttl: must be between 5s and 300s, got 10m; ` +
		`advisory-risk-owner: spec.riskOwner: is required for advisory classes; ` +
		`advisory-waiver: spec.waiverExpires: is required for advisory classes`},
	{name: "valid grant", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: ledger-writer, namespace: payments}
spec:
  spiffeID: spiffe://lockd.local/ns/payments/sa/ledger
  prefixes: [payments/ledger/]
`, allowed: true},
	{name: "grant prefix outside namespace", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: ledger-writer, namespace: payments}
spec:
  spiffeID: spiffe://lockd.local/ns/payments/sa/ledger
  prefixes: [payments/ledger/, demo/x/]
`, message: `grant-namespace: spec.prefixes[1]: must start with the grant's namespace "payments/", got "demo/x/"`},
	{name: "valid pause test result", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: PauseTestResult
metadata: {name: ledger-writes-2026-11, namespace: payments}
spec:
  class: ledger-writes
  resource: ledger-db
  resourceSchemaVersion: "7"
  outcome: pass
  ranAt: "2026-11-02T10:00:00Z"
  expires: "2027-11-02T10:00:00Z"
  tokens: {first: "281474976710661", second: "281474976710672"}
`, allowed: true},
	{name: "pause test result with tokens out of order", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: PauseTestResult
metadata: {name: ledger-writes-2026-11, namespace: payments}
spec:
  class: ledger-writes
  resource: ledger-db
  outcome: pass
  ranAt: "2026-11-02T10:00:00Z"
  expires: "2027-11-02T10:00:00Z"
  tokens: {first: "12", second: "7"}
`, message: "schema: spec.tokens.second: must be greater than spec.tokens.first (12): the second holder's token is newer"},
	{name: "update keeping an expired waiver", operation: admission.OperationUpdate, object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments, labels: {team: payments}}
spec: {purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, old: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, allowed: true, warnings: []string{
		"existing object: advisory-waiver: spec.waiverExpires: waiver expired: 2026-11-01 is not in the future (now 2026-11-30T12:00:00Z)"}},
	{name: "update of an expired class's spec", operation: admission.OperationUpdate, object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {purpose: correctness, enforcement: advisory, ttl: 90s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, old: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, message: "advisory-waiver: spec.waiverExpires: waiver expired: 2026-11-01 is not in the future (now 2026-11-30T12:00:00Z)"},
	{name: "delete", operation: admission.OperationDelete, old: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {purpose: correctness, enforcement: fenced, ttl: 2s, tier: entity}
`, allowed: true},
	{name: "unknown kind", object: `
apiVersion: v1
kind: ConfigMap
metadata: {name: ledger-writes, namespace: payments}
data: {ttl: 15s}
`, message: "kind ConfigMap (v1) is not validated by this webhook: it validates LockClass, LockGrant, PauseTestResult in group locks.lockd.dev; check the rules of its ValidatingWebhookConfiguration"},
}

// TestWebhook runs class-lint webhook as the command runs in a pod, posts
// AdmissionReviews to it over HTTPS, rotates its certificate and stops it
// with SIGTERM.
func TestWebhook(t *testing.T) {
	// SIGTERM stops the webhook below; this keeps it from ending the test
	// binary should the webhook have stopped already.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)

	pki := newTestPKI(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	pki.issue(t, certFile, keyFile, 1)

	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main([]string{"webhook", "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--now", webhookNow},
			io.Discard, &logs)
	}()
	url, addr := waitServing(t, &logs, done)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.clientTLS()}}

	t.Run("Reviews", func(t *testing.T) {
		for i, tc := range webhookCases {
			t.Run(tc.name, func(t *testing.T) {
				uid := fmt.Sprintf("7f3e%04d-0b1c-4d2e-8f90-a1b2c3d4e5f6", i)
				resp := postReview(t, client, url, reviewFor(t, uid, tc))
				require.Equal(t, uid, resp.UID, "the response must echo the request's uid")
				require.Equal(t, tc.allowed, resp.Allowed, "%+v", resp.Result)
				require.Equal(t, tc.warnings, resp.Warnings)
				if tc.allowed {
					require.Nil(t, resp.Result)
					return
				}
				require.NotNil(t, resp.Result)
				require.Equal(t, tc.message, resp.Result.Message)
				require.EqualValues(t, http.StatusForbidden, resp.Result.Code)
				require.Equal(t, "Forbidden", resp.Result.Reason)
			})
		}
	})

	t.Run("SameAsCheck", func(t *testing.T) {
		// Every CREATE above reads as class-lint check reports the same
		// object, without the review rules that need the whole repository.
		for _, tc := range webhookCases {
			if tc.operation != "" || !strings.Contains(tc.object, class.APIVersion) {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				errs, warns := checkMessages(t, tc.object)
				require.Equal(t, tc.message, strings.Join(errs, "; "))
				require.Equal(t, tc.warnings, warns)
			})
		}
	})

	t.Run("ClassExamples", func(t *testing.T) {
		files, err := filepath.Glob("../../../classes/*/*.yaml")
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, path := range files {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			for i, doc := range strings.Split(string(data), "\n---\n") {
				resp := postReview(t, client, url, reviewFor(t, fmt.Sprintf("example-%d", i), webhookCase{object: doc}))
				require.True(t, resp.Allowed, "%s document %d: %+v", path, i, resp.Result)
				require.Empty(t, resp.Warnings, "%s document %d", path, i)
			}
		}
	})

	t.Run("BadRequests", func(t *testing.T) {
		for _, tc := range []struct {
			name, contentType, body string
			code                    int
			message                 string
		}{
			{"malformed JSON", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":`, http.StatusBadRequest,
				"admission: bad request: body is not an AdmissionReview in JSON: unexpected end of JSON input"},
			{"YAML", "application/yaml", "apiVersion: admission.k8s.io/v1", http.StatusUnsupportedMediaType,
				`admission: Content-Type must be application/json, got "application/yaml"`},
			{"no request", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest,
				"admission: bad request: the AdmissionReview has no request"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, err := client.Post(url, tc.contentType, strings.NewReader(tc.body))
				require.NoError(t, err)
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				require.Equal(t, tc.code, resp.StatusCode)
				require.Equal(t, tc.message, strings.TrimSpace(string(body)))
			})
		}
		// Still serving.
		resp, err := client.Get(strings.TrimSuffix(url, "/validate") + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})

	t.Run("CertificateRotation", func(t *testing.T) {
		require.Equal(t, int64(1), servedSerial(t, addr, pki))
		// Write the renewed pair next to the old one and move it in one
		// file at a time, as a careless writer would: while the key does not
		// match the certificate the old pair is still served.
		newCert, newKey := filepath.Join(dir, "new.crt"), filepath.Join(dir, "new.key")
		pki.issue(t, newCert, newKey, 2)
		require.NoError(t, os.Rename(newCert, certFile))
		require.Equal(t, int64(1), servedSerial(t, addr, pki))
		require.NoError(t, os.Rename(newKey, keyFile))
		require.Equal(t, int64(2), servedSerial(t, addr, pki))
		require.Contains(t, logs.String(), "keeping the previous serving certificate")
	})

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, ExitOK, code, logs.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("class-lint webhook did not stop on SIGTERM:\n%s", logs.String())
	}
	require.Contains(t, logs.String(), "msg=stopped")
}

func TestWebhookUsage(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	require.Equal(t, ExitUsage, Main([]string{"webhook"}, &out, &errOut))
	require.Contains(t, errOut.String(), "--tls-cert and --tls-key are required")

	errOut.Reset()
	missing := filepath.Join(dir, "missing.crt")
	require.Equal(t, ExitUsage, Main([]string{"webhook", "--listen", "127.0.0.1:0", "--tls-cert", missing, "--tls-key", missing}, &out, &errOut))
	require.Contains(t, errOut.String(), "cannot load the serving certificate")
	require.Contains(t, errOut.String(), "check that both files hold the PEM certificate and its key")
}

// reviewFor builds the AdmissionReview the API server would send for tc:
// the objects carry the metadata the server adds and a status.
func reviewFor(t *testing.T, uid string, tc webhookCase) []byte {
	t.Helper()
	op := tc.operation
	if op == "" {
		op = admission.OperationCreate
	}
	req := map[string]any{
		"uid":       uid,
		"operation": op,
		"userInfo":  map[string]any{"username": "system:serviceaccount:argocd:argocd-application-controller"},
		"options":   map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
		"dryRun":    false,
	}
	var meta map[string]any
	for field, src := range map[string]string{"object": tc.object, "oldObject": tc.old} {
		if src == "" {
			continue
		}
		obj := map[string]any{}
		require.NoError(t, yaml.Unmarshal([]byte(src), &obj))
		apiserverMetadata(obj, field == "oldObject")
		js, err := json.Marshal(obj)
		require.NoError(t, err)
		req[field] = json.RawMessage(js)
		meta, _ = obj["metadata"].(map[string]any)
		apiVersion, _ := obj["apiVersion"].(string)
		group, version, ok := strings.Cut(apiVersion, "/")
		if !ok {
			group, version = "", apiVersion
		}
		kind, _ := obj["kind"].(string)
		req["kind"] = map[string]string{"group": group, "version": version, "kind": kind}
		req["resource"] = map[string]string{"group": group, "version": version, "resource": strings.ToLower(kind) + "s"}
	}
	req["name"], req["namespace"] = meta["name"], meta["namespace"]
	js, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	require.NoError(t, err)
	return js
}

// apiserverMetadata adds what the API server adds to a stored object.
func apiserverMetadata(obj map[string]any, stored bool) {
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["uid"] = "0c6f2a8e-5d4b-4e3a-9c1f-7b6a5d4c3b2a"
	meta["generation"] = 1
	meta["creationTimestamp"] = "2026-11-30T11:58:00Z"
	meta["managedFields"] = []any{map[string]any{
		"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": obj["apiVersion"],
		"time": "2026-11-30T11:58:00Z", "fieldsType": "FieldsV1",
		"fieldsV1": map[string]any{"f:spec": map[string]any{".": map[string]any{}}},
	}}
	meta["annotations"] = map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
	if stored {
		meta["resourceVersion"] = "48213"
		meta["finalizers"] = []any{"locks.lockd.dev/registry"}
		obj["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Loaded", "status": "True"}}}
	}
}

func postReview(t *testing.T, client *http.Client, url string, body []byte) *admission.Response {
	t.Helper()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	var rev admission.Review
	require.NoError(t, json.Unmarshal(data, &rev), string(data))
	require.Equal(t, "admission.k8s.io/v1", rev.APIVersion)
	require.Equal(t, "AdmissionReview", rev.Kind)
	require.Nil(t, rev.Request)
	require.NotNil(t, rev.Response, string(data))
	return rev.Response
}

// checkMessages runs class-lint check on a class repository holding only
// object and returns its errors and warnings as the webhook words them,
// leaving out the review rules the webhook does not apply.
func checkMessages(t *testing.T, object string) (errs, warns []string) {
	t.Helper()
	var o struct {
		Metadata struct{ Namespace string } `json:"metadata"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(object), &o))
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, o.Metadata.Namespace), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, o.Metadata.Namespace, "objects.yaml"), []byte(object), 0o644))
	var out, errOut bytes.Buffer
	Main([]string{"check", "--now", webhookNow, "-o", "json", dir}, &out, &errOut)
	var rep checkReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String()+errOut.String())
	repoRules := []string{class.RuleCodeowners, class.RuleFencedPauseTest, class.RuleGrantOverlap}
	for _, p := range rep.Problems {
		if slices.Contains(repoRules, p.Rule) {
			continue
		}
		msg := admission.Message(class.Problem{ID: p.Rule, Field: p.Field, Rule: p.Message})
		if p.Severity == "warning" {
			warns = append(warns, msg)
		} else {
			errs = append(errs, msg)
		}
	}
	return errs, warns
}

var servingRE = regexp.MustCompile(`addr=https://(\S+)/validate`)

// waitServing waits for the webhook to log its address.
func waitServing(t *testing.T, logs *syncBuffer, done <-chan int) (url, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := servingRE.FindStringSubmatch(logs.String()); m != nil {
			return "https://" + m[1] + "/validate", m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("class-lint webhook exited with %d:\n%s", code, logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("class-lint webhook did not start serving:\n%s", logs.String())
	return "", ""
}

// servedSerial opens a new TLS connection and returns the serial number of
// the certificate served.
func servedSerial(t *testing.T, addr string, pki *testPKI) int64 {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, pki.clientTLS())
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// testPKI is a CA that issues serving certificates for 127.0.0.1.
type testPKI struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1000),
		Subject:               pkix.Name{CommonName: "class-lint-webhook-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testPKI{cert: cert, key: key, pool: pool}
}

// issue writes a serving certificate with the serial number and its key.
func (p *testPKI) issue(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "class-lint-webhook.lockd-system.svc"},
		DNSNames:     []string{"class-lint-webhook.lockd-system.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
}

func (p *testPKI) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
