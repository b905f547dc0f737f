// Package check decides whether a release gate's recorded history (package
// history) is consistent with what lockd promises, using the porcupine
// linearizability checker.
//
// It checks four things:
//
//   - The lock model, per key, over the acquire, check and release
//     operations: every grant's fencing token is larger than every grant
//     linearized before it, and a holder's CanStart() returns true, and lockd
//     releases a hold, only for the latest grant. A check that returned true
//     for an older token after a newer grant is two holders at once.
//   - The fenced store model, per key, over the reads and writes of the
//     PostgreSQL row each key guards: a write presenting a token above the
//     row's fence is accepted, one at or below it is rejected, and a read
//     returns the last accepted write. An accepted stale write is the
//     violation the gate's negative control must produce.
//   - Token uniqueness: no two granted acquires, on any keys, carry the same
//     token.
//   - Quorum loss (quorum.go): while two members are stopped, closed classes
//     grant nothing and open ones only unprotected grants (token 0), which
//     are in neither model; no consensus grant of a key commits while an
//     unprotected holder of it has not been told its lock ended; an
//     unprotected lock stays usable while the outage lasts; and an Acquire
//     naming a class that does not own the key is refused, with quorum and
//     without.
//
// What it does not check: the lock model cannot see lease expiry, so an
// acquire over a key that is still held is allowed (the earlier holder is
// taken to have expired silently); two holders at once show only when the
// older holder later checks (or releases) and is told it still holds the key.
// A holder that never checks again after a newer grant goes unseen by the
// lock model; the store model still catches any write it gets accepted.
// Refusals (a failed acquire, a check that returned false) are always legal:
// the gate checks safety, not liveness or lease durations. An acquire whose
// outcome is unknown is assumed to have granted nothing anyone used. Tokens
// of different keys are compared only for equality, not for order.
//
// Operations whose outcome is unknown never returned: they get an infinite
// return time, so they can take effect anywhere after their call. Lock
// operations that failed or are unknown, and reads that failed or are
// unknown, change no state and are always legal in the models, so they are
// left out of the checked histories; this changes no verdict and keeps the
// search small.
package check

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// Options configures Run.
type Options struct {
	// Timeout bounds each model's check; 0 means no bound. A check that
	// times out is inconclusive, which the gate treats as a failure. The
	// visualisation of a failed model is computed by a second check with the
	// same bound.
	Timeout time.Duration
	// ArtifactsDir is where the HTML visualisations of failed models are
	// written (lock.html, store.html); empty writes none.
	ArtifactsDir string
	// Faults are drawn on the visualisation's timeline, in the history's
	// monotonic time; worker-pause faults also exempt the paused worker's
	// holds from the gone check, and quorum-loss faults are the outages the
	// quorum check holds grants to.
	Faults []history.Fault
	// OpenKeys are the keys taken under a class with onQuorumLoss: open;
	// every other key's class is closed.
	OpenKeys []string
	// OpenTTL is the open class's TTL: an unprotected lock's keepalives go
	// out every OpenTTL/3.
	OpenTTL time.Duration
	// ClusterOf names the etcd cluster serving a key, in a run on more than
	// one: a quorum loss of one cluster holds only its keys' grants. Nil:
	// one cluster serves every key. See ClusterOf.
	ClusterOf ClusterOf
}

