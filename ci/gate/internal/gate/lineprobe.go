package gate

import (
	"context"
	"time"

	"github.com/lockd-dev/lockd/pkg/client"
)

// The line probe. The durable-line check (linecheck, on etcd's own history)
// can only catch a release handing a durable key to the wrong waiter when
// two waiters stand in one lockd's line at the release, which the workers
// make only now and then. So each round the gate makes it: it holds
// lineProbeKey through one lockd (as Mover), puts Prober and then Prober2
// in that lockd's line for it, half a second apart, and releases. The head
// (Prober) must be granted first; the check reads the order from etcd.

const lineProbeKey = Namespace + "/d/line-probe"

// Prober2 is the second waiter of the line probe.
const Prober2 = "spiffe://gate.local/prober-2"

// LineProbe counts the line probe's rounds.
type LineProbe struct {
	// Rounds counts the releases made with two waiters in line; Skipped
	// the rounds the gate could not hold the key for.
	Rounds  int `json:"rounds"`
	Skipped int `json:"skipped"`
}

// probeLine is one round of the line probe through the round's lockd.
func (r *run) probeLine(ctx context.Context, round int, res *LineProbe) {
	a := r.arbiters[round%len(r.arbiters)]
	clients := make([]*client.Client, 3)
	for i, id := range []string{Mover, Prober, Prober2} {
		c, err := client.New(client.WithTarget(a.Addr), client.WithInsecureIdentity(id))
		if err != nil {
			res.Skipped++
			return
		}
		defer func() { _ = c.Close() }()
		clients[i] = c
	}
	hctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	held, err := clients[0].Acquire(hctx, lineProbeKey, "", func(*client.Lock) {}, client.Wait(5*time.Second))
	cancel()
	if err != nil {
		res.Skipped++
		r.logf("gate: line probe through %s skipped: holding %s: %v", a.Name, lineProbeKey, err)
		return
	}
	done := make(chan struct{}, 2)
	for _, c := range clients[1:] {
		go func() {
			defer func() { done <- struct{}{} }()
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if l, err := c.Acquire(wctx, lineProbeKey, "", func(*client.Lock) {}, client.Wait(8*time.Second)); err == nil {
				release(l)
			}
		}()
		time.Sleep(500 * time.Millisecond) // in line before the next joins
	}
	release(held)
	<-done
	<-done
	res.Rounds++
}
