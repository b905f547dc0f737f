// Package report prints, saves and draws a benchmark run: an aligned table
// for the terminal, Markdown tables for docs/performance.md, indented JSON
// and PNG charts.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
)

// Table writes run as plain-text tables aligned for a terminal: the run's
// header line, one block per scenario with its ratios, then the renewal
// block when there is one. Skipped systems show their reason instead of
// figures.
func Table(w io.Writer, run *result.Run) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header(run))
	for _, sc := range run.Scenarios {
		fmt.Fprintf(tw, "\n%s\n", scenarioTitle(sc))
		fmt.Fprintln(tw, "  system\tgrants/s\tp50\tp99\tp99.9\terrors\twrites/grant\tbatch\tCPU (cores)\tlockd CPU/grant\tfencing")
		for _, s := range sc.Systems {
			if s.Skipped != "" {
				// The reason is the line's last cell: it does not widen
				// the columns.
				fmt.Fprintf(tw, "  %s\tskipped: %s\n", Label(s), s.Skipped)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n",
				Label(s), rate(s.GrantsPerSec), latency(s.P50), latency(s.P99), latency(s.P999),
				s.Errors, writes(s.WritesPerGrant), batch(s.MeanBatch), pair(s.LockdCPU, s.EtcdCPU, "%.2f"), perGrant(s.LockdCPUPerGrant), yesNo(fences(s)))
		}
		if r := ratios(sc.Ratios); r != "" {
			fmt.Fprintf(tw, "  ratios: %s\n", r)
		}
		for _, s := range sc.Systems {
			if b := spread(s.Batches); b != "" {
				fmt.Fprintf(tw, "  batch sizes, %s: %s of its transactions\n", s.Name, b)
			}
		}
		if f := fsyncLine(sc); f != "" {
			fmt.Fprintf(tw, "  %s\n", f)
		}
	}
	if rn := run.Renewal; rn != nil {
		fmt.Fprintln(tw, "\nrenewal at scale")
		for _, row := range renewalRows(rn) {
			fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
		}
		for i, n := range rn.Notes {
			key := ""
			if i == 0 {
				key = "notes"
			}
			fmt.Fprintf(tw, "  %s\t%s\n", key, n)
		}
	}
	if a := run.Audit; a != nil {
		fmt.Fprintf(tw, "\naudit tailer (%s, lockd alone, ABBA off/on/on/off)\n", a.Scenario)
		for _, row := range auditRows(a) {
			fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
		}
	}
	if t := run.Tracing; t != nil {
		fmt.Fprintf(tw, "\ntracing (%s, off/lockd/sampled/all/all/sampled/lockd/off ×%d, median of rounds)\n", t.Scenario, t.Rounds)
		for _, row := range tracingRows(t) {
			fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
		}
	}
	tw.Flush()
}

func auditRows(a *result.Audit) [][2]string {
	return [][2]string{
		{"grants/s, tailer off", rate(a.OffGrantsPerSec)},
		{"grants/s, tailer on", rate(a.OnGrantsPerSec)},
		{"on/off", fmt.Sprintf("%.2fx", a.Ratio)},
		{"tailer lag p99", latency(a.LagP99)},
		{"tailer lag max", latency(a.LagMax)},
		{"lag samples", strconv.Itoa(a.Samples)},
	}
}

func tracingRows(t *result.Tracing) [][2]string {
	pct := fmt.Sprintf("%g %%", t.SampledRatio*100)
	return [][2]string{
		{"grants/s, tracing off", rate(t.OffGrantsPerSec)},
		{"grants/s, lockd alone sampling " + pct + " (clients untraced)", fmt.Sprintf("%s (%.2fx; rounds %s)", rate(t.LockdOnlyGrantsPerSec), t.LockdOnlyRatioOfOff, roundRatios(t.LockdOnlyRounds))},
		{"grants/s, lockd and clients sampling " + pct, fmt.Sprintf("%s (%.2fx; rounds %s)", rate(t.SampledGrantsPerSec), t.SampledRatioOfOff, roundRatios(t.SampledRounds))},
		{"grants/s, every trace sampled", fmt.Sprintf("%s (%.2fx; rounds %s)", rate(t.AllGrantsPerSec), t.AllRatioOfOff, roundRatios(t.AllRounds))},
		{"p99, off / lockd alone / " + pct + " / all", latency(t.OffP99) + " / " + latency(t.LockdOnlyP99) + " / " + latency(t.SampledP99) + " / " + latency(t.AllP99)},
		{"CPU per grant in lockd, off / lockd alone / " + pct + " / all", latency(t.OffLockdCPUPerGrant) + " / " + latency(t.LockdOnlyLockdCPUPerGrant) + " / " + latency(t.SampledLockdCPUPerGrant) + " / " + latency(t.AllLockdCPUPerGrant)},
		{"spans exported, lockd alone / " + pct + " / all", fmt.Sprintf("%d / %d / %d", t.LockdOnlySpans, t.SampledSpans, t.AllSpans)},
	}
}

