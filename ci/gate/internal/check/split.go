package check

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// ClusterOf names the etcd cluster that granted token for key (token 0:
// the cluster key is served by). Keys of the entity tier move between
// shards, so their cluster is their token's: epochs are never shared by
// clusters.
type ClusterOf func(key string, token uint64) string

// SplitOptions configure the checks of a run whose keys are spread over
// more than one etcd cluster (a coord cluster and an entity cluster).
type SplitOptions struct {
	// ClusterOf names the cluster that serves key.
	ClusterOf ClusterOf
	// Coord names the coord cluster: it keeps the sessions, so a fault
	// of any other cluster must not end a hold there.
	Coord string
	// Records are each cluster's epochs read from its own records: its
	// /sys/epoch at the end of the run and every advance the gate made of
	// it.
	Records map[string][]uint32
	// Floor is the blast-radius floor: the coord cluster's grants per
	// second over the windows in which another cluster was restored,
	// rebuilt or without quorum.
	Floor float64
	// Start and End are the faulted run's window: the coord cluster's
	// grant rate outside the outages is over the rest of it.
	Start, End int64
}

// SplitResult is the split topology's check:
//
//   - no epoch is used by two clusters: the epochs of every cluster's
//     grants (their tokens), its records and the advances made of it are
//     disjoint from every other cluster's;
//   - no token is granted on keys of two clusters;
//   - blast radius: while a cluster other than the coord is restored,
//     rebuilt or without quorum (its fault window), the coord cluster goes
//     on granting, at least Floor grants per second over those windows,
//     and no coord hold is fenced inside them;
//   - a worker holding keys on both clusters when such a window opens
//     loses, in it, only the holds on the failed cluster (Straddles counts
//     those seen, FencedOnFailedOnly those whose failed-cluster hold was
//     fenced while their coord hold was not).
type SplitResult struct {
	Epochs map[string][]uint32 `json:"epochs"`
	// BlastWindows are the fault windows of clusters other than the
	// coord's, Seconds their total length, CoordGrants the coord
	// cluster's grants called and answered inside them.
	BlastWindows         int     `json:"blastWindows"`
	BlastSeconds         float64 `json:"blastSeconds"`
	CoordGrants          int     `json:"coordGrants"`
	CoordGrantsPerSecond float64 `json:"coordGrantsPerSecond"`
	// CoordGrantsPerSecondElsewhere is the coord cluster's grant rate in
	// the rest of the run, for comparison.
	CoordGrantsPerSecondElsewhere float64 `json:"coordGrantsPerSecondElsewhere"`
	Floor                         float64 `json:"floor"`
	Straddles                     int     `json:"straddles"`
	FencedOnFailedOnly            int     `json:"fencedOnFailedOnly"`
	// Details has one line per violation.
	Details []string `json:"details,omitempty"`
}

// Passed reports whether the split check found nothing wrong.
func (r SplitResult) Passed() bool { return len(r.Details) == 0 }

// blastKinds are the faults that take a whole cluster out of service.
var blastKinds = []string{"restore", "store-rebuild", KindQuorumLoss}

// Split checks ops (ordered by call) and the faults against a split
// topology.
func Split(ops []history.Op, faults []history.Fault, opt SplitOptions) SplitResult {
	res := SplitResult{Epochs: map[string][]uint32{}, Floor: opt.Floor}
	res.checkEpochs(ops, faults, opt)

	var windows []history.Fault
	for _, f := range faults {
		if f.Err == "" && f.Cluster != "" && f.Cluster != opt.Coord && slices.Contains(blastKinds, f.Kind) {
			windows = append(windows, f)
		}
	}
	res.BlastWindows = len(windows)
	for _, w := range windows {
		from, to := w.Start, max(w.End, w.GrantsClosedUntil)
		res.BlastSeconds += time.Duration(to - from).Seconds()
		for _, op := range ops {
			if op.Call < from || op.Call > to || opt.ClusterOf(op.Key, op.Token) != opt.Coord {
				continue
			}
			switch {
			case op.Kind == history.Acquire && op.Outcome == history.Ok && op.Return != 0 && op.Return <= to:
				res.CoordGrants++
			case op.Kind == history.Lost:
				res.Details = append(res.Details, fmt.Sprintf("blast radius: w%d's coord hold of %q (token %s) was fenced %s into the %s of cluster %s: %s",
					op.Worker, op.Key, FormatToken(op.Token), time.Duration(op.Call-from).Round(time.Millisecond), w.Kind, w.Cluster, op.Err))
			}
		}
		res.straddles(ops, w, opt)
	}
	elsewhere := 0
	for _, op := range ops {
		inside := slices.ContainsFunc(windows, func(w history.Fault) bool { return op.Call >= w.Start && op.Call <= max(w.End, w.GrantsClosedUntil) })
		if !inside && op.Call >= opt.Start && op.Call <= opt.End && op.Kind == history.Acquire && op.Outcome == history.Ok && opt.ClusterOf(op.Key, op.Token) == opt.Coord {
			elsewhere++
		}
	}
	if rest := time.Duration(opt.End-opt.Start).Seconds() - res.BlastSeconds; rest > 0 {
		res.CoordGrantsPerSecondElsewhere = float64(elsewhere) / rest
	}
	if res.BlastSeconds > 0 {
		res.CoordGrantsPerSecond = float64(res.CoordGrants) / res.BlastSeconds
		if res.CoordGrantsPerSecond < opt.Floor {
			res.Details = append(res.Details, fmt.Sprintf("blast radius: the coord cluster granted %d times in %.1fs of other clusters' outages (%.2f/s), under the floor of %.2f/s",
				res.CoordGrants, res.BlastSeconds, res.CoordGrantsPerSecond, opt.Floor))
		}
	}
	return res
}

