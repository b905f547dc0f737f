package kubeclasses_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/classcontroller"
	"github.com/lockd-dev/lockd/internal/kubeclasses"
	"github.com/lockd-dev/lockd/internal/kubetest"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

const (
	stdClass = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: std, namespace: t}
spec: {keys: ["t/"], purpose: correctness, enforcement: fenced, ttl: 15s, tier: entity, resource: test-db}
`
	aliceGrant = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: alice, namespace: t}
spec: {spiffeID: "` + lockdtest.Alice + `", prefixes: ["t/"]}
`
	bobGrant = `apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: bob, namespace: t}
spec: {spiffeID: "` + lockdtest.Bob + `", prefixes: ["t/"], sharedWith: [alice]}
`
)

// api is a real kube-apiserver with the lock CRDs and namespace t.
type api struct {
	*kubetest.APIServer
	dyn  dynamic.Interface
	kube kubernetes.Interface
}

func startAPI(t *testing.T) *api {
	t.Helper()
	s := kubetest.Start(t)
	s.ApplyCRDs(t, kubetest.CRDDir(t))
	a := &api{APIServer: s}
	var err error
	if a.dyn, err = dynamic.NewForConfig(s.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if a.kube, err = kubernetes.NewForConfig(s.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return a
}

// apply creates or replaces the object doc describes.
func (a *api) apply(ctx context.Context, doc string) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	r := a.dyn.Resource(kubeclasses.GVR(u.GetKind())).Namespace(u.GetNamespace())
	cur, err := r.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err != nil {
		return r.Create(ctx, u, metav1.CreateOptions{})
	}
	u.SetResourceVersion(cur.GetResourceVersion())
	return r.Update(ctx, u, metav1.UpdateOptions{})
}

func (a *api) mustApply(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u, err := a.apply(t.Context(), doc)
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, doc)
	}
	return u
}

// eventually polls cond every 20 ms for up to d and returns how long it
// took.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func canLock(t *testing.T, c *client.Client, key string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, key, "", func(*client.Lock) {})
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func readyz(t *testing.T, env *lockdtest.Env) string {
	t.Helper()
	resp, err := http.Get("http://" + env.MetricsAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// TestClassesFromTheKubernetesAPI: a class applied through the API is
// usable in lockd within 2 s; an object that breaks a rule is reported and
// its last good version keeps serving; with the API server stopped lockd
// keeps granting under the last good set, also after a restart of lockd;
// and the restarted API server's changes are picked up.
func TestClassesFromTheKubernetesAPI(t *testing.T) {
	a := startAPI(t)
	lockdDir := t.TempDir()
	env := lockdtest.Start(t, lockdtest.Options{Kubeconfig: a.Kubeconfig(), LockdDataDir: lockdDir})
	alice := env.Client(t, lockdtest.Alice)
	if err := canLock(t, alice, "t/x"); !errors.Is(err, client.ErrDenied) {
		t.Fatalf("before any class: %v; want denied", err)
	}

	// Applied: usable within 2 s.
	a.mustApply(t, stdClass)
	a.mustApply(t, aliceGrant)
	took := eventually(t, 2*time.Second, "the applied class usable in lockd", func() bool { return canLock(t, alice, "t/x") == nil })
	t.Logf("a class applied through the API was usable in lockd after %s", took.Round(time.Millisecond))

	// An update that breaks a rule the CRD cannot check (a key prefix
	// outside the object's namespace) gets in without the webhook: lockd
	// reports it and keeps serving the last good version.
	if _, err := a.apply(t.Context(), strings.Replace(stdClass, `keys: ["t/"]`, `keys: ["other/"]`, 1)); err != nil {
		t.Fatalf("an update only the webhook would refuse: %v", err)
	}
	eventually(t, 5*time.Second, "a warning event on the invalid class", func() bool {
		evs, err := a.kube.CoreV1().Events("t").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=std"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "InvalidLockObject" && strings.Contains(e.Message, "spec.keys") {
				return true
			}
		}
		return false
	})
	if err := canLock(t, alice, "t/x"); err != nil {
		t.Fatalf("the last good version of t/std stopped serving: %v", err)
	}
	a.mustApply(t, stdClass)

	// The API server stops: lockd keeps granting under the last good set.
	a.Stop()
	if err := canLock(t, alice, "t/x"); err != nil {
		t.Fatalf("with the API server stopped: %v", err)
	}
	eventually(t, 15*time.Second, "/readyz saying the API server does not confirm the set", func() bool {
		return strings.Contains(readyz(t, env), "classes: ") && env.Daemon.ClassSetAge() > 5*time.Second
	})

	// lockd restarts while the API server is still down: it serves the
	// cached set.
	env.Stop()
	env2 := lockdtest.Start(t, lockdtest.Options{Kubeconfig: a.Kubeconfig(), LockdDataDir: lockdDir, Backend: env.Backend})
	alice2 := env2.Client(t, lockdtest.Alice)
	if err := canLock(t, alice2, "t/y"); err != nil {
		t.Fatalf("a lockd restarted while the API server is down: %v", err)
	}
	if r := readyz(t, env2); !strings.HasPrefix(r, "200 ok") || !strings.Contains(r, "classes: ") {
		t.Fatalf("/readyz of a lockd serving the cached set: %q", r)
	}
	bob := env2.Client(t, lockdtest.Bob)
	if err := canLock(t, bob, "t/z"); !errors.Is(err, client.ErrDenied) {
		t.Fatalf("bob before his grant: %v; want denied", err)
	}

	// The API server is back: a change made there reaches the lockd that
	// started from its cache.
	a.Restart()
	a.mustApply(t, bobGrant)
	took = eventually(t, 30*time.Second, "bob's grant, applied after the API server came back", func() bool { return canLock(t, bob, "t/z") == nil })
	t.Logf("a grant applied after the API server restarted was usable after %s", took.Round(time.Millisecond))
	if err := canLock(t, alice2, "t/y"); err != nil {
		t.Fatalf("alice after the API server came back: %v", err)
	}
}

