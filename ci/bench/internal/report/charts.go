package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/lockd-dev/lockd/ci/bench/internal/result"
)

// Chart size in points: 600x375 is 800x500 pixels at the PNG's 96 dpi.
const (
	chartWidth  = vg.Length(600)
	chartHeight = vg.Length(375)
)

// Charts draws run into dir, creating it if needed: one latency CDF per
// scenario, <scenario>-latency.png, and one grouped bar chart of grants per
// second, throughput.png. Skipped systems and systems without a CDF are
// left out. It returns the paths written.
func Charts(dir string, run *result.Run) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var paths []string
	for _, sc := range run.Scenarios {
		p := latencyChart(sc)
		if p == nil {
			continue
		}
		path := filepath.Join(dir, fileName(sc.Name)+"-latency.png")
		if err := save(p, path); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	p, err := throughputChart(run)
	if err != nil {
		return paths, err
	}
	if p != nil {
		path := filepath.Join(dir, "throughput.png")
		if err := save(p, path); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// save writes p to path as a PNG with a white margin around the plot.
func save(p *plot.Plot, path string) error {
	img := vgimg.New(chartWidth, chartHeight)
	c := draw.New(img)
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	const margin = 8
	p.Draw(draw.Crop(c, margin, -margin, margin, -margin))

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return nil
}

// latencyChart draws a scenario's grant latency CDFs on a log x axis, or
// returns nil when no system has one.
func latencyChart(sc *result.Scenario) *plot.Plot {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: grant latency CDF, %d workers", sc.Name, sc.Workers)
	p.X.Label.Text = "grant latency (ms, log scale)"
	p.Y.Label.Text = "fraction of grants"
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false // bottom right: CDFs are near 1 there
	p.Legend.Left = false
	p.Legend.YOffs = 0.03 * chartHeight
	p.Add(plotter.NewGrid())

	lo, hi := math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range sc.Systems {
		if s.Skipped != "" || len(s.CDF) < 2 {
			continue
		}
		var xys plotter.XYs
		for i, d := range s.CDF {
			if d <= 0 { // no zero on a log scale
				continue
			}
			x := float64(d) / float64(time.Millisecond)
			xys = append(xys, plotter.XY{X: x, Y: float64(i) / float64(len(s.CDF)-1)})
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			continue // NaN or Inf: leave the system out
		}
		l.Color = systemColor(s.Name)
		l.Width = vg.Points(2)
		if !fences(s) {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(Label(s), l)
		n++
	}
	if n == 0 {
		return nil
	}
	// Whole decades, so the axis carries at least two labelled ticks.
	p.X.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	p.X.Max = math.Pow(10, math.Ceil(math.Log10(hi)))
	if p.X.Max <= p.X.Min {
		p.X.Max = p.X.Min * 10
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	return p
}

// logTicks labels the decades of a log axis with plot.LogTicks. LogTicks
// starts a decade late when the axis minimum is below 1 (it truncates the
// logarithm towards zero), so the range is shifted above 1 first and the
// ticks shifted back.
type logTicks struct{}

// Ticks returns the ticks between min and max.
func (logTicks) Ticks(min, max float64) []plot.Tick {
	shift := 1.0
	for min*shift < 1 {
		shift *= 10
	}
	ticks := plot.LogTicks{Prec: -1}.Ticks(min*shift, max*shift)
	for i := range ticks {
		ticks[i].Value /= shift
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', -1, 64)
		}
	}
	return ticks
}

// plainTicks labels a linear axis like plot.DefaultTicks, without the
// trailing zeros it adds to large round values ("50000", not "50000.00").
type plainTicks struct{}

// Ticks returns the ticks between min and max.
func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
}

// throughputChart draws grants per second as bars grouped by scenario, one
// colour per system, or returns nil when there is nothing to draw.
func throughputChart(run *result.Run) (*plot.Plot, error) {
	var names []string // scenarios on x
	var systems []*result.System
	seen := map[string]bool{}
	for _, sc := range run.Scenarios {
		names = append(names, sc.Name)
		for _, s := range sc.Systems {
			if s.Skipped == "" && !seen[s.Name] {
				seen[s.Name] = true
				systems = append(systems, s)
			}
		}
	}
	if len(names) == 0 || len(systems) == 0 {
		return nil, nil
	}

	p := plot.New()
	p.Title.Text = "Throughput by scenario"
	p.Y.Label.Text = "grants/s"
	p.Legend.Top = true
	p.Legend.Left = true
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil // scenarios are categories
	p.Add(grid)

	// Groups take about 80% of each scenario's slot on the x axis.
	slot := (chartWidth - vg.Length(80)) / vg.Length(len(names))
	w := 0.8 * slot / vg.Length(len(systems))
	top := 0.0
	for i, sys := range systems {
		vals := make(plotter.Values, len(run.Scenarios))
		for j, sc := range run.Scenarios {
			if s := sc.Find(sys.Name); s != nil && s.Skipped == "" {
				vals[j] = s.GrantsPerSec
				top = math.Max(top, s.GrantsPerSec)
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, fmt.Errorf("report: throughput bars for %s: %w", sys.Name, err)
		}
		b.Color = systemColor(sys.Name)
		b.LineStyle = draw.LineStyle{Color: color.White, Width: vg.Points(0.5)}
		b.Offset = (vg.Length(i) - vg.Length(len(systems)-1)/2) * w
		p.Add(b)
		p.Legend.Add(Label(sys), b)
	}
	p.NominalX(names...)
	// One equal slot per scenario, so the grid spans the outer groups too.
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.Y.Min = 0
	p.Y.Tick.Marker = plainTicks{}
	if top > 0 {
		p.Y.Max = top * 1.25 // room for the legend
	}
	return p, nil
}

// palette gives each known system the same colour on every chart.
var palette = map[string]color.Color{
	result.Raw:       color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff}, // blue
	result.EtcdMutex: color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff}, // green
	result.Lockd:     color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff}, // orange
	result.Redsync:   color.RGBA{R: 0x8c, G: 0x8c, B: 0x8c, A: 0xff}, // grey
}

func systemColor(name string) color.Color {
	if c, ok := palette[name]; ok {
		return c
	}
	return color.RGBA{R: 0x81, G: 0x72, B: 0xb3, A: 0xff} // purple
}

// fileName keeps a scenario name to one path element.
func fileName(s string) string {
	return strings.NewReplacer("/", "-", string(filepath.Separator), "-").Replace(s)
}

var (
	_ plot.Ticker = logTicks{}
	_ plot.Ticker = plainTicks{}
)