// Grant identifies one granted acquire.
type Grant struct {
	Worker int    `json:"worker"`
	Seq    int64  `json:"seq"`
	Key    string `json:"key"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
}

// Duplicate is a token granted twice for one key: First is the earliest
// grant (by call time) carrying it, Second a later one. A token granted n
// times yields n-1 duplicates. Tokens are unique per key only: lockd's group
// commit grants the keys of one batch at one revision, so one token value.
type Duplicate struct {
	Token  uint64 `json:"token"`
	First  Grant  `json:"first"`
	Second Grant  `json:"second"`
}

// Result is the verdict on a history.
type Result struct {
	// Ops counts all operations; Acquires the acquire operations and Grants
	// those that were granted; Checks the check operations; Writes the write
	// operations, Accepted and Rejected those with an ok and a failed
	// outcome; Unknown the operations of any kind whose outcome is unknown.
	Ops      int `json:"ops"`
	Acquires int `json:"acquires"`
	Grants   int `json:"grants"`
	Checks   int `json:"checks"`
	Writes   int `json:"writes"`
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	Unknown  int `json:"unknown"`
	// Keys counts the distinct keys operated on.
	Keys int `json:"keys"`
	// Reenters, Forces and Losts count re-entrant acquires that returned the
	// held token, force-releases and locks that ended.
	Reenters int `json:"reenters"`
	Forces   int `json:"forces"`
	Losts    int `json:"losts"`
	// Unprotected counts unprotected grants (token 0, without quorum).
	Unprotected int `json:"unprotected"`
	// RetriedReleases counts releases of an earlier grant sent again while
	// the same session held the key anew, and RetriesRefused those lockd
	// refused; one that freed the newer grant is a violation.
	RetriedReleases int `json:"retried_releases,omitempty"`
	RetriesRefused  int `json:"retries_refused,omitempty"`
	// QuorumLoss is the check of grants against the quorum-loss outages.
	QuorumLoss QuorumResult `json:"quorum_loss"`
	// Revokes is the check of force-releases that revoked the session.
	Revokes RevokeResult `json:"revokes"`
	// GoneChecked counts the holds whose supervised child was checked to be
	// gone before a later holder wrote; LateUnits lists those that were not.
	GoneChecked int        `json:"gone_checked"`
	LateUnits   []LateUnit `json:"late_units,omitempty"`
	// LockModel and StoreModel are the models' porcupine verdicts:
	// "Ok", "Illegal", or "Unknown" (timed out). Illegal wins over Unknown
	// when different keys disagree.
	LockModel  string `json:"lock_model"`
	StoreModel string `json:"store_model"`
	// DuplicateTokens lists tokens granted more than once.
	DuplicateTokens []Duplicate `json:"duplicate_tokens,omitempty"`
	// Violations counts the keys whose lock history is illegal, the keys
	// whose store history is illegal, the duplicate tokens and the late
	// units.
	Violations int `json:"violations"`
	// Inconclusive counts the keys, of either model, whose check timed out.
	Inconclusive int `json:"inconclusive"`
	// Visualizations lists the HTML files written.
	Visualizations []string `json:"visualizations,omitempty"`
	// Details has one line per violation and per inconclusive key.
	Details []string `json:"details,omitempty"`
}

// Passed reports whether the history showed no violation and every check
// was conclusive.
func (r Result) Passed() bool {
	return r.Violations == 0 && r.Inconclusive == 0
}

// Run checks a history: the lock and store models per key and token
// uniqueness. ops may be in any order. It returns an error for a malformed
// history (an unknown kind or outcome, an operation without a key, a
// completed operation without a return time or returning before its call)
// and when a visualisation cannot be written; a history that breaks the
// rules is not an error but a Result with Violations.
func Run(ops []history.Op, opt Options) (Result, error) {
	var res Result
	if err := validate(ops); err != nil {
		return res, err
	}
	sorted := append([]history.Op(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Call != b.Call {
			return a.Call < b.Call
		}
		if a.Worker != b.Worker {
			return a.Worker < b.Worker
		}
		return a.Seq < b.Seq
	})

	keys := map[string]bool{}
	var lockOps, storeOps []porcupine.Operation
	for _, op := range sorted {
		res.Ops++
		keys[op.Key] = true
		switch op.Kind {
		case history.Acquire:
			res.Acquires++
			if op.Outcome == history.Ok {
				res.Grants++
			}
		case history.Check:
			res.Checks++
		case history.Write:
			res.Writes++
			switch op.Outcome {
			case history.Ok:
				res.Accepted++
			case history.Fail:
				res.Rejected++
			}
		case history.Reenter:
			if op.Outcome == history.Ok {
				res.Reenters++
			}
		case history.Force:
			if op.Outcome == history.Ok {
				res.Forces++
			}
		case history.Lost:
			res.Losts++
		case history.Unprotected:
			res.Unprotected++
		case history.RetryRelease:
			res.RetriedReleases++
			switch op.Outcome {
			case history.Ok:
				res.RetriesRefused++
			case history.Fail:
				res.Violations++
				res.Details = append(res.Details, fmt.Sprintf("%s: %s (worker %d)", op.Key, op.Err, op.Worker))
			}
		}
		if op.Outcome == history.Unknown {
			res.Unknown++
		}
		switch op.Kind {
		case history.Lost:
			if op.Outcome == history.Ok && op.Token != 0 { // token 0: an unprotected lock ended
				lockOps = append(lockOps, operation(op))
			}
		case history.Acquire, history.Check, history.Release, history.Reenter, history.Force:
			if op.Outcome == history.Ok {
				lockOps = append(lockOps, operation(op))
			}
		case history.Read:
			if op.Outcome == history.Ok {
				storeOps = append(storeOps, operation(op))
			}
		case history.Write:
			storeOps = append(storeOps, operation(op))
		}
	}
	res.Keys = len(keys)

	res.DuplicateTokens = duplicates(sorted)
	for _, d := range res.DuplicateTokens {
		res.Details = append(res.Details, fmt.Sprintf(
			"token %s granted twice: w%d acquire %q (seq %d) and w%d acquire %q (seq %d)",
			FormatToken(d.Token), d.First.Worker, d.First.Key, d.First.Seq,
			d.Second.Worker, d.Second.Key, d.Second.Seq))
	}

	var errs []error
	for _, mc := range []struct {
		name    string
		model   porcupine.Model
		ops     []porcupine.Operation
		verdict *string
	}{
		{"lock", lockModel(), lockOps, &res.LockModel},
		{"store", storeModel(), storeOps, &res.StoreModel},
	} {
		v := checkModel(mc.name, mc.model, mc.ops, opt.Timeout)
		*mc.verdict = string(v.result)
		res.Violations += v.illegal
		res.Inconclusive += v.unknown
		res.Details = append(res.Details, v.details...)
		if v.result == porcupine.Ok || opt.ArtifactsDir == "" {
			continue
		}
		path, err := visualize(mc.name, mc.model, v.bad, opt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.Visualizations = append(res.Visualizations, path)
	}
	res.Violations += len(res.DuplicateTokens)
	res.GoneChecked, res.LateUnits = checkGone(sorted, PausedWorkers(opt.Faults))
	for _, u := range res.LateUnits {
		res.Details = append(res.Details, describeLate(u))
	}
	res.Violations += len(res.LateUnits)
	res.QuorumLoss = checkQuorumLoss(sorted, opt)
	res.Details = append(res.Details, res.QuorumLoss.Details...)
	res.Violations += len(res.QuorumLoss.Details)
	res.Revokes = checkRevokes(sorted, opt.ClusterOf)
	res.Details = append(res.Details, res.Revokes.Details...)
	res.Violations += len(res.Revokes.Details)
	return res, errors.Join(errs...)
}

func validate(ops []history.Op) error {
	for _, op := range ops {
		where := fmt.Sprintf("check: w%d op %d (%s %q)", op.Worker, op.Seq, op.Kind, op.Key)
		if !slices.Contains(history.Kinds, op.Kind) {
			return fmt.Errorf("%s: unknown kind", where)
		}
		switch op.Outcome {
		case history.Ok, history.Fail, history.Unknown:
		default:
			return fmt.Errorf("%s: unknown outcome %q", where, op.Outcome)
		}
		if op.Key == "" {
			return fmt.Errorf("%s: no key", where)
		}
		if op.Outcome != history.Unknown && op.Return == 0 {
			return fmt.Errorf("%s: outcome %s but no return time", where, op.Outcome)
		}
		if op.Return != 0 && op.Return < op.Call {
			return fmt.Errorf("%s: returned at %d before its call at %d", where, op.Return, op.Call)
		}
	}
	return nil
}

// operation converts op for porcupine; the client id is set later.
func operation(op history.Op) porcupine.Operation {
	ret := op.Return
	if op.Outcome == history.Unknown {
		ret = infinity
	}
	meta := fmt.Sprintf("worker %d, op %d", op.Worker, op.Seq)
	if op.Err != "" {
		meta += ", err: " + op.Err
	}
	return porcupine.Operation{
		Input:    inputOf(op),
		Call:     op.Call,
		Output:   op.Outcome,
		Return:   ret,
		Metadata: meta,
	}
}

// HoldID names one hold: its key and its token. A token alone does not:
// keys granted in one batch share it.
type HoldID struct {
	Key   string
	Token uint64
}

// HoldOf is the HoldID of key's hold with tok.
func HoldOf(key string, tok uint64) HoldID { return HoldID{Key: key, Token: tok} }

// duplicates finds tokens granted more than once for one key; ops are
// ordered by call.
func duplicates(ops []history.Op) []Duplicate {
	first := map[HoldID]Grant{}
	var dups []Duplicate
	for _, op := range ops {
		if op.Kind != history.Acquire || op.Outcome != history.Ok {
			continue
		}
		g := Grant{Worker: op.Worker, Seq: op.Seq, Key: op.Key, Call: op.Call, Return: op.Return}
		if f, ok := first[HoldOf(op.Key, op.Token)]; ok {
			dups = append(dups, Duplicate{Token: op.Token, First: f, Second: g})
			continue
		}
		first[HoldOf(op.Key, op.Token)] = g
	}
	return dups
}

// modelVerdict is one model's outcome over all keys.
type modelVerdict struct {
	result  porcupine.CheckResult
	illegal int // keys found illegal
	unknown int // keys whose check timed out
	details []string
	bad     []porcupine.Operation // the operations of the keys not found Ok
}

// checkModel checks each key's history separately and concurrently, each
// with the full timeout, so that the verdict of every key is known: one
// porcupine check over all partitions reports only the overall verdict.
func checkModel(name string, model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) modelVerdict {
	parts := model.Partition(ops)
	results := make([]porcupine.CheckResult, len(parts))
	infos := make([]porcupine.LinearizationInfo, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		assignClients(part)
		wg.Go(func() {
			results[i], infos[i] = porcupine.CheckOperationsVerbose(model, part, timeout)
		})
	}
	wg.Wait()

	v := modelVerdict{result: porcupine.Ok}
	for i, part := range parts {
		key := part[0].Input.(opInput).key
		switch results[i] {
		case porcupine.Ok:
			continue
		case porcupine.Illegal:
			v.illegal++
			v.result = porcupine.Illegal
			v.details = append(v.details, explain(name, key, model, part, infos[i]))
		default:
			v.unknown++
			if v.result == porcupine.Ok {
				v.result = porcupine.Unknown
			}
			v.details = append(v.details, fmt.Sprintf(
				"%s model, key %q: inconclusive, the check of its %d operations timed out after %s",
				name, key, len(part), timeout))
		}
		v.bad = append(v.bad, part...)
	}
	return v
}

// explain describes why a key's history is illegal: how far the longest
// linearization got, its state there, and the operations that could come
// next but none of which the model allows.
func explain(name, key string, model porcupine.Model, part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	head := fmt.Sprintf("%s model, key %q: not linearizable", name, key)
	partials := info.PartialLinearizations()
	if len(partials) == 0 {
		return head
	}
	var longest []int
	for _, p := range partials[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	done := make([]bool, len(part))
	state := model.Init()
	for _, id := range longest {
		done[id] = true
		_, state = model.Step(state, part[id].Input, part[id].Output)
	}
	var pending []porcupine.Operation
	minReturn := int64(infinity)
	for id, op := range part {
		if !done[id] && op.Return < minReturn {
			minReturn = op.Return
		}
	}
	for id, op := range part {
		if !done[id] && op.Call <= minReturn {
			pending = append(pending, op)
		}
	}
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].Call < pending[j].Call })
	after := "from the initial state"
	if n := len(longest); n > 0 {
		last := part[longest[n-1]]
		after = "after " + describeOp(last.Input, last.Output)
	}
	return fmt.Sprintf("%s: %d of %d operations linearize; %s (state %s), none of these can come next: %s",
		head, len(longest), len(part), after, model.DescribeState(state), describeOps(pending, 4))
}

// visualize re-checks the operations of the keys that were not Ok and
// writes porcupine's HTML visualisation of them to name.html.
func visualize(name string, model porcupine.Model, bad []porcupine.Operation, opt Options) (string, error) {
	if err := os.MkdirAll(opt.ArtifactsDir, 0o755); err != nil {
		return "", fmt.Errorf("check: %w", err)
	}
	ops := append([]porcupine.Operation(nil), bad...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	assignClients(ops)
	_, info := porcupine.CheckOperationsVerbose(model, ops, opt.Timeout)
	var notes []porcupine.Annotation
	for _, f := range opt.Faults {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: f.Start, End: f.End,
			Description: f.Kind, Details: strings.TrimSpace(f.Target + " " + f.Note), BackgroundColor: "#f6c6c6"})
	}
	info.AddAnnotations(notes)
	path := filepath.Join(opt.ArtifactsDir, name+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return "", fmt.Errorf("check: %s visualisation: %w", name, err)
	}
	return path, nil
}
