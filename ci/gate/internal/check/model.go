package check

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// infinity is the return time given to an operation whose outcome is
// unknown: its effect may take place at any time after its call, even after
// every other operation, as in etcd's robustness tests.
const infinity = math.MaxInt64

// revisionBits is how many low bits of a fencing token hold the etcd
// revision; the bits above hold the epoch.
const revisionBits = 48

// FormatToken renders a fencing token as epoch:revision, e.g. 1:42 for
// 1<<48 | 42.
func FormatToken(t uint64) string {
	return fmt.Sprintf("%d:%d", t>>revisionBits, t&(1<<revisionBits-1))
}

// opInput is the porcupine input of every operation of both models. The
// output is the operation's history.Outcome.
type opInput struct {
	kind   history.Kind
	worker int
	seq    int64
	key    string
	token  uint64
	value  int64
	fence  uint64
}

func inputOf(op history.Op) opInput {
	return opInput{
		kind:   op.Kind,
		worker: op.Worker,
		seq:    op.Seq,
		key:    op.Key,
		token:  op.Token,
		value:  op.Value,
		fence:  op.Fence,
	}
}

// lockState is one key's state in the lock model.
type lockState struct {
	// last is the largest token granted so far.
	last uint64
	// holder is the token believed to hold the key, 0 for none.
	holder uint64
	// forced are tokens released by force whose holders have not yet been
	// told (no lost operation yet), sorted, comma-separated: until told, a
	// forced holder's check is legal, even after a newer grant.
	forced string
}

func (s lockState) isForced(tok uint64) bool {
	return slices.Contains(strings.Split(s.forced, ","), strconv.FormatUint(tok, 10))
}

func (s lockState) withForced(tok uint64, add bool) lockState {
	var ts []string
	if s.forced != "" {
		ts = strings.Split(s.forced, ",")
	}
	t := strconv.FormatUint(tok, 10)
	ts = slices.DeleteFunc(ts, func(x string) bool { return x == t })
	if add {
		ts = append(ts, t)
		slices.Sort(ts)
	}
	s.forced = strings.Join(ts, ",")
	return s
}

// storeState is one key's fenced store.
type storeState struct {
	fence uint64
	value int64
}

// lockModel is the lock service's sequential specification, per key.
func lockModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() interface{} { return lockState{} },
		Step:      lockStep,
		Equal:     func(a, b interface{}) bool { return a.(lockState) == b.(lockState) },
		Hash: func(s interface{}) uint64 {
			st := s.(lockState)
			return st.last*0x9e3779b97f4a7c15 ^ st.holder ^ uint64(len(st.forced))<<56
		},
		DescribeOperation: describeOp,
		DescribeState: func(s interface{}) string {
			st := s.(lockState)
			holder := "none"
			if st.holder != 0 {
				holder = FormatToken(st.holder)
			}
			d := fmt.Sprintf("last=%s holder=%s", FormatToken(st.last), holder)
			if st.forced != "" {
				var fs []string
				for _, f := range strings.Split(st.forced, ",") {
					t, _ := strconv.ParseUint(f, 10, 64)
					fs = append(fs, FormatToken(t))
				}
				d += " forced-untold=" + strings.Join(fs, ",")
			}
			return d
		},
		DescribeOperationMetadata: describeMetadata,
	}
}

// lockStep: an acquire must grant a token above every earlier grant and
// makes it the holder (an earlier holder's lease may have expired unseen);
// a check that returned true, a re-entrant acquire, and a release that
// lockd performed are legal only for the current holder. A force-release
// ends the current holder's hold; that holder may still check until it is
// told (its lost operation), and not after. Failed and unknown operations
// impose nothing.
func lockStep(state, input, output interface{}) (bool, interface{}) {
	s := state.(lockState)
	in := input.(opInput)
	if output.(history.Outcome) != history.Ok {
		return true, s
	}
	switch in.kind {
	case history.Acquire:
		if in.token <= s.last {
			return false, s
		}
		s.last, s.holder = in.token, in.token
		return true, s
	case history.Check, history.Reenter:
		return (s.holder != 0 && in.token == s.holder) || s.isForced(in.token), s
	case history.Release:
		if s.holder == 0 || in.token != s.holder {
			return false, s
		}
		s.holder = 0
		return true, s
	case history.Force:
		if s.holder == 0 || in.token != s.holder {
			return false, s
		}
		s.holder = 0
		return true, s.withForced(in.token, true)
	case history.Lost:
		return true, s.withForced(in.token, false)
	}
	return false, s
}

