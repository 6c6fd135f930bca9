package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	N   int     `json:"samples"`
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return float64(s[max(i, 0)]) / float64(time.Millisecond)
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99), N: len(s)}
}

func msSamples(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = float64(x) / float64(time.Millisecond)
	}
	return out
}

// Stage is one line of the report.
type Stage struct {
	Name    string      `json:"name"`
	Unit    string      `json:"unit"`
	Ours    float64     `json:"ours"`
	Limit   float64     `json:"limit"`
	Ratio   float64     `json:"ratio"`
	Target  string      `json:"target,omitempty"`
	Latency Percentiles `json:"latency"`
	Note    string      `json:"note"`
}

// Report is a whole run.
type Report struct {
	Started         time.Time            `json:"started"`
	Machine         string               `json:"machine"`
	Options         Options              `json:"options"`
	Stages          []Stage              `json:"stages"`
	WorkerPeakRSSMB float64              `json:"worker_peak_rss_mb,omitempty"`
	LatencySamples  map[string][]float64 `json:"-"`
}

func newReport(opts Options) *Report {
	host, _ := os.Hostname()
	return &Report{
		Started:        time.Now().UTC(),
		Machine:        fmt.Sprintf("%s, %d CPUs, %s", host, runtime.NumCPU(), runtime.Version()),
		Options:        opts,
		LatencySamples: map[string][]float64{},
	}
}

func (r *Report) add(s Stage) { r.Stages = append(r.Stages, s) }

// WriteTable prints the report as a Markdown table.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "stage\tours\tlimit\tratio\ttarget\tp50 ms\tp95 ms\tp99 ms\t")
	for _, s := range r.Stages {
		lat := func(v float64) string {
			if s.Latency.N == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%.2f\t%s\t%s\t%s\t%s\t\n", s.Name, num(s.Ours), s.Unit, num(s.Limit), s.Ratio,
			s.Target, lat(s.Latency.P50), lat(s.Latency.P95), lat(s.Latency.P99))
	}
	_ = tw.Flush()
	for _, s := range r.Stages {
		fmt.Fprintf(w, "- %s: %s\n", s.Name, s.Note)
	}
}

// Markdown returns the report as a GitHub Markdown table.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("| stage | ours | limit | ratio | target | p50 ms | p95 ms | p99 ms |\n|---|---:|---:|---:|---|---:|---:|---:|\n")
	for _, s := range r.Stages {
		lat := "– | – | –"
		if s.Latency.N > 0 {
			lat = fmt.Sprintf("%.1f | %.1f | %.1f", s.Latency.P50, s.Latency.P95, s.Latency.P99)
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %.2f | %s | %s |\n", s.Name, num(s.Ours), s.Unit, num(s.Limit), s.Ratio, s.Target, lat)
	}
	return b.String()
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// Save writes bench.json, bench.md and the delivery-latency plot (SVG and
// PNG) to dir.
func (r *Report) Save(dir string) error {
	// Results are for everyone on the machine to read.
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a report, not a secret
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(js, '\n'), 0o644); err != nil { //nolint:gosec // a report
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.md"), []byte(r.Markdown()), 0o644); err != nil { //nolint:gosec // a report
		return err
	}
	if len(r.LatencySamples) == 0 {
		return nil
	}
	p, err := r.latencyPlot()
	if err != nil {
		return err
	}
	for _, ext := range []string{"svg", "png"} {
		if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, "delivery-latency."+ext)); err != nil {
			return err
		}
	}
	return nil
}

// latencyPlot draws the delivery-latency distribution of each class as a
// cumulative curve: the share of posts delivered within x milliseconds.
func (r *Report) latencyPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Delivery latency: post committed → last follower's feed written"
	p.X.Label.Text = "milliseconds (log scale)"
	p.Y.Label.Text = "share of posts delivered"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	names := make([]string, 0, len(r.LatencySamples))
	for n := range r.LatencySamples {
		names = append(names, n)
	}
	sort.Strings(names)
	var lines []any
	for _, n := range names {
		s := slices.Clone(r.LatencySamples[n])
		slices.Sort(s)
		pts := make(plotter.XYs, len(s))
		for i, v := range s {
			pts[i].X, pts[i].Y = math.Max(v, 0.1), float64(i+1)/float64(len(s))
		}
		lines = append(lines, strings.TrimPrefix(n, "delivery, "), pts)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, err
	}
	p.Legend.Top = false
	p.Legend.Left = false
	return p, nil
}