// TestLockdServesAClassFencedOnlyWhileItsStatusSaysSo: lockd reads the
// class controller's status: fenced only with status.fenced for the spec
// served and until status.fencedUntil; anything else is advisory, with
// the reason.
func TestLockdServesAClassFencedOnlyWhileItsStatusSaysSo(t *testing.T) {
	a := startAPI(t)
	env := lockdtest.Start(t, lockdtest.Options{Kubeconfig: a.Kubeconfig()})
	raw, _ := env.Raw(t, lockdtest.Operator)
	u := a.mustApply(t, stdClass)
	describe := func() *lockv1.LockClass {
		r, err := raw.DescribeClass(t.Context(), &lockv1.DescribeClassRequest{Namespace: "t", Name: "std"})
		if err != nil {
			return nil
		}
		return r.GetClass()
	}
	served := func(enf, reason string) func() bool {
		return func() bool {
			c := describe()
			return c != nil && c.GetEnforcement() == enf && c.GetFenceProof().GetReason() == reason
		}
	}
	eventually(t, 2*time.Second, "t/std advisory: no status yet", served("advisory", class.ReasonNoStatus))

	setStatus := func(st class.ClassStatus) {
		t.Helper()
		cur, err := a.dyn.Resource(kubeclasses.GVR(class.KindLockClass)).Namespace("t").Get(t.Context(), "std", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := yaml.Marshal(st)
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		for i := range st.Conditions {
			m["conditions"].([]any)[i].(map[string]any)["lastTransitionTime"] = time.Now().UTC().Format(time.RFC3339)
		}
		cur.Object["status"] = m
		if _, err := a.dyn.Resource(kubeclasses.GVR(class.KindLockClass)).Namespace("t").UpdateStatus(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	proven := class.FenceProof{Proven: true, Until: until, Result: "t/std-1", Reason: class.ReasonPauseTestCurrent, Message: "proven"}
	setStatus(class.StatusFor(proven, u.GetGeneration()))
	eventually(t, 2*time.Second, "t/std fenced: its status says so", served("fenced", class.ReasonPauseTestCurrent))

	setStatus(class.StatusFor(proven, u.GetGeneration()-1))
	eventually(t, 2*time.Second, "t/std advisory: status for an older spec", served("advisory", class.ReasonStatusStale))

	setStatus(class.StatusFor(class.FenceProof{Reason: class.ReasonPauseTestExpired, Message: "expired"}, u.GetGeneration()))
	eventually(t, 2*time.Second, "t/std advisory: the controller says expired", served("advisory", class.ReasonPauseTestExpired))

	setStatus(class.StatusFor(class.FenceProof{Proven: true, Until: time.Now().Add(-time.Minute), Reason: class.ReasonPauseTestCurrent, Message: "old"}, u.GetGeneration()))
	eventually(t, 2*time.Second, "t/std advisory: fencedUntil has passed", served("advisory", class.ReasonPauseTestExpired))
}

// TestTheRoleLockdShipsIsEnough: with only deploy/lockd/rbac.yaml's role
// (the test impersonates lockd's service account), a Source lists and
// watches the lock objects and writes its event on an invalid one.
func TestTheRoleLockdShipsIsEnough(t *testing.T) {
	a := startAPI(t)
	if _, err := a.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lockd-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../deploy/lockd/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		gvr := map[string]schema.GroupVersionResource{
			"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
			"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
			"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		}[u.GetKind()]
		var r dynamic.ResourceInterface = a.dyn.Resource(gvr)
		if u.GetNamespace() != "" {
			r = a.dyn.Resource(gvr).Namespace(u.GetNamespace())
		}
		if _, err := r.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	a.mustApply(t, stdClass)
	a.mustApply(t, aliceGrant)
	bad := a.mustApply(t, strings.NewReplacer("name: alice", "name: bad", `prefixes: ["t/"]`, `prefixes: ["elsewhere/"]`).Replace(aliceGrant))

	rc := a.RESTConfig()
	rc.Impersonate.UserName = "system:serviceaccount:lockd-system:lockd"
	// Without the role, the same identity may not list the objects.
	if _, err := kubeclasses.New(t.Context(), kubeclasses.Config{REST: a.asNobody(t), CacheFile: filepath.Join(t.TempDir(), "c.json"), SyncTimeout: 2 * time.Second}); !errors.Is(err, kubeclasses.ErrNoSet) {
		t.Fatalf("a Source without lockd's role: %v; want ErrNoSet", err)
	}
	src, err := kubeclasses.New(t.Context(), kubeclasses.Config{REST: rc, CacheFile: filepath.Join(t.TempDir(), "c.json"), SyncTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if st := src.Status(); st.FromCache || src.Current().Classes() == nil || len(src.Current().Grants()) != 1 {
		t.Fatalf("a Source with lockd's role serves %d classes, %d grants (from cache: %v)", len(src.Current().Classes()), len(src.Current().Grants()), st.FromCache)
	}
	eventually(t, 5*time.Second, "the event on the invalid grant", func() bool {
		evs, err := a.kube.CoreV1().Events("t").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + bad.GetName()})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Reason == "InvalidLockObject"
	})
}

// asNobody is the API server's config impersonating a service account no
// role is bound to.
func (a *api) asNobody(t *testing.T) *rest.Config {
	t.Helper()
	rc := a.RESTConfig()
	rc.Impersonate.UserName = "system:serviceaccount:lockd-system:nobody"
	return rc
}

// TestLockdServesAClassAsTheClassControllerProvesIt: with the class
// controller running against the same API server, a PauseTestResult for the
// class, its resource and schema version makes lockd serve it fenced; the
// result deleted, or the class's schema version changed, makes it advisory
// again, with the controller's reason.
func TestLockdServesAClassAsTheClassControllerProvesIt(t *testing.T) {
	a := startAPI(t)
	ctl, err := classcontroller.New(classcontroller.Config{Client: a.dyn, Resync: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	env := lockdtest.Start(t, lockdtest.Options{Kubeconfig: a.Kubeconfig()})
	raw, _ := env.Raw(t, lockdtest.Operator)
	served := func(enf, reason string) func() bool {
		return func() bool {
			r, err := raw.DescribeClass(t.Context(), &lockv1.DescribeClassRequest{Namespace: "t", Name: "std"})
			return err == nil && r.GetClass().GetEnforcement() == enf && r.GetClass().GetFenceProof().GetReason() == reason
		}
	}
	a.mustApply(t, stdClass)
	eventually(t, 10*time.Second, "t/std advisory without a result", served("advisory", class.ReasonNoPauseTest))

	ran := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	result := fmt.Sprintf(`apiVersion: locks.lockd.dev/v1alpha1
kind: PauseTestResult
metadata: {name: std, namespace: t}
spec: {class: std, resource: test-db, outcome: pass, ranAt: %q, expires: %q, tokens: {first: "281474976710664", second: "281474976710666"}}
`, ran.Format(time.RFC3339), ran.AddDate(1, 0, -1).Format(time.RFC3339))
	a.mustApply(t, result)
	took := eventually(t, 10*time.Second, "t/std fenced with a current result", served("fenced", class.ReasonPauseTestCurrent))
	t.Logf("a PauseTestResult applied made lockd serve the class fenced after %s", took.Round(time.Millisecond))

	a.mustApply(t, strings.Replace(stdClass, "resource: test-db}", `resource: test-db, resourceSchemaVersion: "2"}`, 1))
	eventually(t, 10*time.Second, "t/std advisory once its schema version changed", served("advisory", class.ReasonSchemaVersionChanged))

	a.mustApply(t, stdClass)
	eventually(t, 10*time.Second, "t/std fenced again", served("fenced", class.ReasonPauseTestCurrent))
	if err := a.dyn.Resource(kubeclasses.GVR(class.KindPauseTestResult)).Namespace("t").Delete(t.Context(), "std", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "t/std advisory once its result is deleted", served("advisory", class.ReasonNoPauseTest))
}
