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
  keys: [payments/ledger/]
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
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, tier: entity, fairness: durable, resource: ledger-db, resourceSchemaVersion: "7"}
`, allowed: true},
	{name: "ttl out of range", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, ttl: 2s, tier: entity, resource: ledger-db}
`, message: "ttl-range: spec.ttl: must be between 5s and 300s, got 2s"},
	{name: "advisory ttl below floor", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, tier: entity, riskOwner: payments-oncall, waiverExpires: "2027-06-30"}
`, message: "advisory-ttl-floor: spec.ttl: advisory classes must have a ttl of at least 30s, got 15s (the default)"},
	{name: "advisory without risk owner", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, waiverExpires: "2027-06-30"}
`, message: "advisory-risk-owner: spec.riskOwner: is required for advisory classes"},
	{name: "expired waiver", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, message: "advisory-waiver: spec.waiverExpires: waiver expired: 2026-11-01 is not in the future (now 2026-11-30T12:00:00Z)"},
	{name: "waiver lapsing soon", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-12-12"}
`, allowed: true, warnings: []string{
		"waiver-expiring: spec.waiverExpires: waiver lapses in 11 days (2026-12-12): fence the resource or renew the waiver with the risk owner payments-oncall"}},
	{name: "onQuorumLoss open on correctness", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, tier: entity, onQuorumLoss: open, resource: ledger-db}
`, message: "quorum-loss-open: spec.onQuorumLoss: open is not allowed for purpose correctness: a lock granted without quorum may be held twice"},
	{name: "missing tier", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, resource: ledger-db}
`, message: "tier-required: spec.tier: is required (one of entity, coord)"},
	{name: "unknown field", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, tier: entity, ttlSeconds: 15, resource: ledger-db}
`, message: "schema: spec.ttlSeconds: unknown field"},
	{name: "several problems", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: Ledger, namespace: payments}
spec: {keys: [payments/ledger-draft/], purpose: speed, enforcement: advisory, ttl: 10m, tier: entity}
`, message: `schema: metadata.name: must be a DNS label ([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?), got "Ledger"; ` +
		`schema: spec.purpose: must be one of correctness, efficiency, got "speed"; ` +
		`ttl-range: spec.ttl: must be between 5s and 300s, got 10m; ` +
		`advisory-risk-owner: spec.riskOwner: is required for advisory classes; ` +
		`advisory-waiver: spec.waiverExpires: is required for advisory classes`},
	{name: "class without keys", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: refunds, namespace: payments}
spec: {purpose: correctness, enforcement: fenced, tier: entity, resource: refunds-db}
`, message: `class-keys: spec.keys: must list at least one key prefix the class owns, such as "payments/orders/": a key no class owns cannot be locked`},
	{name: "key prefix outside the namespace", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: refunds, namespace: payments}
spec: {keys: [billing/refunds/], purpose: correctness, enforcement: fenced, tier: entity, resource: refunds-db}
`, message: `class-keys: spec.keys[0]: must start with the class's namespace "payments/", got "billing/refunds/"`},
	{name: "a prefix no other class owns", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: refunds, namespace: payments}
spec: {keys: [payments/refunds/], purpose: correctness, enforcement: fenced, tier: entity, resource: refunds-db}
`, allowed: true},
	{name: "two classes claiming one prefix", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-copy, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, tier: coord, resource: ledger-db}
`, message: `key-ownership: spec.keys[0]: "payments/ledger/" is also claimed by LockClass ledger-writes (payments/classes.yaml:1): ` +
		`a key has exactly one class; give the prefix to one of them`},
	{name: "nested without nestedIn", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-hot, namespace: payments}
spec: {keys: [payments/ledger/hot/], purpose: correctness, enforcement: fenced, tier: coord, resource: ledger-db}
`, message: `key-ownership: spec.keys[0]: "payments/ledger/hot/" is inside "payments/ledger/", owned by LockClass ledger-writes (payments/classes.yaml:1): ` +
		`keys under it would move to this class from ledger-writes; if that is meant, say so with spec.nestedIn: [ledger-writes]`},
	{name: "nested with nestedIn", object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-hot, namespace: payments}
spec: {keys: [payments/ledger/hot/], nestedIn: [ledger-writes], purpose: correctness, enforcement: fenced, tier: coord, resource: ledger-db}
`, allowed: true},
	{name: "update of a class keeping its keys", operation: admission.OperationUpdate, object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, ttl: 30s, tier: entity, resource: ledger-db}