// storeModel is the fenced store's sequential specification, per key.
func storeModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() interface{} { return storeState{} },
		Step:      storeStep,
		Equal:     func(a, b interface{}) bool { return a.(storeState) == b.(storeState) },
		Hash: func(s interface{}) uint64 {
			st := s.(storeState)
			return st.fence*0x9e3779b97f4a7c15 ^ uint64(st.value)
		},
		DescribeOperation: describeOp,
		DescribeState: func(s interface{}) string {
			st := s.(storeState)
			return fmt.Sprintf("fence=%s value=%d", FormatToken(st.fence), st.value)
		},
		DescribeOperationMetadata: describeMetadata,
	}
}

// storeStep: a write presenting a token above the fence must be accepted
// and one at or below it must be rejected; an unknown write takes effect by
// the same rule wherever it is linearized. A read must return the stored fence and value.
func storeStep(state, input, output interface{}) (bool, interface{}) {
	s := state.(storeState)
	in := input.(opInput)
	out := output.(history.Outcome)
	switch in.kind {
	case history.Write:
		accept := in.token > s.fence
		next := s
		if accept {
			next = storeState{fence: in.token, value: in.value}
		}
		switch out {
		case history.Ok:
			return accept, next
		case history.Fail:
			return !accept, s
		default:
			return true, next
		}
	case history.Read:
		if out != history.Ok {
			return true, s
		}
		return in.fence == s.fence && in.value == s.value, s
	}
	return false, s
}

// describeOp renders an operation for the visualisation and for Details,
// e.g. "w3 acquire k1 → 1:42" or "w3 check k1 1:42 → true".
func describeOp(input, output interface{}) string {
	in := input.(opInput)
	out := output.(history.Outcome)
	head := fmt.Sprintf("w%d %s %s", in.worker, in.kind, in.key)
	var arg, res string
	switch in.kind {
	case history.Acquire:
		res = map[history.Outcome]string{history.Ok: FormatToken(in.token), history.Fail: "refused"}[out]
	case history.Check:
		arg = FormatToken(in.token)
		res = map[history.Outcome]string{history.Ok: "true", history.Fail: "false"}[out]
	case history.Release:
		arg = FormatToken(in.token)
		res = map[history.Outcome]string{history.Ok: "released", history.Fail: "stale"}[out]
	case history.Write:
		arg = fmt.Sprintf("%s v=%d", FormatToken(in.token), in.value)
		res = map[history.Outcome]string{history.Ok: "accepted", history.Fail: "rejected"}[out]
	case history.Read:
		res = map[history.Outcome]string{
			history.Ok:   fmt.Sprintf("%s v=%d", FormatToken(in.fence), in.value),
			history.Fail: "fail",
		}[out]
	case history.Reenter:
		arg = FormatToken(in.token)
		res = map[history.Outcome]string{history.Ok: "held", history.Fail: "refused"}[out]
	case history.Force, history.Lost, history.Gone, history.Unhold:
		arg = FormatToken(in.token)
		res = map[history.Outcome]string{history.Ok: "done"}[out]
	}
	if res == "" {
		res = "?"
	}
	if arg != "" {
		return fmt.Sprintf("%s %s → %s", head, arg, res)
	}
	return fmt.Sprintf("%s → %s", head, res)
}

func describeMetadata(meta interface{}) string {
	if meta == nil {
		return ""
	}
	return fmt.Sprint(meta)
}

// partitionByKey splits a history into one sub-history per key, in key
// order, each keeping the order of the operations it was given.
func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	groups := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range ops {
		k := op.Input.(opInput).key
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], op)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = groups[k]
	}
	return out
}

// assignClients sets the porcupine client ids of ops, which must be ordered
// by call time. Workers get dense ids 0..n-1 in worker order; an operation
// that would overlap its worker's previous one (an unknown operation, whose
// return is infinity, or a worker that ran operations concurrently) gets a
// fresh id above them, since a porcupine client's operations must not
// overlap for the visualisation.
func assignClients(ops []porcupine.Operation) {
	var workers []int
	dense := map[int]int{}
	for _, op := range ops {
		w := op.Input.(opInput).worker
		if _, ok := dense[w]; !ok {
			dense[w] = 0
			workers = append(workers, w)
		}
	}
	sort.Ints(workers)
	for i, w := range workers {
		dense[w] = i
	}
	next := len(workers)
	end := make([]int64, len(workers))
	used := make([]bool, len(workers))
	for i := range ops {
		w := dense[ops[i].Input.(opInput).worker]
		if ops[i].Return == infinity || (used[w] && ops[i].Call < end[w]) {
			ops[i].ClientId = next
			next++
			continue
		}
		ops[i].ClientId = w
		used[w] = true
		end[w] = ops[i].Return
	}
}

// describeOps renders up to limit operations, separated by "; ".
func describeOps(ops []porcupine.Operation, limit int) string {
	var parts []string
	for i, op := range ops {
		if i == limit {
			parts = append(parts, fmt.Sprintf("and %d more", len(ops)-limit))
			break
		}
		parts = append(parts, describeOp(op.Input, op.Output))
	}
	return strings.Join(parts, "; ")
}
