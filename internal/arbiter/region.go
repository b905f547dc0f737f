package arbiter

import (
	"errors"
	"fmt"

	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// ErrWrongRegion: the key's namespace is homed to another region. This
// lockd neither serves nor forwards it: the caller goes to that region's
// lockd, so a cross-region round trip is never hidden inside a call.
var ErrWrongRegion = errors.New("arbiter: the key's namespace is homed to another region")

// WrongRegionError is ErrWrongRegion with where the key is served.
type WrongRegionError struct {
	Namespace string
	// Region is the namespace's home; Served is this lockd's region (empty
	// when it was started without one).
	Region, Served string
	// Endpoint is the home region's lockd, when this lockd was told it.
	Endpoint string
}

func (e *WrongRegionError) Error() string {
	msg := fmt.Sprintf("%v: namespace %s is homed to region %s", ErrWrongRegion, e.Namespace, e.Region)
	if e.Served == "" {
		msg += "; this lockd was started without --region, and the classes name several regions"
	} else {
		msg += ", this lockd serves " + e.Served
	}
	if e.Endpoint != "" {
		msg += "; region " + e.Region + "'s lockd is " + e.Endpoint
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrWrongRegion) hold.
func (e *WrongRegionError) Unwrap() error { return ErrWrongRegion }

// ReasonMetadata is what the boundary puts in the refusal's ErrorInfo
// metadata, for clients to act on without reading the message.
func (e *WrongRegionError) ReasonMetadata() map[string]string {
	md := map[string]string{"namespace": e.Namespace, "region": e.Region}
	if e.Endpoint != "" {
		md["endpoint"] = e.Endpoint
	}
	return md
}

// homeCheck refuses a key whose namespace is homed to another region. It
// reads only the class set in memory, and every per-key call makes it
// before any etcd read. A namespace without a home is served everywhere
// (the class set then names at most one region).
func (a *Arbiter) homeCheck(key string) error {
	ns := lockkey.Namespace(key)
	set := a.policy.Load().Classes
	region, homed := set.Home(ns)
	if !homed || region == a.region || (a.region == "" && len(set.Regions()) < 2) {
		return nil
	}
	a.metrics.wrongRegion.WithLabelValues(ns).Inc()
	return &WrongRegionError{Namespace: ns, Region: region, Served: a.region, Endpoint: a.regionEndpoints[region]}
}
