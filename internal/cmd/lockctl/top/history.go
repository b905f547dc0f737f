package top

import (
	"strings"
	"time"
)

// historyLen bounds each class's ring of samples: at the default 2s
// interval, the last two minutes.
const historyLen = 60

// point is one class's figures at one successful refresh.
type point struct {
	at      time.Time
	grants  uint64
	p99     float64 // seconds
	waiters int
}

// history keeps, per class ("namespace/name"), the last historyLen samples
// of successive ClassStats polls: lockd reports totals since it started, so
// rates are computed here, between polls.
type history map[string][]point

// add records one refresh's rows at at.
func (h history) add(at time.Time, rows []ClassRow) {
	for _, r := range rows {
		s := append(h[r.Ref()], point{at: at, grants: r.Grants, p99: r.GrantP99Seconds, waiters: r.Waiters})
		if len(s) > historyLen {
			s = s[len(s)-historyLen:]
		}
		h[r.Ref()] = s
	}
}

// grantRate is grants per second between successive samples. A counter
// that went down (lockd restarted) counts as no grants for that interval.
func (h history) grantRate(class string) []float64 {
	s := h[class]
	var out []float64
	for i := 1; i < len(s); i++ {
		dt := s[i].at.Sub(s[i-1].at).Seconds()
		rate := 0.0
		if dt > 0 && s[i].grants >= s[i-1].grants {
			rate = float64(s[i].grants-s[i-1].grants) / dt
		}
		out = append(out, rate)
	}
	return out
}

// p99 is the grant p99 (seconds) at each sample.
func (h history) p99(class string) []float64 {
	var out []float64
	for _, s := range h[class] {
		out = append(out, s.p99)
	}
	return out
}

// waiters is the waiter count at each sample.
func (h history) waiters(class string) []float64 {
	var out []float64
	for _, s := range h[class] {
		out = append(out, float64(s.waiters))
	}
	return out
}

// span is how long the class's samples cover.
func (h history) span(class string) time.Duration {
	s := h[class]
	if len(s) < 2 {
		return 0
	}
	return s[len(s)-1].at.Sub(s[0].at)
}

var bars = []rune("▁▂▃▄▅▆▇█")

// sparkline draws vals scaled to their maximum, one bar per value; "" when
// there are none.
func sparkline(vals []float64) string {
	top := 0.0
	for _, v := range vals {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range vals {
		i := 0
		if top > 0 {
			i = int(v / top * float64(len(bars)-1))
		}
		b.WriteRune(bars[i])
	}
	return b.String()
}
