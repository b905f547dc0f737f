// Package classcontroller is the class controller (class-lint controller):
// it keeps the status of every LockClass saying whether a current
// PauseTestResult proves the class fenced, by the rules of
// [class.ProveFenced], in the form lockd reads ([class.ClassStatus]).
//
// What it promises: for each LockClass it writes status.fenced,
// status.fencedUntil, status.pauseTestResult and one condition of type
// Fenced with a reason (a class.Reason constant) and a message, computed
// from the class's spec and the PauseTestResults of its namespace as they
// are in the API server's watch cache; it writes again when either
// changes, when the proof's end passes (status.fencedUntil, plus a second,
// by the injected clock, with no event needed), and at every resync. The
// status carries the metadata.generation it was computed for
// (observedGeneration), so a reader can tell a status written for an
// older spec. It writes only the status subresource, and only when the
// status differs from what is there.
//
// What it does not promise: that the status is current. Between a change
// and the next write the status says what was true before; a reader must
// compare observedGeneration with the spec's generation and fencedUntil
// with its own clock, as [class.ClassStatus.Proof] and
// [class.FenceProof.HoldsAt] do. It does not run the pause test: it only
// reads the results `lockctl fence-test` wrote. Leader election (RunElected)
// keeps one writer among replicas in the steady state but does not fence:
// during a handover two replicas may both write for a moment. Each writes
// what the objects say, so they agree but for the condition's
// lastTransitionTime, which each takes from its own clock.
package classcontroller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/lockd-dev/lockd/internal/class"
)

// FieldManager is the field manager of the controller's status writes.
const FieldManager = "class-lint-controller"

// Defaults of Config.
const (
	// DefaultResync is how often every class is reconciled with no event.
	DefaultResync = 10 * time.Minute
	// DefaultWorkers is how many classes are reconciled at once.
	DefaultWorkers = 2
)

// The resources the controller reads and writes.
var (
	// LockClasses is the LockClass resource.
	LockClasses = schema.GroupVersionResource{Group: class.Group, Version: class.Version, Resource: class.Resources[class.KindLockClass]}
	// PauseTestResults is the PauseTestResult resource.
	PauseTestResults = schema.GroupVersionResource{Group: class.Group, Version: class.Version, Resource: class.Resources[class.KindPauseTestResult]}
)

// ErrConfig is wrapped by New's errors about its Config.
var ErrConfig = errors.New("classcontroller: invalid config")

// Config is what a Controller needs.
type Config struct {
	// Client reads LockClasses and PauseTestResults and writes the
	// LockClass status subresource (required).
	Client dynamic.Interface
	// Clock is the controller's "now" for proofs and the clock the
	// requeue at a proof's end waits on; clock.RealClock when nil.
	Clock clock.WithTicker
	// Resync is how often every class is reconciled with no event;
	// DefaultResync when zero.
	Resync time.Duration
	// Workers is how many classes are reconciled at once; DefaultWorkers
	// when zero.
	Workers int
	// Log receives what the controller does; nothing is logged when nil.
	Log *slog.Logger
	// Recorder, when set, records an Event on a LockClass whose Fenced
	// condition changes status.
	Recorder record.EventRecorder
}

// Controller keeps LockClass status. Make one with New and run it with
// Run or RunElected, once.
type Controller struct {
	client   dynamic.Interface
	clock    clock.WithTicker
	workers  int
	log      *slog.Logger
	recorder record.EventRecorder

	factory dynamicinformer.DynamicSharedInformerFactory
	classes cache.GenericLister
	results cache.GenericLister
	synced  []cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]

	once sync.Once
}

// New validates cfg and returns a Controller with its informers and queue
// set up, not yet started.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Client == nil:
		return nil, fmt.Errorf("%w: no Client", ErrConfig)
	case cfg.Resync < 0:
		return nil, fmt.Errorf("%w: Resync %s is negative", ErrConfig, cfg.Resync)
	case cfg.Workers < 0:
		return nil, fmt.Errorf("%w: Workers %d is negative", ErrConfig, cfg.Workers)
	}
	c := &Controller{client: cfg.Client, clock: cfg.Clock, workers: cfg.Workers, log: cfg.Log, recorder: cfg.Recorder}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.workers == 0 {
		c.workers = DefaultWorkers
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	resync := cfg.Resync
	if resync == 0 {
		resync = DefaultResync
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "lockclasses", Clock: c.clock})
	c.factory = dynamicinformer.NewDynamicSharedInformerFactory(cfg.Client, resync)

	ci := c.factory.ForResource(LockClasses)
	ri := c.factory.ForResource(PauseTestResults)
	c.classes, c.results = ci.Lister(), ri.Lister()
	if _, err := ci.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueClass,
		UpdateFunc: func(_, obj any) { c.enqueueClass(obj) },
		DeleteFunc: c.enqueueClass,
	}); err != nil {
		return nil, fmt.Errorf("classcontroller: watching lockclasses: %w", err)
	}
	if _, err := ri.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueResultClass,
		UpdateFunc: func(old, obj any) {
			c.enqueueResultClass(old)
			c.enqueueResultClass(obj)
		},
		DeleteFunc: c.enqueueResultClass,
	}); err != nil {
		return nil, fmt.Errorf("classcontroller: watching pausetestresults: %w", err)
	}
	c.synced = []cache.InformerSynced{ci.Informer().HasSynced, ri.Informer().HasSynced}
	return c, nil
}

