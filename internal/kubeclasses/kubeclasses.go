// Package kubeclasses serves lockd's classes from the Kubernetes API: the
// LockClass, LockGrant and LockNamespace custom resources that Argo CD (or
// anyone with the RBAC to) applies from the class repository.
//
// A Source watches them with client-go informers and builds a class set
// under the rules a class directory follows (package class). What it
// promises:
//
//   - An object that breaks a rule never replaces its last good version: it
//     is reported (a Warning event on the object, the log, a metric) and
//     the version served before it keeps serving; a new object that was
//     never good is left out. A set that breaks a rule across objects (two
//     classes claiming one prefix) is rejected whole and the last good set
//     keeps serving.
//   - While the API server cannot be reached, the last good set keeps
//     serving. It is persisted in a file, so a lockd restarted during an
//     outage serves it too; Status says how old it is.
//   - A class is proven fenced only by its status, as the class controller
//     writes it (class.ClassStatus), for the generation served.
//
// It does not promise that the set is current: a change reaches lockd when
// its watch delivers it, and not at all while the API server is down.
package kubeclasses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/lockd-dev/lockd/internal/class"
)

// Errors.
var (
	// ErrConfig reports an unusable Config.
	ErrConfig = errors.New("kubeclasses: bad configuration")
	// ErrNoSet reports that no good set could be served at start: the API
	// server was not reached (or served a set that breaks the rules) and no
	// set is cached.
	ErrNoSet = errors.New("kubeclasses: no class set to serve")
)

// Kinds are the kinds lockd reads from the API, in the order they are
// listed.
var Kinds = []string{class.KindLockClass, class.KindLockGrant, class.KindLockNamespace}

// GVR is the group, version and resource of a lock kind.
func GVR(kind string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: class.Group, Version: class.Version, Resource: class.Resources[kind]}
}

// Defaults.
const (
	// DefaultSyncTimeout is how long New waits for the API server before it
	// serves the cached set.
	DefaultSyncTimeout = 10 * time.Second
	// probeInterval is how often the Source confirms that it still hears
	// from the API server.
	probeInterval = 5 * time.Second
	// debounce gathers the events of one apply into one rebuild.
	debounce = 100 * time.Millisecond
	// resync is the informers' resync period.
	resync = 10 * time.Minute
)

// Config configures a Source.
type Config struct {
	// REST reaches the API server (from a kubeconfig, or in-cluster).
	REST *rest.Config
	// CacheFile holds the last good set, for a start while the API server
	// is down. Required.
	CacheFile string
	// SyncTimeout bounds how long New waits for the API server before it
	// serves the cached set (DefaultSyncTimeout when zero).
	SyncTimeout time.Duration
	// Logger receives a line per change, rejection and outage.
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// OnReject is called once for each rejection: an object or a set that
	// breaks a rule.
	OnReject func(error)
	// Reporter names this lockd in the events it writes (its hostname when
	// empty).
	Reporter string
}

// Status says where the served set came from and how old it is.
type Status struct {
	// Confirmed is when the API server last answered while the watches
	// were in sync: the served set was current then. For a set served from
	// the cache since start, it is when that set was last confirmed before
	// it was cached.
	Confirmed time.Time
	// FromCache is true while the set served is the cached one, loaded at
	// start, and the API server has not been reached since.
	FromCache bool
	// Err is the last error reaching the API server, nil once it answers.
	Err error
}

// Age is how old the served set may be at now.
func (st Status) Age(now time.Time) time.Duration {
	if st.Confirmed.IsZero() {
		return 0
	}
	return max(now.Sub(st.Confirmed), 0)
}

// Source serves the last good class set read from the Kubernetes API.
type Source struct {
	cfg    Config
	log    *slog.Logger
	dyn    dynamic.Interface
	events kubernetes.Interface

	current atomic.Pointer[class.Set]
	w       atomic.Pointer[watches]
	dirty   chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	close   sync.Once

	mu        sync.Mutex
	subs      []func(*class.Set)
	status    Status
	lastGood  map[string]good  // kind/namespace/name → the version last served
	reported  map[string]bool  // namespace/name@resourceVersion of objects reported invalid
	rejected  string           // the last set rejection, reported once
	watchErrs map[string]error // the informers' last watch errors, by kind
}

// good is one object as last served.
type good struct {
	obj    map[string]any // trimmed: apiVersion, kind, metadata, spec, status
	parsed class.Object
}

