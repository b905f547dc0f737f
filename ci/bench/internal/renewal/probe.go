package renewal

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
	"github.com/lockd-dev/lockd/ci/bench/internal/rig"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// The grant probe: after the steady state, while every hold is still kept
// alive, a few holders take and give back keys of their own, so the run
// measures what a grant costs beside the renewal load, not only that
// renewals hold. It runs after the steady window, whose consensus writes
// must be renewals' (none).
const (
	// ProbeWorkers take keys side by side, each on a session of its own
	// (renewed by the keeper like every other).
	ProbeWorkers = 4
	// probePause is each worker's pause between a release and its next
	// acquire: about 100 grants a second from four workers, ordinary
	// traffic rather than a load test of its own.
	probePause = 30 * time.Millisecond
)

// probe is the grant probe's sessions and what it measured.
type probe struct {
	refs []*sessionRef

	mu   sync.Mutex
	lat  []time.Duration
	errs int
	// first is the first refusal or failure, for the notes.
	first string
}

// probeWindow runs the grant probe for cfg.ProbeFor and records its
// figures in res.
func (r *run) probeWindow(ctx context.Context, res *result.Renewal) {
	d := r.cfg.ProbeFor
	if d == 0 {
		d = r.cfg.Steady / 2
	}
	pr, err := r.startProbe(ctx)
	if err != nil {
		r.notef("no grant probe: %v", err)
		return
	}
	fmt.Fprintf(r.log, "renewal: %d holders taking keys beside the renewals for %s\n", ProbeWorkers, d)
	pctx, stop := context.WithTimeout(ctx, d)
	t0 := time.Now()
	pr.run(pctx, r)
	stop()
	took := time.Since(t0)
	pr.close(context.WithoutCancel(ctx), r)
	res.ProbeFor, res.ProbeGrants, res.ProbeErrors = took, len(pr.lat), pr.errs
	if len(pr.lat) > 0 {
		q := quantilesOf(pr.lat, 0.5, 0.99, 1)
		res.ProbeP50, res.ProbeP99, res.ProbeMax = q[0], q[1], q[2]
	}
	r.notef("beside the renewals: %d grants in %s (%.0f/s), p50 %s, p99 %s, max %s; %d failed%s", res.ProbeGrants,
		took.Round(time.Millisecond), float64(res.ProbeGrants)/took.Seconds(), res.ProbeP50, res.ProbeP99, res.ProbeMax, pr.errs, firstNote(pr.first))
}

// startProbe opens the probe's sessions (each renewed by the keeper). The
// workers do not start until run.
func (r *run) startProbe(ctx context.Context) (*probe, error) {
	p := &probe{}
	for i := range ProbeWorkers {
		ident := i % r.cfg.Identities
		id, err := r.openSession(ctx, ident)
		if err != nil {
			return nil, fmt.Errorf("renewal: open a probe session: %s", describe(err))
		}
		s := &session{idx: -1 - i, id: id}
		r.k.add(ident, s)
		p.refs = append(p.refs, &sessionRef{ident: ident, s: s})
	}
	return p, nil
}

// run takes and releases keys until ctx ends, recording each grant's
// latency (acquire sent to grant answered).
func (p *probe) run(ctx context.Context, r *run) {
	var wg sync.WaitGroup
	for i, ref := range p.refs {
		wg.Go(func() {
			key := fmt.Sprintf("%sprobe/%d", r.prefix, i)
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				resp, err := r.client(ref.ident).Acquire(r.as(cctx, ref.ident), &lockv1.AcquireRequest{
					SessionId: ref.s.id, Key: key, Class: rig.Class, Wait: durationpb.New(5 * time.Second)})
				d := time.Since(t0)
				if err == nil {
					_, err = r.client(ref.ident).Release(r.as(cctx, ref.ident), &lockv1.ReleaseRequest{
						SessionId: ref.s.id, Key: key, Token: resp.GetToken().GetValue()})
				}
				cancel()
				p.mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil:
					p.errs++
					if p.first == "" {
						p.first = describe(err)
					}
				case err == nil:
					p.lat = append(p.lat, d)
				}
				p.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(probePause):
				}
			}
		})
	}
	wg.Wait()
}

// close closes the probe's sessions.
func (p *probe) close(ctx context.Context, r *run) {
	for _, ref := range p.refs {
		r.k.close(ref.ident, ref.s)
		_ = retry(ctx, func(ctx context.Context) error {
			_, err := r.client(ref.ident).CloseSession(r.as(ctx, ref.ident), &lockv1.CloseSessionRequest{SessionId: ref.s.id})
			return err
		})
	}
}

// quantilesOf is the qs quantiles of lat (sorted in place).
func quantilesOf(lat []time.Duration, qs ...float64) []time.Duration {
	slices.Sort(lat)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = lat[min(int(q*float64(len(lat))), len(lat)-1)]
	}
	return out
}

// firstNote is ", the first: <why>" when why is set.
func firstNote(why string) string {
	if why == "" {
		return ""
	}
	return "; the first: " + why
}