// roundRatios prints each round's ratio, e.g. "0.97 0.95 1.01".
func roundRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}

// Markdown writes the same content as Table as Markdown: a header line,
// one table per scenario followed by its ratios, and the renewal table.
func Markdown(w io.Writer, run *result.Run) {
	fmt.Fprintf(w, "%s\n", header(run))
	for _, sc := range run.Scenarios {
		fmt.Fprintf(w, "\n### %s\n\n", scenarioTitle(sc))
		fmt.Fprintln(w, "| system | grants/s | p50 | p99 | p99.9 | errors | writes/grant | batch | CPU (cores) | lockd CPU/grant | fencing |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|---|--:|---|")
		for _, s := range sc.Systems {
			if s.Skipped != "" {
				fmt.Fprintf(w, "| %s | skipped: %s | – | – | – | – | – | – | – | – | – |\n",
					mdEscape(Label(s)), mdEscape(s.Skipped))
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s |\n",
				mdEscape(Label(s)), rate(s.GrantsPerSec), latency(s.P50), latency(s.P99), latency(s.P999),
				s.Errors, writes(s.WritesPerGrant), batch(s.MeanBatch), pair(s.LockdCPU, s.EtcdCPU, "%.2f"), perGrant(s.LockdCPUPerGrant), yesNo(fences(s)))
		}
		if r := ratios(sc.Ratios); r != "" {
			fmt.Fprintf(w, "\nRatios: %s\n", r)
		}
		for _, s := range sc.Systems {
			if b := spread(s.Batches); b != "" {
				fmt.Fprintf(w, "\nBatch sizes, %s: %s of its transactions\n", s.Name, b)
			}
		}
		if f := fsyncLine(sc); f != "" {
			fmt.Fprintf(w, "\n%s\n", f)
		}
	}
	if rn := run.Renewal; rn != nil {
		fmt.Fprint(w, "\n### Renewal at scale\n\n")
		fmt.Fprintln(w, "| measure | value |")
		fmt.Fprintln(w, "|---|---|")
		for _, row := range renewalRows(rn) {
			fmt.Fprintf(w, "| %s | %s |\n", row[0], mdEscape(row[1]))
		}
		if len(rn.Notes) > 0 {
			fmt.Fprintln(w, "\nNotes:")
			fmt.Fprintln(w)
			for _, n := range rn.Notes {
				fmt.Fprintf(w, "- %s\n", n)
			}
		}
	}
	if a := run.Audit; a != nil {
		mdRows(w, fmt.Sprintf("Audit tailer (%s, lockd alone, ABBA off/on/on/off)", a.Scenario), auditRows(a))
	}
	if t := run.Tracing; t != nil {
		mdRows(w, fmt.Sprintf("Tracing (%s, off/lockd/sampled/all/all/sampled/lockd/off ×%d, median of rounds)", t.Scenario, t.Rounds), tracingRows(t))
	}
}

// mdRows writes a measure/value table under a heading.
func mdRows(w io.Writer, title string, rows [][2]string) {
	fmt.Fprintf(w, "\n### %s\n\n", title)
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
}

// WriteJSON saves run to path as indented JSON.
func WriteJSON(path string, run *result.Run) error {
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return fmt.Errorf("report: encode run: %w", err)
	}
	b = append(b, '\n')
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Label is the name a system is printed and drawn under. redsync hands out
// no fencing token, so it is always labelled "redsync (no fencing)"; so is
// any other system that ran without one.
func Label(s *result.System) string {
	if s.Name == result.Redsync || (!s.Fencing && s.Skipped == "") {
		return s.Name + " (no fencing)"
	}
	return s.Name
}

// fences reports whether the system hands out a fencing token; redsync
// never does, whatever its Fencing flag says.
func fences(s *result.System) bool {
	return s.Fencing && s.Name != result.Redsync
}