// New starts watching and returns once it serves a set: the API server's,
// or, when it cannot be reached within SyncTimeout, the cached one. With
// neither it fails with ErrNoSet.
func New(ctx context.Context, cfg Config) (*Source, error) {
	if cfg.REST == nil || cfg.CacheFile == "" {
		return nil, fmt.Errorf("%w: REST and CacheFile are required", ErrConfig)
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnReject == nil {
		cfg.OnReject = func(error) {}
	}
	if cfg.Reporter == "" {
		cfg.Reporter, _ = os.Hostname()
	}
	rc := rest.CopyConfig(cfg.REST)
	rc.UserAgent = "lockd"
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	events, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s := &Source{cfg: cfg, log: cfg.Logger, dyn: dyn, events: events,
		dirty: make(chan struct{}, 1), stop: make(chan struct{}),
		lastGood: map[string]good{}, reported: map[string]bool{}, watchErrs: map[string]error{}}
	w, err := s.startWatches()
	if err != nil {
		return nil, err
	}
	s.w.Store(w)

	syncCtx, cancel := context.WithTimeout(ctx, cfg.SyncTimeout)
	synced := cache.WaitForCacheSync(syncCtx.Done(), s.hasSynced)
	cancel()
	var why error
	if synced {
		why = s.rebuild()
	} else {
		why = fmt.Errorf("the Kubernetes API at %s did not answer within %s", cfg.REST.Host, cfg.SyncTimeout)
	}
	if s.current.Load() == nil {
		if err := s.loadCache(); err != nil {
			s.Close()
			return nil, fmt.Errorf("%w: %w; and %w", ErrNoSet, why, err)
		}
		s.log.Warn("serving the cached class set: "+why.Error(), "cache", cfg.CacheFile,
			"confirmed", s.Status().Confirmed.UTC().Format(time.RFC3339))
	}
	s.wg.Add(2)
	go s.run()
	go s.probe()
	return s, nil
}

// watches are the informers of the lock kinds, started together.
type watches struct {
	factory dynamicinformer.DynamicSharedInformerFactory
	infs    map[string]cache.SharedIndexInformer
	stop    chan struct{}
}

func (w *watches) synced() bool {
	for _, inf := range w.infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (w *watches) shutdown() {
	close(w.stop)
	w.factory.Shutdown()
}

// startWatches starts informers on the lock kinds; every event marks the
// set for a rebuild.
func (s *Source) startWatches() (*watches, error) {
	w := &watches{factory: dynamicinformer.NewDynamicSharedInformerFactory(s.dyn, resync),
		infs: map[string]cache.SharedIndexInformer{}, stop: make(chan struct{})}
	mark := func(any) { s.markDirty() }
	for _, kind := range Kinds {
		inf := w.factory.ForResource(GVR(kind)).Informer()
		if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { s.watchError(kind, err) }); err != nil {
			return nil, fmt.Errorf("kubeclasses: %s informer: %w", kind, err)
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: mark, UpdateFunc: func(_, o any) { mark(o) }, DeleteFunc: mark,
		}); err != nil {
			return nil, fmt.Errorf("kubeclasses: %s informer: %w", kind, err)
		}
		w.infs[kind] = inf
	}
	w.factory.Start(w.stop)
	return w, nil
}

// rewatch replaces the informers with new ones, which list at once: after
// an outage client-go's reflectors wait up to a minute (their backoff)
// before they list again.
func (s *Source) rewatch() {
	w, err := s.startWatches()
	if err != nil {
		s.log.Warn("could not restart the Kubernetes API watches", "err", err)
		return
	}
	old := s.w.Swap(w)
	old.shutdown()
	s.markDirty()
}

// Current returns the last good set. It never returns nil.
func (s *Source) Current() *class.Set { return s.current.Load() }

// OnChange registers f to be called with each new good set, after it has
// become current, one call at a time, in registration order.
func (s *Source) OnChange(f func(*class.Set)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, f)
}

// Status says where the served set came from and how old it is.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Close stops watching; Current keeps returning the last good set.
func (s *Source) Close() error {
	s.close.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.w.Load().shutdown()
	})
	return nil
}

func (s *Source) hasSynced() bool { return s.w.Load().synced() }

func (s *Source) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func (s *Source) watchError(kind string, err error) {
	s.mu.Lock()
	first := s.watchErrs[kind] == nil
	s.watchErrs[kind] = err
	s.status.Err = err
	s.mu.Unlock()
	if first {
		s.log.Warn("the Kubernetes API watch failed; serving the last good class set while it retries", "kind", kind, "err", err)
	}
}

// run rebuilds the set after events, once the informers are in sync.
func (s *Source) run() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.dirty:
		}
		t := time.NewTimer(debounce)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if !s.hasSynced() {
			// The watches are still listing (an informer with nothing to
			// list sends no event): look again shortly.
			s.markDirty()
			continue
		}
		_ = s.rebuild()
	}
}

