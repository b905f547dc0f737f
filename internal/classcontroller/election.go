package classcontroller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of Election: client-go's usual lease timing.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ErrLeaseLost is returned by RunElected when this replica stopped holding
// the leader Lease while its context was still live: it has stopped
// reconciling, and the process should exit so that it starts again as a
// candidate.
var ErrLeaseLost = errors.New("classcontroller: lost the leader lease")

// Election says which coordination.k8s.io Lease elects the one replica
// that reconciles.
type Election struct {
	// Client reads and renews the Lease (required).
	Client kubernetes.Interface
	// Namespace and Name name the Lease (required).
	Namespace, Name string
	// Identity names this replica in the Lease's holderIdentity; the host
	// name (a pod's name) and a random suffix when empty.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go
	// leaderelection's timing; the Default values when zero. A leader that
	// cannot renew within RenewDeadline stops; another replica takes over
	// LeaseDuration after the last renewal at most.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// RunElected campaigns for the Lease e names and runs the controller while
// this replica holds it. It returns nil when ctx is done (releasing the
// Lease if held), ErrLeaseLost when the Lease was lost while ctx was live,
// and another error when e is not valid or the controller could not run.
// The controller has stopped when RunElected returns. Like Run, it may be
// called once.
//
// Leader election does not fence (see the package doc): a replica that
// lost the Lease may finish a status write it had started.
func (c *Controller) RunElected(ctx context.Context, e Election) error {
	if e.Client == nil || e.Namespace == "" || e.Name == "" {
		return fmt.Errorf("%w: Election needs a Client, a Namespace and a Name", ErrConfig)
	}
	if e.Identity == "" {
		e.Identity = DefaultIdentity()
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	if c.recorder != nil {
		lock.LockConfig.EventRecorder = c.recorder
	}
	lease := e.Namespace + "/" + e.Name
	// The elector runs OnStartedLeading in a goroutine of its own and may
	// return before it starts: once Run has returned, a late start does
	// nothing.
	var (
		mu       sync.Mutex
		returned bool
		started  bool
		runErr   error
		done     = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            e.Name,
		LeaseDuration:   orDefault(e.LeaseDuration, DefaultLeaseDuration),
		RenewDeadline:   orDefault(e.RenewDeadline, DefaultRenewDeadline),
		RetryPeriod:     orDefault(e.RetryPeriod, DefaultRetryPeriod),
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if returned {
					mu.Unlock()
					return
				}
				started = true
				mu.Unlock()
				defer close(done)
				c.log.Info("leading: this replica reconciles", "lease", lease, "identity", e.Identity)
				runErr = c.Run(ctx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if id != e.Identity {
					c.log.Info("another replica leads", "lease", lease, "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.log.Info("campaigning for the leader lease", "lease", lease, "identity", e.Identity)
	le.Run(ctx) // returns once ctx is done or the lease is lost; the controller's context is then done
	mu.Lock()
	returned = true
	led := started
	mu.Unlock()
	if led {
		<-done
	}
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		c.log.Info("stopped; the leader lease is released", "lease", lease)
		return nil
	default:
		c.log.Error("lost the leader lease: stopped reconciling", "lease", lease, "identity", e.Identity)
		return ErrLeaseLost
	}
}

// DefaultIdentity is the host name (in Kubernetes, the pod's name) and a
// random suffix, so two processes on one host are two candidates.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "class-lint-controller"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "_" + hex.EncodeToString(b[:])
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