// enqueueClass queues the key of a LockClass (or of a deleted one's
// tombstone).
func (c *Controller) enqueueClass(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.log.Warn("cannot key a LockClass event", "err", err)
		return
	}
	c.queue.Add(key)
}

// enqueueResultClass queues the key of the class a PauseTestResult names
// (spec.class, in the result's namespace). An update queues the class of
// the old and of the new object, which differ when spec.class changed.
func (c *Controller) enqueueResultClass(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "class")
	if name == "" {
		return
	}
	c.queue.Add(u.GetNamespace() + "/" + name)
}

// Run starts the informers, waits for their caches, reconciles classes
// until ctx is done, then stops the workers and informers and returns. It
// returns an error when the caches could not sync, or when called again.
func (c *Controller) Run(ctx context.Context) error {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return errors.New("classcontroller: Run called twice")
	}
	defer c.factory.Shutdown()
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	c.log.Info("waiting for the lockclasses and pausetestresults caches")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("classcontroller: the lockclasses and pausetestresults caches did not sync")
	}
	c.log.Info("reconciling lockclasses", "workers", c.workers)
	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	c.log.Info("stopped reconciling lockclasses")
	return nil
}

// processNext reconciles one queued class; false when the queue is shut
// down.
func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	after, err := c.reconcile(ctx, key)
	switch {
	case err == nil:
		c.queue.Forget(key)
		if after > 0 {
			c.queue.AddAfter(key, after)
		}
	case apierrors.IsConflict(err):
		// The cache held an older version: the newer one's event queues
		// the class again.
		c.queue.Forget(key)
		c.log.Debug("class changed while its status was written; reconciling the newer version", "class", key)
	case ctx.Err() != nil:
	default:
		c.log.Warn("cannot reconcile class, retrying", "class", key, "err", err, "retries", c.queue.NumRequeues(key))
		c.queue.AddRateLimited(key)
	}
	return true
}

// reconcile makes the status of the LockClass key ("namespace/name") say
// what the world says now, and returns when to look again for a proof that
// will end (0: no need).
func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil // not a key this controller queues
	}
	cached, err := c.classes.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.log.Debug("class gone", "class", key)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("classcontroller: reading class %s: %w", key, err)
	}
	obj, ok := cached.(*unstructured.Unstructured)
	if !ok {
		return 0, fmt.Errorf("classcontroller: class %s: unexpected %T in the cache", key, cached)
	}
	listed, err := c.results.ByNamespace(ns).List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("classcontroller: listing pausetestresults of %s: %w", ns, err)
	}
	results := make([]map[string]any, 0, len(listed))
	for _, r := range listed {
		if u, ok := r.(*unstructured.Unstructured); ok {
			results = append(results, u.Object)
		}
	}

	now := c.clock.Now()
	want := statusFor(obj.Object, results, now)
	var after time.Duration
	if want.proof.Proven {
		after = max(want.proof.Until.Sub(now)+recheckMargin, recheckMargin)
	}
	old, hadStatus := class.ClassStatusOf(obj.Object)
	if hadStatus && reflect.DeepEqual(old, want.status) {
		c.log.Debug("status unchanged", "class", key, "fenced", want.status.Fenced, "reason", want.proof.Reason, "recheckIn", after)
		return after, nil
	}

	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want.status)
	if err != nil {
		return 0, fmt.Errorf("classcontroller: class %s: encoding status: %w", key, err)
	}
	upd := obj.DeepCopy()
	upd.Object["status"] = content
	if _, err := c.client.Resource(LockClasses).Namespace(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("classcontroller: writing the status of class %s: %w", key, err)
	}
	cond := want.status.Conditions[0]
	c.log.Info("status written", "class", key, "generation", want.status.ObservedGeneration, "fenced", want.status.Fenced,
		"reason", cond.Reason, "fencedUntil", want.status.FencedUntil, "pauseTestResult", want.status.PauseTestResult, "message", cond.Message)
	if c.recorder != nil {
		prev := fencedCondition(old)
		if !hadStatus || prev == nil || prev.Status != cond.Status {
			typ := corev1.EventTypeNormal
			if !want.status.Fenced && cond.Reason != class.ReasonNotDeclaredFenced {
				typ = corev1.EventTypeWarning // declared fenced, not proven
			}
			c.recorder.Event(upd, typ, cond.Reason, cond.Message)
		}
	}
	return after, nil
}