// checkEpochs gathers each cluster's epochs and reports any two clusters
// sharing one, and any token granted on keys of two clusters.
func (res *SplitResult) checkEpochs(ops []history.Op, faults []history.Fault, opt SplitOptions) {
	used := map[string]map[uint32]bool{}
	add := func(cluster string, e uint32) {
		if e == 0 {
			return
		}
		if used[cluster] == nil {
			used[cluster] = map[uint32]bool{}
		}
		used[cluster][e] = true
	}
	tokens := map[uint64]string{}
	for _, op := range ops {
		if op.Kind != history.Acquire || op.Outcome != history.Ok || op.Token == 0 {
			continue
		}
		c := opt.ClusterOf(op.Key, op.Token)
		add(c, uint32(op.Token>>48))
		if other, ok := tokens[op.Token]; ok && other != c {
			res.Details = append(res.Details, fmt.Sprintf("token %s was granted on cluster %s and on cluster %s", FormatToken(op.Token), other, c))
		}
		tokens[op.Token] = c
	}
	for c, es := range opt.Records {
		for _, e := range es {
			add(c, e)
		}
	}
	for _, f := range faults {
		if f.Err == "" && f.Cluster != "" {
			add(f.Cluster, f.Epoch)
		}
	}
	names := slices.Sorted(maps.Keys(used))
	for i, a := range names {
		res.Epochs[a] = slices.Sorted(maps.Keys(used[a]))
		for _, b := range names[i+1:] {
			for _, e := range res.Epochs[a] {
				if used[b][e] {
					res.Details = append(res.Details, fmt.Sprintf("epoch %d is used by cluster %s and by cluster %s", e, a, b))
				}
			}
		}
	}
}

// straddles finds the workers holding keys on the coord cluster and on the
// failed one as window w opened, and checks that in it only the failed
// cluster's holds were fenced.
func (res *SplitResult) straddles(ops []history.Op, w history.Fault, opt SplitOptions) {
	type hold struct {
		key   string
		token uint64
	}
	held := map[int]map[hold]bool{} // worker -> its holds as w opens
	for _, op := range ops {
		if op.Call >= w.Start {
			break
		}
		h := hold{op.Key, op.Token}
		switch {
		case op.Kind == history.Acquire && op.Outcome == history.Ok && op.Return != 0 && op.Return < w.Start:
			if held[op.Worker] == nil {
				held[op.Worker] = map[hold]bool{}
			}
			held[op.Worker][h] = true
		case op.Kind == history.Release || op.Kind == history.Lost:
			delete(held[op.Worker], h)
		}
	}
	to := max(w.End, w.GrantsClosedUntil)
	for worker, hs := range held {
		var coord, failed []hold
		for h := range hs {
			switch opt.ClusterOf(h.key, h.token) {
			case opt.Coord:
				coord = append(coord, h)
			case w.Cluster:
				failed = append(failed, h)
			}
		}
		if len(coord) == 0 || len(failed) == 0 {
			continue
		}
		res.Straddles++
		fenced := map[hold]bool{}
		for _, op := range ops {
			if op.Worker == worker && op.Kind == history.Lost && op.Call >= w.Start && op.Call <= to {
				fenced[hold{op.Key, op.Token}] = true
			}
		}
		if slices.ContainsFunc(failed, func(h hold) bool { return fenced[h] }) &&
			!slices.ContainsFunc(coord, func(h hold) bool { return fenced[h] }) {
			res.FencedOnFailedOnly++
		}
	}
}