// probe confirms every probeInterval that the API server answers; while it
// does and the informers are in sync, the served set is current.
func (s *Source) probe() {
	defer s.wg.Done()
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeInterval)
		_, err := s.dyn.Resource(GVR(class.KindLockClass)).List(ctx, metav1.ListOptions{Limit: 1})
		cancel()
		s.mu.Lock()
		if err != nil {
			if s.status.Err == nil {
				s.log.Warn("the Kubernetes API does not answer; serving the last good class set", "err", err)
			}
			s.status.Err = err
			s.mu.Unlock()
			continue
		}
		recovered := s.status.Err != nil || len(s.watchErrs) > 0 || !s.hasSynced()
		if !recovered && !s.status.FromCache {
			s.status.Confirmed = s.cfg.Now()
		}
		s.status.Err = nil
		clear(s.watchErrs)
		s.mu.Unlock()
		if recovered {
			// The watches failed, or never listed: list again now rather
			// than when their backoff ends. The new informers' events
			// rebuild the set, and the next probe confirms it.
			s.log.Info("the Kubernetes API answers again; listing the lock objects")
			s.rewatch()
		}
	}
}

// rebuild builds a set from the informers' objects and serves it if it is
// good; it returns why not.
func (s *Source) rebuild() error {
	w := s.w.Load()
	if !w.synced() {
		return nil
	}
	var objs []*unstructured.Unstructured
	for _, kind := range Kinds {
		for _, o := range w.infs[kind].GetStore().List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				objs = append(objs, u)
			}
		}
	}
	return s.serve(objs, s.cfg.Now(), false)
}

// serve builds a set from objs (each object's last good version standing
// in for one that breaks a rule) and serves it, unless a rule across the
// objects is broken. fromCache: objs were read from the cache file.
func (s *Source) serve(objs []*unstructured.Unstructured, confirmed time.Time, fromCache bool) error {
	s.mu.Lock()
	var (
		classes []*class.Class
		grants  []class.Grant
		homes   []class.Home
		proofs  = map[string]class.FenceProof{}
		kept    = map[string]good{}
		invalid []invalidObject
	)
	for _, u := range objs {
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		o, problems := class.ParseObject(u.Object)
		g := good{obj: trim(u), parsed: o}
		if !o.Valid {
			invalid = append(invalid, invalidObject{u: u, problems: problems})
			last, ok := s.lastGood[key]
			if !ok {
				continue
			}
			g = last
		}
		kept[key] = g
		switch p := g.parsed; {
		case p.Class != nil:
			classes = append(classes, p.Class)
			if st, ok := class.ClassStatusOf(u.Object); ok {
				// The status is the object's now; the spec served may be
				// an older, good one: a status of another generation
				// proves nothing.
				proofs[p.Class.Ref()] = st.Proof(generation(g.obj))
			}
		case p.Grant != nil:
			grants = append(grants, *p.Grant)
		case p.Home != nil:
			homes = append(homes, *p.Home)
		}
	}
	problems := append(class.CheckOwnership(classes), class.CheckRegions(classes, homes)...)
	s.mu.Unlock()

	for _, in := range invalid {
		s.reportInvalid(in)
	}
	if len(problems) > 0 {
		err := &class.LoadError{Problems: problems}
		s.mu.Lock()
		again := s.rejected == err.Error()
		s.rejected = err.Error()
		s.mu.Unlock()
		if !again {
			s.log.Error("class set from the Kubernetes API rejected; still serving the last good set", "err", err)
			s.cfg.OnReject(err)
		}
		return err
	}
	set := class.NewSet(classes, grants, homes...).WithFenceProofs(proofs)
	s.mu.Lock()
	s.rejected = ""
	s.lastGood = kept
	s.status.FromCache = fromCache
	if !confirmed.IsZero() {
		s.status.Confirmed = confirmed
	}
	old := s.current.Load()
	changed := old == nil || !reflect.DeepEqual(set, old)
	if changed {
		s.current.Store(set)
	}
	subs := slices.Clone(s.subs)
	s.mu.Unlock()
	if !changed {
		return nil
	}
	s.log.Info("class set from the Kubernetes API", "from_cache", fromCache,
		"namespaces", len(set.Namespaces()), "classes", len(set.Classes()), "grants", len(set.Grants()))
	if !fromCache {
		if err := s.saveCache(kept, confirmed); err != nil {
			s.log.Warn("could not cache the class set; a restart while the API server is down would not serve it", "cache", s.cfg.CacheFile, "err", err)
		}
	}
	for _, f := range subs {
		f(set)
	}
	return nil
}

