package gate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/check"
	"github.com/lockd-dev/lockd/pkg/client"
)

// The batch probe. lockd commits concurrent grants of different keys in one
// etcd transaction, each key with its own compares; a key refused in a
// batch must stay refused while the others of the batch are granted. The
// workers rarely make bursts wide enough to test that, so the gate makes
// them: every batchEvery it holds batchHeld through one lockd (as Mover),
// then asks that lockd, as Prober and all at once, for batchBurst free keys
// and the held one, placed at a different position each round. The held key
// granted is a violation; the rest are released at once.

const (
	batchPrefix = Namespace + "/batch/"
	batchHeld   = batchPrefix + "held"
	batchBurst  = 32
	batchEvery  = 10 * time.Second
)

// BatchResult is what the batch probe saw.
type BatchResult struct {
	// Rounds counts the bursts sent; Refused those in which the held key
	// was refused while other keys of the burst were granted; Granted the
	// other keys' grants over all bursts.
	Rounds  int `json:"rounds"`
	Refused int `json:"refused"`
	Granted int `json:"granted"`
	// Skipped counts rounds the gate could not hold the key for (a fault,
	// a move): no burst was sent.
	Skipped int `json:"skipped"`
	// Details are the violations: the held key granted in a burst.
	Details []string `json:"details,omitempty"`
}

// probeBatches runs the batch probe and the line probe (lineprobe.go)
// until ctx ends.
func (r *run) probeBatches(ctx context.Context, res *BatchResult, line *LineProbe) {
	t := time.NewTimer(3 * time.Second)
	defer t.Stop()
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.probeBatch(ctx, round, res)
		r.probeLine(ctx, round, line)
		t.Reset(batchEvery)
	}
}

// probeBatch is one round of the batch probe, through the round's lockd.
func (r *run) probeBatch(ctx context.Context, round int, res *BatchResult) {
	a := r.arbiters[round%len(r.arbiters)]
	skip := func(err error) {
		res.Skipped++
		r.logf("gate: batch probe through %s skipped: %v", a.Name, err)
	}
	hc, err := client.New(client.WithTarget(a.Addr), client.WithInsecureIdentity(Mover))
	if err != nil {
		skip(err)
		return
	}
	defer func() { _ = hc.Close() }()
	hctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	held, err := hc.Acquire(hctx, batchHeld, "", func(*client.Lock) {}, client.Wait(5*time.Second))
	cancel()
	if err != nil {
		skip(fmt.Errorf("holding %s: %w", batchHeld, err))
		return
	}
	defer release(held)
	pc, err := client.New(client.WithTarget(a.Addr), client.WithInsecureIdentity(Prober))
	if err != nil {
		skip(err)
		return
	}
	defer func() { _ = pc.Close() }()

	keys := make([]string, 0, batchBurst+1)
	for i := range batchBurst {
		keys = append(keys, fmt.Sprintf("%s%02d", batchPrefix, i))
	}
	at := (round * 7) % (batchBurst + 1)
	keys = append(keys[:at], append([]string{batchHeld}, keys[at:]...)...)
	locks := make([]*client.Lock, len(keys))
	start := make(chan struct{})
	var wg sync.WaitGroup
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, k := range keys {
		wg.Go(func() {
			<-start
			locks[i], _ = pc.Acquire(bctx, k, "", func(*client.Lock) {})
		})
	}
	close(start)
	wg.Wait()
	res.Rounds++
	granted := 0
	for i, l := range locks {
		if l == nil {
			continue
		}
		if keys[i] == batchHeld {
			res.Details = append(res.Details, fmt.Sprintf("%s granted %s to %s in a burst of %d (token %s) while the gate held it (token %s)",
				a.Name, batchHeld, Prober, len(keys), check.FormatToken(l.Token()), check.FormatToken(held.Token())))
		} else {
			granted++
		}
		release(l)
	}
	res.Granted += granted
	if locks[at] == nil && granted > 0 {
		res.Refused++
	}
	r.logf("gate: batch probe through %s: %s held, %d of %d other keys granted, the held one %s",
		a.Name, batchHeld, granted, batchBurst, map[bool]string{true: "GRANTED", false: "refused"}[locks[at] != nil])
}

// release releases l, bounded.
func release(l *client.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.Release(ctx)
}