`, old: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, ttl: 15s, tier: entity, resource: ledger-db}
`, allowed: true},
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
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, old: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, allowed: true, warnings: []string{
		"existing object: advisory-waiver: spec.waiverExpires: waiver expired: 2026-11-01 is not in the future (now 2026-11-30T12:00:00Z)"}},
	{name: "update of an expired class's spec", operation: admission.OperationUpdate, object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, ttl: 90s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, old: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec: {keys: [payments/reports/], purpose: correctness, enforcement: advisory, ttl: 60s, tier: entity, riskOwner: payments-oncall, waiverExpires: "2026-11-01"}
`, message: "advisory-waiver: spec.waiverExpires: waiver expired: 2026-11-01 is not in the future (now 2026-11-30T12:00:00Z)"},
	{name: "delete", operation: admission.OperationDelete, old: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ledger-writes, namespace: payments}
spec: {keys: [payments/ledger/], purpose: correctness, enforcement: fenced, ttl: 2s, tier: entity}
`, allowed: true},
	{name: "unknown kind", object: `
apiVersion: v1
kind: ConfigMap
metadata: {name: ledger-writes, namespace: payments}
data: {ttl: 15s}
`, message: "kind ConfigMap (v1) is not validated by this webhook: it validates LockClass, LockGrant, PauseTestResult, LockNamespace in group locks.lockd.dev; check the rules of its ValidatingWebhookConfiguration"},
}

// webhookPeers is the class directory the webhook under test checks keys
// against: payments/ledger-writes owns payments/ledger/, and
// payments/report-export owns payments/reports/ and, nested in
// ledger-writes, payments/ledger/exports/.
var webhookPeers = filepath.Join("testdata", "rules", class.RuleKeyOwnership, "pass")

// testWebhook is class-lint webhook running in the test binary.
type testWebhook struct {
	url, addr         string
	client            *http.Client
	logs              *syncBuffer
	done              chan int
	pki               *testPKI
	dir               string // of the certificate and key
	certFile, keyFile string
}

// startWebhook runs class-lint webhook as it runs in a pod, with args
// added, and waits until it serves. Stop it with stop.
func startWebhook(t *testing.T, args ...string) *testWebhook {
	t.Helper()
	w := &testWebhook{pki: newTestPKI(t), dir: t.TempDir(), logs: &syncBuffer{}, done: make(chan int, 1)}
	w.certFile, w.keyFile = filepath.Join(w.dir, "tls.crt"), filepath.Join(w.dir, "tls.key")
	w.pki.issue(t, w.certFile, w.keyFile, 1)
	go func() {
		w.done <- Main(append([]string{"webhook", "--listen", "127.0.0.1:0", "--tls-cert", w.certFile, "--tls-key", w.keyFile, "--now", webhookNow}, args...),
			io.Discard, w.logs)
	}()
	w.url, w.addr = waitServing(t, w.logs, w.done)
	w.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: w.pki.clientTLS()}}
	return w
}

// stop sends the test binary SIGTERM, as Kubernetes stops the pod, and
// waits for the webhook to exit cleanly.
func (w *testWebhook) stop(t *testing.T) {
	t.Helper()
	// This keeps SIGTERM from ending the test binary should the webhook
	// have stopped already.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-w.done:
		require.Equal(t, ExitOK, code, w.logs.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("class-lint webhook did not stop on SIGTERM:\n%s", w.logs.String())
	}
	require.Contains(t, w.logs.String(), "msg=stopped")
}