type invalidObject struct {
	u        *unstructured.Unstructured
	problems []class.Problem
}

// reportInvalid logs an object that breaks a rule and writes a Warning
// event on it, once per version of it (across lockds: the event's name is
// the version's).
func (s *Source) reportInvalid(in invalidObject) {
	u := in.u
	ref := u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
	version := u.GetNamespace() + "/" + u.GetName() + "@" + u.GetResourceVersion()
	s.mu.Lock()
	seen := s.reported[version]
	s.reported[version] = true
	s.mu.Unlock()
	if seen {
		return
	}
	var msgs []string
	for _, p := range in.problems {
		msgs = append(msgs, strings.TrimSpace(strings.TrimPrefix(p.Error(), p.File+":")))
	}
	msg := fmt.Sprintf("lockd serves the last good version of %s, or leaves it out if it never had one: %s", ref, strings.Join(msgs, "; "))
	s.log.Error("invalid object in the Kubernetes API", "object", ref, "resource_version", u.GetResourceVersion(), "problems", strings.Join(msgs, "; "))
	s.cfg.OnReject(fmt.Errorf("%w: %s: %s", class.ErrInvalid, ref, strings.Join(msgs, "; ")))
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	now := metav1.NewTime(s.cfg.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: eventName(u), Namespace: u.GetNamespace()},
		InvolvedObject: corev1.ObjectReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(),
			Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()},
		Reason: "InvalidLockObject", Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "lockd", Host: s.cfg.Reporter},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "lockd.dev/lockd", ReportingInstance: s.cfg.Reporter,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.events.CoreV1().Events(u.GetNamespace()).Create(ctx, ev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		s.log.Warn("could not write an event on the invalid object", "object", ref, "err", err)
	}
}

// eventName is one name per version of an object, so that every lockd
// reports it in the same event.
func eventName(u *unstructured.Unstructured) string {
	name := fmt.Sprintf("%s.%s.invalid.%s", u.GetName(), strings.ToLower(u.GetKind()), u.GetResourceVersion())
	if len(name) > 253 {
		name = name[len(name)-253:]
	}
	return strings.TrimLeft(name, ".-")
}

// trim keeps what the set is built from: apiVersion, kind, the name,
// namespace and generation, spec and status.
func trim(u *unstructured.Unstructured) map[string]any {
	out := map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(),
		"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace(), "generation": u.GetGeneration()},
	}
	for _, f := range []string{"spec", "status"} {
		if v, ok := u.Object[f]; ok {
			out[f] = v
		}
	}
	return out
}

func generation(obj map[string]any) int64 {
	meta, _ := obj["metadata"].(map[string]any)
	switch g := meta["generation"].(type) {
	case int64:
		return g
	case float64:
		return int64(g)
	case json.Number:
		n, _ := g.Int64()
		return n
	}
	return 0
}

// cacheFile is the cache's form: the objects of the last good set and
// when it was last confirmed current.
type cacheFile struct {
	Confirmed time.Time        `json:"confirmed"`
	Objects   []map[string]any `json:"objects"`
}

func (s *Source) saveCache(kept map[string]good, confirmed time.Time) error {
	keys := make([]string, 0, len(kept))
	for k := range kept {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cf := cacheFile{Confirmed: confirmed}
	for _, k := range keys {
		cf.Objects = append(cf.Objects, kept[k].obj)
	}
	data, err := json.MarshalIndent(cf, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.cfg.CacheFile), 0o700); err != nil {
		return err
	}
	tmp := s.cfg.CacheFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.cfg.CacheFile)
}

// loadCache serves the cached set.
func (s *Source) loadCache() error {
	data, err := os.ReadFile(s.cfg.CacheFile)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no class set is cached in %s (lockd caches the last good set once it has reached the API server)", s.cfg.CacheFile)
	}
	if err != nil {
		return fmt.Errorf("read the cached class set: %w", err)
	}
	var cf cacheFile
	if err := json.Unmarshal(data, &cf); err != nil {
		return fmt.Errorf("the cached class set %s: %w", s.cfg.CacheFile, err)
	}
	objs := make([]*unstructured.Unstructured, 0, len(cf.Objects))
	for _, o := range cf.Objects {
		objs = append(objs, &unstructured.Unstructured{Object: o})
	}
	if err := s.serve(objs, cf.Confirmed, true); err != nil {
		return fmt.Errorf("the cached class set %s: %w", s.cfg.CacheFile, err)
	}
	s.mu.Lock()
	s.status.Confirmed, s.status.FromCache = cf.Confirmed, true
	s.mu.Unlock()
	return nil
}
