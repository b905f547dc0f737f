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
//
// And lockd's own bookkeeping of the rule: at such a grant, every waiter
// in Q has an order key created at its waiter key's revision, and the
// order keys sort as Q's create revisions do (the grant transactions
// compare order keys, not Q itself).
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
	lines := map[string]map[int64]int64{}  // lock key -> session -> waiter key's create revision
	orders := map[string]map[int64]order{} // lock key -> session -> its order key
	durable := map[string]bool{}           // lock keys that had a line
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
			if why := disagree(q, orders[key]); why != "" {
				res.Violations = append(res.Violations, fmt.Sprintf("revision %d: %s granted while its order keys disagree with its line: %s (%s)",
					rev, key, why, describe(q)))
			}
		}
		// Then the line's changes of this revision.
		for _, ev := range group {
			if key, session, ok := orderKey(string(ev.Kv.Key)); ok {
				if orders[key] == nil {
					orders[key] = map[int64]order{}
				}
				if ev.Type == clientv3.EventTypePut {
					orders[key][session] = order{name: string(ev.Kv.Key), rev: ev.Kv.CreateRevision}
				} else {
					delete(orders[key], session)
				}
				continue
			}
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

// order is a waiter's order key: its name and create revision.
type order struct {
	name string
	rev  int64
}

// orderKey parses an order key into its lock key and session.
func orderKey(k string) (string, int64, bool) {
	rest, ok := strings.CutPrefix(k, keyspace.QueuePrefix)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, keyspace.QueueOrderSep)
	if i < 0 {
		return "", 0, false
	}
	_, hex, ok := strings.Cut(rest[i+1:], ".")
	s, err := strconv.ParseUint(hex, 16, 64)
	if !ok || err != nil {
		return "", 0, false
	}
	return rest[:i], int64(s), true
}

// disagree says how the order keys ords fail to match line q (session ->
// waiter key's create revision): a waiter without an order key of its own
// revision, or order keys sorting otherwise than the create revisions.
func disagree(q map[int64]int64, ords map[int64]order) string {
	type w struct {
		s   int64
		rev int64
		ord string
	}
	var ws []w
	for s, r := range q {
		o, ok := ords[s]
		if !ok || o.rev != r {
			return fmt.Sprintf("session %x's waiter key (revision %d) has no order key of that revision", s, r)
		}
		ws = append(ws, w{s, r, o.name})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].rev < ws[j].rev })
	for i := 1; i < len(ws); i++ {
		if ws[i].ord <= ws[i-1].ord {
			return fmt.Sprintf("session %x joined after session %x but its order key %s sorts before %s",
				ws[i].s, ws[i-1].s, ws[i].ord, ws[i-1].ord)
		}
	}
	return ""
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