// TestWebhook runs class-lint webhook as the command runs in a pod, with
// the class repository checked out next to it, posts AdmissionReviews to
// it over HTTPS, rotates its certificate and stops it with SIGTERM.
func TestWebhook(t *testing.T) {
	peers := t.TempDir()
	require.NoError(t, os.CopyFS(peers, os.DirFS(webhookPeers)))
	w := startWebhook(t, "--classes", peers)
	url, addr, client, logs, pki, dir, certFile, keyFile := w.url, w.addr, w.client, w.logs, w.pki, w.dir, w.certFile, w.keyFile
	require.Contains(t, logs.String(), "checking key ownership against the classes")
	require.NotContains(t, logs.String(), "not checked")

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
		// object in the class repository the webhook reads, without the
		// review rules that need the rest of the repository.
		for _, tc := range webhookCases {
			if tc.operation != "" || !strings.Contains(tc.object, class.APIVersion) {
				continue
			}
			t.Run(tc.name, func(t *testing.T) {
				errs, warns := checkMessages(t, webhookPeers, tc.object)
				require.Equal(t, tc.message, strings.Join(errs, "; "))
				require.Equal(t, tc.warnings, warns)
			})
		}
	})

	t.Run("ClassesReadAgain", func(t *testing.T) {
		// The sync tool brings a class claiming payments/refunds/: a class
		// claiming it too is denied from then on.
		refunds := func(name string) webhookCase {
			return webhookCase{object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: ` + name + `, namespace: payments}
spec: {keys: [payments/refunds/], purpose: correctness, enforcement: fenced, tier: entity, resource: refunds-db}
`}
		}
		resp := postReview(t, client, url, reviewFor(t, "refunds-before", refunds("refunds-copy")))
		require.True(t, resp.Allowed, "%+v", resp.Result)
		require.NoError(t, os.WriteFile(filepath.Join(peers, "payments", "refunds.yaml"), []byte(refunds("refunds").object), 0o644))
		eventually(t, 10*time.Second, "the webhook sees the new class", func() (bool, string) {
			resp := postReview(t, client, url, reviewFor(t, "refunds-after", refunds("refunds-copy")))
			return !resp.Allowed, fmt.Sprintf("%+v", resp.Result)
		})
		resp = postReview(t, client, url, reviewFor(t, "refunds-after", refunds("refunds-copy")))
		require.Equal(t, `key-ownership: spec.keys[0]: "payments/refunds/" is also claimed by LockClass refunds (payments/refunds.yaml:2): `+
			`a key has exactly one class; give the prefix to one of them`, resp.Result.Message)
		// The class's own version is not a clash.
		resp = postReview(t, client, url, reviewFor(t, "refunds-self", refunds("refunds")))
		require.True(t, resp.Allowed, "%+v", resp.Result)

		// A checkout that cannot be read denies LockClasses, not grants.
		require.NoError(t, os.Rename(peers, peers+".moved"))
		defer func() { require.NoError(t, os.Rename(peers+".moved", peers)) }()
		eventually(t, 10*time.Second, "the webhook fails closed", func() (bool, string) {
			resp := postReview(t, client, url, reviewFor(t, "refunds-gone", refunds("refunds-new")))
			return !resp.Allowed && strings.Contains(resp.Result.Message, "cannot read the other LockClasses of namespace payments"),
				fmt.Sprintf("%+v", resp.Result)
		})
		for _, tc := range webhookCases {
			if tc.name == "valid grant" {
				resp := postReview(t, client, url, reviewFor(t, "grant-while-gone", tc))
				require.True(t, resp.Allowed, "%+v", resp.Result)
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

	w.stop(t)
}

// TestWebhookClassExamples admits every object of the example class
// repository, each checked against the others as a webhook reading that
// repository would: they break no rule and draw no warning.
func TestWebhookClassExamples(t *testing.T) {
	examples, err := filepath.Abs(filepath.Join("..", "..", "..", "classes"))
	require.NoError(t, err)
	w := startWebhook(t, "--classes", examples)
	defer w.stop(t)
	files, err := filepath.Glob(filepath.Join(examples, "*", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	classes := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for i, doc := range strings.Split(string(data), "\n---\n") {
			resp := postReview(t, w.client, w.url, reviewFor(t, fmt.Sprintf("example-%d", i), webhookCase{object: doc}))
			require.True(t, resp.Allowed, "%s document %d: %+v", path, i, resp.Result)
			require.Empty(t, resp.Warnings, "%s document %d", path, i)
			if strings.Contains(doc, "kind: LockClass") {
				classes++
			}
		}
	}
	require.GreaterOrEqual(t, classes, 3)
}

// TestWebhookWithoutClasses: without --classes the webhook says once, at
// start, that key ownership across classes is not checked, and every
// LockClass review says so too.
func TestWebhookWithoutClasses(t *testing.T) {
	w := startWebhook(t)
	defer w.stop(t)
	require.Equal(t, 1, strings.Count(w.logs.String(), "key ownership across LockClasses is not checked"), w.logs.String())
	require.Contains(t, w.logs.String(), "pass --classes DIR")
	for i, tc := range webhookCases {
		if tc.operation == admission.OperationDelete || tc.name == "unknown kind" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			resp := postReview(t, w.client, w.url, reviewFor(t, fmt.Sprintf("no-classes-%d", i), tc))
			isClass := strings.Contains(tc.object, "kind: LockClass")
			require.Equal(t, isClass, slices.Contains(resp.Warnings, admission.WarningOwnershipNotChecked), "%q", resp.Warnings)
			if strings.HasPrefix(tc.message, class.RuleKeyOwnership+": ") {
				// Not checked: admitted, with the warning.
				require.True(t, resp.Allowed, "%+v", resp.Result)
				return
			}
			require.Equal(t, tc.allowed, resp.Allowed, "%+v", resp.Result)
		})
	}
	require.Equal(t, 1, strings.Count(w.logs.String(), "key ownership across LockClasses is not checked"), "said once, at start")
}

func TestWebhookClassesUnreadableAtStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-synced-yet")
	w := startWebhook(t, "--classes", missing)
	defer w.stop(t)
	require.Contains(t, w.logs.String(), "cannot read the classes yet: every LockClass is denied until they can be read")
	class := webhookCase{object: `
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: refunds, namespace: payments}
spec: {keys: [payments/refunds/], purpose: correctness, enforcement: fenced, tier: entity, resource: refunds-db}
`}
	resp := postReview(t, w.client, w.url, reviewFor(t, "before-sync", class))
	require.False(t, resp.Allowed)
	require.Contains(t, resp.Result.Message, "key-ownership: spec.keys: cannot read the other LockClasses of namespace payments to check that no other class owns these keys: --classes "+missing)
	// The sync tool's first checkout arrives.
	require.NoError(t, os.CopyFS(missing, os.DirFS(webhookPeers)))
	eventually(t, 10*time.Second, "the webhook reads the classes once they are there", func() (bool, string) {
		resp := postReview(t, w.client, w.url, reviewFor(t, "after-sync", class))
		return resp.Allowed, fmt.Sprintf("%+v", resp.Result)
	})
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

// checkMessages runs class-lint check on a copy of the class repository
// peers with object added (in a file after the others, as the webhook puts
// it after every other class) and returns the object's errors and warnings
// as the webhook words them, leaving out the review rules the webhook does
// not apply.
func checkMessages(t *testing.T, peers, object string) (errs, warns []string) {
	t.Helper()
	var o struct {
		Kind     string                           `json:"kind"`
		Metadata struct{ Name, Namespace string } `json:"metadata"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(object), &o))
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(peers)))
	// The webhook checks a class against the others: its own stored
	// version is not one of them.
	files, _ := filepath.Glob(filepath.Join(dir, o.Metadata.Namespace, "*.yaml"))
	for _, f := range files {
		blankObject(t, f, o.Kind, o.Metadata.Namespace, o.Metadata.Name)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, o.Metadata.Namespace), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, o.Metadata.Namespace, "zz-object.yaml"), []byte(object), 0o644))
	var out, errOut bytes.Buffer
	t.Chdir(dir) // files as the webhook names them: relative to the class directory
	Main([]string{"check", "--now", webhookNow, "-o", "json", "."}, &out, &errOut)
	var rep checkReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String()+errOut.String())
	repoRules := []string{class.RuleCodeowners, class.RuleFencedPauseTest, class.RuleGrantOverlap}
	for _, p := range rep.Problems {
		if slices.Contains(repoRules, p.Rule) || p.Object != o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name {
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

// blankObject turns the document of file defining kind namespace/name, if
// any, into comment lines, so the lines of the others do not move.
func blankObject(t *testing.T, file, kind, namespace, name string) {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	start := 0
	for i := 0; i <= len(lines); i++ {
		if i < len(lines) && strings.TrimSpace(lines[i]) != "---" {
			continue
		}
		var o struct {
			Kind     string                           `json:"kind"`
			Metadata struct{ Name, Namespace string } `json:"metadata"`
		}
		if yaml.Unmarshal([]byte(strings.Join(lines[start:i], "\n")), &o) == nil &&
			o.Kind == kind && o.Metadata.Namespace == namespace && o.Metadata.Name == name {
			for j := start; j < i; j++ {
				lines[j] = "# the object under review"
			}
		}
		start = i + 1
	}
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644))
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
