package cost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// PromQL queries over lockd's metrics.
const (
	// SessionsQuery counts open sessions by namespace. Every arbiter exports
	// the same store-wide gauge, so take the max, not the sum.
	SessionsQuery = `max by (namespace) (lockd_sessions)`
	// WaitRatesQuery is the rate of acquires that queued, by class, over 5
	// minutes; each arbiter counts its own, so sum them.
	WaitRatesQuery = `sum by (namespace, class) (rate(lockd_waits_total[5m]))`
	// GrantsQuery is the holds granted in the last 24 hours, by class.
	GrantsQuery = `sum by (namespace, class) (increase(lockd_grants_total[24h]))`
)

// ErrUnreachable: Prometheus could not be reached or could not answer: the
// connection was refused, the name did not resolve, the query timed out, or
// the server answered with a 5xx. Errors wrapping it name the URL; test for
// it with errors.Is.
var ErrUnreachable = errors.New("cannot reach Prometheus")

// Prometheus is a [Source] that queries a Prometheus server scraping lockd.
type Prometheus struct {
	url string
	api v1.API
}

// NewPrometheus returns a Source for the Prometheus server at rawURL (for
// example http://prometheus:9090). It does not contact the server.
func NewPrometheus(rawURL string) (*Prometheus, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("cost: Prometheus URL %q: want an http(s) URL such as http://prometheus:9090", rawURL)
	}
	c, err := api.NewClient(api.Config{Address: rawURL})
	if err != nil {
		return nil, fmt.Errorf("cost: Prometheus client for %s: %w", rawURL, err)
	}
	return &Prometheus{url: rawURL, api: v1.NewAPI(c)}, nil
}

// URL is the server's address.
func (p *Prometheus) URL() string { return p.url }

// Sessions runs [SessionsQuery].
func (p *Prometheus) Sessions(ctx context.Context) (map[string]float64, error) {
	v, err := p.query(ctx, SessionsQuery)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(v))
	for _, s := range v {
		out[string(s.Metric["namespace"])] = float64(s.Value)
	}
	return out, nil
}

// WaitRates runs [WaitRatesQuery].
func (p *Prometheus) WaitRates(ctx context.Context) (map[Key]float64, error) {
	return p.byClass(ctx, WaitRatesQuery)
}

// Grants runs [GrantsQuery]: holds granted in the last 24 hours by class.
// Prometheus extrapolates increase() to the window, so counts need not be
// whole numbers.
func (p *Prometheus) Grants(ctx context.Context) (map[Key]float64, error) {
	return p.byClass(ctx, GrantsQuery)
}

func (p *Prometheus) byClass(ctx context.Context, q string) (map[Key]float64, error) {
	v, err := p.query(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make(map[Key]float64, len(v))
	for _, s := range v {
		out[Key{Namespace: string(s.Metric["namespace"]), Class: string(s.Metric["class"])}] = float64(s.Value)
	}
	return out, nil
}

// query runs an instant query that must return a vector.
func (p *Prometheus) query(ctx context.Context, q string) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	val, _, _, err := p.api.Query(ctx, q, time.Time{}) // zero: the server's now
	if err != nil {
		if unreachable(err) {
			return nil, fmt.Errorf("cost: query Prometheus at %s: %w (check --prometheus and that the server is up): %w", p.url, ErrUnreachable, err)
		}
		return nil, fmt.Errorf("cost: query Prometheus at %s: %w (check --prometheus and that the server is up)", p.url, err)
	}
	v, ok := val.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("cost: query Prometheus at %s: %q returned a %s, want a vector", p.url, q, val.Type())
	}
	return v, nil
}

// unreachable reports whether a query got no usable answer: the transport
// failed (the HTTP client's *url.Error, a net.Error, the query's deadline)
// or the API client classed the answer as a server error or a timeout. It
// reads error types, never their text.
func unreachable(err error) bool {
	var ae *v1.Error
	if errors.As(err, &ae) {
		return ae.Type == v1.ErrServer || ae.Type == v1.ErrTimeout
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}
