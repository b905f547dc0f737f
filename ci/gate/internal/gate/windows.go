package gate

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// WindowFloor is the floor of work inside one fault window: a window open
// for grants this long (its time less what restores and rebuilds closed by
// design) must hold at least one grant. Workers hold a lock for up to a
// few seconds, so shorter windows can pass without a grant on a healthy
// arbiter; over a window this long, a run with none is one where the
// fault stopped the system, or the gate stopped working, and a pass would
// say nothing.
const WindowFloor = 8 * time.Second

// KindWork is the work done inside one kind's fault windows.
type KindWork struct {
	Kind    string `json:"kind"`
	Windows int    `json:"windows"`
	// Open is the windows' time open for grants (by design), summed.
	Open   string  `json:"open"`
	Grants int     `json:"grants"`
	PerSec float64 `json:"perSec"`
}

// WindowWork is the work done inside the fault windows of a run.
type WindowWork struct {
	Kinds []KindWork `json:"kinds"`
	// Idle names each window at least WindowFloor open that granted
	// nothing.
	Idle []string `json:"idle,omitempty"`
}

// windowWork counts the grants that returned inside each injected fault's
// window [Start, End], per kind, leaving out what faults closed to grants
// by design; a window of at least WindowFloor open time with none is Idle.
func windowWork(ops []history.Op, faults []history.Fault) WindowWork {
	var grants []int64
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Outcome == history.Ok && op.Token != 0 {
			grants = append(grants, op.Return)
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i] < grants[j] })
	in := func(lo, hi int64) int {
		return sort.Search(len(grants), func(i int) bool { return grants[i] > hi }) -
			sort.Search(len(grants), func(i int) bool { return grants[i] >= lo })
	}

	byKind := make(map[string]*KindWork)
	opens := make(map[string]time.Duration)
	var w WindowWork
	for _, f := range faults {
		if f.Err != "" || f.End <= f.Start {
			continue // not injected, or an instant (a force-release)
		}
		open := time.Duration(f.End-f.Start) - grantsClosed(faults, f.Start, f.End)
		n := in(f.Start, f.End)
		k := byKind[f.Kind]
		if k == nil {
			k = &KindWork{Kind: f.Kind}
			byKind[f.Kind] = k
		}
		k.Windows++
		k.Grants += n
		opens[f.Kind] += open
		if n == 0 && open >= WindowFloor {
			w.Idle = append(w.Idle, fmt.Sprintf("%s on %s: no grant in %s open", f.Kind, f.Target, open.Round(100*time.Millisecond)))
		}
	}
	for kind, k := range byKind {
		if o := opens[kind]; o > 0 {
			k.Open = o.Round(100 * time.Millisecond).String()
			k.PerSec = float64(k.Grants) / o.Seconds()
		} else {
			k.Open = "0s"
		}
		w.Kinds = append(w.Kinds, *k)
	}
	sort.Slice(w.Kinds, func(i, j int) bool { return w.Kinds[i].Kind < w.Kinds[j].Kind })
	return w
}

// String is the summary's line: grants per second inside each kind's
// windows.
func (w WindowWork) String() string {
	parts := make([]string, len(w.Kinds))
	for i, k := range w.Kinds {
		parts[i] = fmt.Sprintf("%s %.2f/s (%d in %s)", k.Kind, k.PerSec, k.Grants, k.Open)
	}
	return strings.Join(parts, ", ")
}