func header(run *result.Run) string {
	started := "-"
	if !run.Started.IsZero() {
		started = run.Started.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return fmt.Sprintf("machine: %s; mode: %s; duration: %s; started: %s",
		orDash(run.Machine), orDash(run.Mode), orDash(run.Duration), started)
}

func scenarioTitle(sc *result.Scenario) string {
	workers := "workers"
	if sc.Workers == 1 {
		workers = "worker"
	}
	keys := "keys"
	if sc.Keys == 1 {
		keys = "key"
	}
	return fmt.Sprintf("%s (%d %s, %d %s)", sc.Name, sc.Workers, workers, sc.Keys, keys)
}

// ratioOrder is the order the known ratios print in; others follow sorted.
var ratioOrder = []string{"lockd/raw", "lockd/etcd-mutex", "lockd-durable/etcd-mutex", "lockd-durable/lockd", "lockd-raw p50 ms"}

// batch formats lockd's mean group commit size; "–" when not measured
// (the other systems).
func batch(b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", b)
}

// perGrant formats lockd's CPU time per grant and release; "–" when not
// measured (the other systems).
func perGrant(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return latency(d)
}

// spread formats a batch size distribution as each bucket's share of the
// transactions, e.g. "1: 2%, 2: 1%, 3-4: 3%, 17-32: 60%"; "" for none.
func spread(bs []result.BatchBucket) string {
	total := 0.0
	for _, b := range bs {
		total += b.Txns
	}
	if total == 0 {
		return ""
	}
	parts := make([]string, 0, len(bs))
	for _, b := range bs {
		name := strconv.Itoa(b.UpTo)
		if b.UpTo > b.From {
			name = fmt.Sprintf("%d-%d", b.From, b.UpTo)
		}
		parts = append(parts, fmt.Sprintf("%s: %.0f%%", name, 100*b.Txns/total))
	}
	return strings.Join(parts, ", ")
}

// fsyncLine is etcd's mean WAL fsync in each system's runs, e.g.
// "etcd WAL fsync mean: raw 0.61 ms, lockd 0.58 ms"; "" when not measured.
func fsyncLine(sc *result.Scenario) string {
	var parts []string
	for _, s := range sc.Systems {
		if s.EtcdFsyncMean > 0 {
			parts = append(parts, s.Name+" "+latency(s.EtcdFsyncMean))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "etcd WAL fsync mean: " + strings.Join(parts, ", ")
}

// writes formats consensus writes per grant; "–" when not measured.
func writes(w float64) string {
	if w == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", w)
}

// ratios formats a scenario's ratios on one line: grants/s ratios as
// "0.92x", keys ending in " ms" as a signed difference in milliseconds.
func ratios(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for _, k := range ratioOrder {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(ratioOrder, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)

	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if name, ok := strings.CutSuffix(k, " ms"); ok {
			parts = append(parts, fmt.Sprintf("%s %+.2f ms", name, m[k]))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.2fx", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func renewalRows(rn *result.Renewal) [][2]string {
	const mib = 1 << 20
	return [][2]string{
		{"sessions", fmt.Sprintf("%d of %d target", rn.Sessions, rn.TargetSessions)},
		{"holds", fmt.Sprintf("%d of %d target", rn.Holds, rn.TargetHolds)},
		{"TTL", span(rn.TTL)},
		{"load time", span(rn.Load)},
		{"steady", span(rn.Steady)},
		{"keepalives/s", fmt.Sprintf("sent %.1f, at etcd %.1f", rn.KeepalivesSent, rn.KeepalivesAtEtcd)},
		{"etcd writes/s (steady)", fmt.Sprintf("%.2f", rn.EtcdWritesPerSec)},
		{"false expiries", fmt.Sprintf("%d", rn.FalseExpiries)},
		{"grants beside it", probeRow(rn)},
		{"audit tailer", onOff(rn.Audit)},
		{"CPU (cores)", pair(rn.LockdCPU, rn.EtcdCPU, "%.2f")},
		{"RSS (MiB)", pair(float64(rn.LockdRSS)/mib, float64(rn.EtcdRSS)/mib, "%.0f")},
		{"held", yesNo(rn.Held)},
	}
}

// probeRow is the grant probe's figures: grants, their p50, p99 and max,
// and failures.
func probeRow(rn *result.Renewal) string {
	if rn.ProbeGrants == 0 && rn.ProbeErrors == 0 {
		return "-"
	}
	rate := ""
	if rn.ProbeFor > 0 {
		rate = fmt.Sprintf(" in %s (%.0f/s)", span(rn.ProbeFor), float64(rn.ProbeGrants)/rn.ProbeFor.Seconds())
	}
	return fmt.Sprintf("%d%s, p50 %s, p99 %s, max %s, %d failed", rn.ProbeGrants, rate,
		latency(rn.ProbeP50), latency(rn.ProbeP99), latency(rn.ProbeMax), rn.ProbeErrors)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// latency formats a grant latency: microseconds below 1 ms ("850 µs"),
// milliseconds with two decimals above ("1.23 ms"), "-" when unmeasured.
func latency(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if us := float64(d) / float64(time.Microsecond); us < 999.5 {
		return fmt.Sprintf("%.0f µs", us)
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// span formats a longer duration (TTL, load, steady state).
func span(d time.Duration) string {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func rate(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}

// pair formats a lockd/etcd pair of figures, leaving out a zero one (on
// the embedded default both run in one process, reported as lockd).
func pair(lockd, etcd float64, format string) string {
	var parts []string
	if lockd >= 0.005 { // below the printed precision: not this process
		parts = append(parts, "lockd "+fmt.Sprintf(format, lockd))
	}
	if etcd >= 0.005 {
		parts = append(parts, "etcd "+fmt.Sprintf(format, etcd))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func mdEscape(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
