package check

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// LateUnit is a hold whose unit of work (a supervised child) was still
// running when a later holder of its key started a write.
type LateUnit struct {
	Key        string `json:"key"`
	Token      uint64 `json:"token"`
	Gone       int64  `json:"gone"`
	Writer     int    `json:"writer"`
	WriteSeq   int64  `json:"writeSeq"`
	WriteToken uint64 `json:"writeToken"`
	WriteCall  int64  `json:"writeCall"`
}

// checkGone checks that every hold whose unit of work ran as a supervised
// child was gone before any later holder of its key started a write: for
// each token t with gone operations, the earliest is when the child
// stopped (its own last record, or the supervisor's SIGKILL), and every
// write on the key presenting a token above t must have been called after
// it. This is the client-side promise (the child is dead by the lock's
// deadline, which passes before the store can expire the session), checked
// on real time; the fence is not involved.
//
// Left out: holds whose worker the gate paused during the hold (no client
// can stop a supervisor that is not running) and holds released by force
// (a force-release may let two writers in until the holder is told).
// paused reports whether worker was paused at some time in [from, to].
func checkGone(ops []history.Op, paused func(worker int, from, to int64) bool) (checked int, late []LateUnit) {
	type hold struct {
		worker  int
		granted int64
		gone    int64
	}
	holds := map[string]map[uint64]*hold{}
	forced := map[HoldID]bool{}
	var writes []history.Op
	for _, op := range ops {
		switch {
		case op.Kind == history.Acquire && op.Outcome == history.Ok:
			if holds[op.Key] == nil {
				holds[op.Key] = map[uint64]*hold{}
			}
			if h := holds[op.Key][op.Token]; h != nil {
				h.worker, h.granted = op.Worker, op.Return
			} else {
				holds[op.Key][op.Token] = &hold{worker: op.Worker, granted: op.Return}
			}
		case op.Kind == history.Force && op.Outcome == history.Ok:
			forced[HoldOf(op.Key, op.Token)] = true
		case op.Kind == history.Write:
			writes = append(writes, op)
		}
	}
	for _, op := range ops {
		if op.Kind != history.Gone {
			continue
		}
		if holds[op.Key] == nil {
			holds[op.Key] = map[uint64]*hold{}
		}
		h := holds[op.Key][op.Token]
		if h == nil {
			h = &hold{worker: -1}
			holds[op.Key][op.Token] = h
		}
		if h.gone == 0 || op.Call < h.gone {
			h.gone = op.Call
		}
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].Call < writes[j].Call })
	keys := make([]string, 0, len(holds))
	for k := range holds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		toks := make([]uint64, 0, len(holds[key]))
		for t := range holds[key] {
			toks = append(toks, t)
		}
		sort.Slice(toks, func(i, j int) bool { return toks[i] < toks[j] })
		for _, t := range toks {
			h := holds[key][t]
			if h.gone == 0 || forced[HoldOf(key, t)] || (h.worker >= 0 && paused(h.worker, h.granted, h.gone)) {
				continue
			}
			checked++
			for _, w := range writes {
				if w.Call >= h.gone {
					break
				}
				if w.Key == key && w.Token > t {
					late = append(late, LateUnit{Key: key, Token: t, Gone: h.gone, Writer: w.Worker, WriteSeq: w.Seq,
						WriteToken: w.Token, WriteCall: w.Call})
					break
				}
			}
		}
	}
	return checked, late
}

// PausedWorkers turns the gate's worker-pause faults into the paused
// predicate checkGone needs (targets are "worker-N").
func PausedWorkers(faults []history.Fault) func(worker int, from, to int64) bool {
	return func(worker int, from, to int64) bool {
		for _, f := range faults {
			n, ok := strings.CutPrefix(f.Target, "worker-")
			if f.Kind != "worker-pause" || !ok {
				continue
			}
			if id, err := strconv.Atoi(n); err == nil && id == worker && f.Start <= to && f.End >= from {
				return true
			}
		}
		return false
	}
}

func describeLate(u LateUnit) string {
	return fmt.Sprintf("the child of hold %s on key %q was still running %.3fs after w%d started writing with the later token %s (op %d)",
		FormatToken(u.Token), u.Key, float64(u.Gone-u.WriteCall)/1e9, u.Writer, FormatToken(u.WriteToken), u.WriteSeq)
}
