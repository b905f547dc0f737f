// Package linecheck checks durable fairness on etcd's own history: a key
// with a durable line is granted only to the head of that line. It reads
// every change to holds (/l/) and waiter keys (/q/) from revision 1, so
// it needs a store that was never compacted (the gate never compacts), and
// it checks each store's life on its own (a restore or a rebuild starts a
// new one; the gate reads the old one just before).
//
// The rule, at every revision r that puts a hold on key k for session s:
// let Q be k's waiter keys just before r. If s has a waiter key in Q, no
// key in Q was created before it (s is the head); if s has none, Q is
// empty (nobody jumps a live durable waiter). Waiter keys live on their
// sessions' leases, so Q holds only live waiters.
package linecheck

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/keyspace"
)

// Life is one store's history of holds and waiter keys, in revision
// order.
type Life struct {
	// Rev is the store's revision when it was read.
	Rev    int64
	Events []*clientv3.Event
}

// Read reads the store's history of holds and waiter keys up to its
// current revision.
func Read(ctx context.Context, cli *clientv3.Client) (Life, error) {
	resp, err := cli.Get(ctx, keyspace.EpochKey)
	if err != nil {
		return Life{}, fmt.Errorf("linecheck: %w", err)
	}
	life := Life{Rev: resp.Header.Revision}
	if life.Rev <= 1 {
		return life, nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every revision changes at least one key, and every key lockd and the
	// gate write starts with "/": the watch from 1 delivers an event for
	// each revision up to Rev.
	for wr := range cli.Watch(wctx, "/", clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := wr.Err(); err != nil {
			return Life{}, fmt.Errorf("linecheck: reading the history: %w", err)
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision > life.Rev {
				return life, nil
			}
			k := string(ev.Kv.Key)
			if strings.HasPrefix(k, keyspace.HoldPrefix) || strings.HasPrefix(k, keyspace.QueuePrefix) {
				life.Events = append(life.Events, ev)
			}
			if ev.Kv.ModRevision == life.Rev {
				return life, nil
			}
		}
	}
	return Life{}, fmt.Errorf("linecheck: the history watch ended before revision %d: %w", life.Rev, ctx.Err())
}

// Result is what Check found.
type Result struct {
	// Grants are the holds put on keys that had a durable line at some
	// point of the life; Contested, those put while the line was not
	// empty (the ones the rule constrains).
	Grants     int      `json:"grants"`
	Contested  int      `json:"contested"`
	Violations []string `json:"violations,omitempty"`
}

// Add adds another life's result.
func (r *Result) Add(o Result) {
	r.Grants += o.Grants
	r.Contested += o.Contested
	r.Violations = append(r.Violations, o.Violations...)
}

// Check applies the rule to one life.
func Check(life Life) Result {
	var res Result
	lines := map[string]map[int64]int64{} // lock key -> session -> waiter key's create revision
	durable := map[string]bool{}          // lock keys that had a line
	for i := 0; i < len(life.Events); {
		rev := life.Events[i].Kv.ModRevision
		j := i
		for j < len(life.Events) && life.Events[j].Kv.ModRevision == rev {
			j++
		}
		group := life.Events[i:j]
		// The grants of this revision, against the line before it.
		for _, ev := range group {
			key, ok := strings.CutPrefix(string(ev.Kv.Key), keyspace.HoldPrefix)
			if !ok || ev.Type != clientv3.EventTypePut || !durable[key] {
				continue
			}
			res.Grants++
			q := lines[key]
			if len(q) == 0 {
				continue
			}
			res.Contested++
			mine, inLine := q[ev.Kv.Lease]
			if !inLine {
				res.Violations = append(res.Violations, fmt.Sprintf("revision %d: %s granted to session %x, not in its durable line of %d live waiters (%s)",
					rev, key, ev.Kv.Lease, len(q), describe(q)))
				continue
			}
			for s, r := range q {
				if r < mine {
					res.Violations = append(res.Violations, fmt.Sprintf("revision %d: %s granted to session %x (in line since revision %d) while session %x, in line since revision %d, was ahead (%s)",
						rev, key, ev.Kv.Lease, mine, s, r, describe(q)))
				}
			}
		}
		// Then the line's changes of this revision.
		for _, ev := range group {
			key, session, ok := waiter(string(ev.Kv.Key))
			if !ok {
				continue
			}
			durable[key] = true
			if lines[key] == nil {
				lines[key] = map[int64]int64{}
			}
			if ev.Type == clientv3.EventTypePut {
				lines[key][session] = ev.Kv.CreateRevision
			} else {
				delete(lines[key], session)
			}
		}
		i = j
	}
	return res
}

// waiter parses a waiter key into its lock key and session.
func waiter(k string) (string, int64, bool) {
	rest, ok := strings.CutPrefix(k, keyspace.QueuePrefix)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, keyspace.QueueSep)
	if i < 0 {
		return "", 0, false
	}
	s, err := strconv.ParseUint(rest[i+1:], 16, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], int64(s), true
}

// describe lists a line as "session@revision" in order.
func describe(q map[int64]int64) string {
	type w struct{ s, r int64 }
	var ws []w
	for s, r := range q {
		ws = append(ws, w{s, r})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].r < ws[j].r })
	parts := make([]string, len(ws))
	for i, x := range ws {
		parts[i] = fmt.Sprintf("%x@%d", x.s, x.r)
	}
	return strings.Join(parts, " ")
}
