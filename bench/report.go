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
	// Redis is what the stage ran on: "single" or "cluster, 3 primaries".
	Redis string `json:"redis,omitempty"`
	// Cost and LimitCost are what ours and the limit cost the servers per
	// unit of work (the run of the median Redis CPU), where measured.
	Cost      *Cost `json:"cost,omitempty"`
	LimitCost *Cost `json:"limit_cost,omitempty"`
	// BytesPerEntry is Redis memory per feed entry in the stage's feeds.
	BytesPerEntry float64 `json:"bytes_per_entry,omitempty"`
	// Spread is how ours, the limit and their ratio moved across the runs
	// whose medians the line shows; nil for a line that is not a median of
	// runs.
	Spread *Spread `json:"spread,omitempty"`
}

// Range is the lowest and the highest of a figure across runs.
type Range struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func rangeOf(v []float64) Range {
	if len(v) == 0 {
		return Range{}
	}
	return Range{Min: slices.Min(v), Max: slices.Max(v)}
}

// Spread is a line's figures across its runs.
type Spread struct {
	Runs  int   `json:"runs"`
	Ours  Range `json:"ours"`
	Limit Range `json:"limit"`
	Ratio Range `json:"ratio"`
}

// spreadOf is the spread of the runs' figures (ours, limit and ratio of
// each run, in the same order).
func spreadOf(ours, limit, ratios []float64) *Spread {
	return &Spread{Runs: max(len(ours), len(limit), len(ratios)), Ours: rangeOf(ours), Limit: rangeOf(limit), Ratio: rangeOf(ratios)}
}

// ratioRange is the ratio's spread as the tables show it: "0.38–0.42 (3
// runs)"; "–" for a line without runs.
func (s Stage) ratioRange() string {
	if s.Spread == nil || s.Spread.Runs == 0 {
		return "–"
	}
	runs := "runs"
	if s.Spread.Runs == 1 {
		runs = "run"
	}
	return fmt.Sprintf("%.2f–%.2f (%d %s)", s.Spread.Ratio.Min, s.Spread.Ratio.Max, s.Spread.Runs, runs)
}

// oursRange is ours' spread as the tables show it, a digit finer than the
// median beside it where that is small: "104.7–104.8", "106067–162207";
// "–" for a line without runs.
func (s Stage) oursRange() string {
	if s.Spread == nil || s.Spread.Runs == 0 {
		return "–"
	}
	f := func(v float64) string {
		switch a := math.Abs(s.Spread.Ours.Max); {
		case a >= 1000:
			return fmt.Sprintf("%.0f", v)
		case a >= 10:
			return fmt.Sprintf("%.1f", v)
		default:
			return fmt.Sprintf("%.3f", v)
		}
	}
	return f(s.Spread.Ours.Min) + "–" + f(s.Spread.Ours.Max)
}

// Report is a whole run.
type Report struct {
	Started         time.Time `json:"started"`
	Machine         string    `json:"machine"`
	Options         Options   `json:"options"`
	Stages          []Stage   `json:"stages"`
	WorkerPeakRSSMB float64   `json:"worker_peak_rss_mb,omitempty"`
	// WorkerCPUPerEntry is the CPU of the big fan-out's worker process in
	// µs per feed entry.
	WorkerCPUPerEntry float64 `json:"worker_cpu_us_per_entry,omitempty"`
	// ClusterSlots is how the cluster's slots were split when its stages
	// started.
	ClusterSlots   SlotCounts           `json:"cluster_slots,omitempty"`
	LatencySamples map[string][]float64 `json:"-"`
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
	fmt.Fprintln(tw, "stage\tours\tours min–max\tlimit\tratio\tratio min–max\ttarget\tp50 ms\tp95 ms\tp99 ms\t")
	for _, s := range r.Stages {
		lat := func(v float64) string {
			if s.Latency.N == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t\n", s.Name, num(s.Ours), s.Unit, s.oursRange(), num(s.Limit),
			s.Ratio, s.ratioRange(), s.Target, lat(s.Latency.P50), lat(s.Latency.P95), lat(s.Latency.P99))
	}
	_ = tw.Flush()
	for _, s := range r.Stages {
		fmt.Fprintf(w, "- %s: %s\n", s.Name, s.Note)
	}
	if len(r.ClusterSlots) > 0 {
		fmt.Fprintf(w, "Redis Cluster slots per primary when its stages started: %s\n", r.ClusterSlots)
	}
	if r.hasCosts() {
		fmt.Fprintln(w, "\nWhat each unit of work cost (µs of CPU per entry, read or post; Redis: used_cpu_sys + used_cpu_user of every primary):")
		fmt.Fprint(w, r.costMarkdown())
	}
	if r.WorkerCPUPerEntry > 0 {
		fmt.Fprintf(w, "worker process CPU in the big fan-out: %.2f µs per entry\n", r.WorkerCPUPerEntry)
	}
}

func (r *Report) hasCosts() bool {
	for _, s := range r.Stages {
		if s.Cost != nil {
			return true
		}
	}
	return false
}

// costMarkdown is the table of what ours and the limit cost per unit of
// work, stage by stage, single Redis beside the cluster.
func (r *Report) costMarkdown() string {
	var b strings.Builder
	b.WriteString("| stage | Redis | side | Redis CPU µs/unit | per primary: CPU µs/unit (share) | top commands, µs/unit (commandstats) | bench process µs/unit | PostgreSQL µs/unit | bytes/entry |\n")
	b.WriteString("|---|---|---|---:|---|---|---:|---:|---:|\n")
	for _, s := range r.Stages {
		for _, side := range []struct {
			name string
			c    *Cost
		}{{"ours", s.Cost}, {"limit", s.LimitCost}} {
			if side.c == nil || side.c.Redis == nil {
				continue
			}
			rc := side.c.Redis
			var shards, top []string
			for _, sh := range rc.Shards {
				shards = append(shards, fmt.Sprintf("%s %.2f (%.0f %%)", sh.Addr, sh.CPUPerUnit, 100*sh.Share))
				if len(rc.Shards) == 1 {
					top = sh.Top
				}
			}
			if len(rc.Shards) > 1 {
				top = mergeTop(rc.Shards)
			}
			for _, a := range rc.Changed {
				shards = append(shards, a+" changed (failover?): left out")
			}
			if rc.ReplicaCPUPerUnit > 0 {
				shards = append(shards, fmt.Sprintf("replicas %.2f in all", rc.ReplicaCPUPerUnit))
			}
			bpe := "–"
			if side.name == "ours" && s.BytesPerEntry > 0 {
				bpe = fmt.Sprintf("%.0f", s.BytesPerEntry)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f per %s | %s | %s | %.1f | %.1f | %s |\n", s.Name, s.Redis, side.name,
				rc.CPUPerUnit, rc.Unit, strings.Join(shards, "; "), strings.Join(top, ", "),
				side.c.BenchCPUPerUnit, side.c.PostgresCPUPerUnit, bpe)
		}
	}
	return b.String()
}

// mergeTop adds up the primaries' top commands: "evalsha 5.90".
func mergeTop(shards []ShardCost) []string {
	sum := map[string]float64{}
	for _, sh := range shards {
		for _, t := range sh.Top {
			name, v, _ := strings.Cut(t, " ")
			var f float64
			_, _ = fmt.Sscanf(v, "%g", &f)
			sum[name] += f
		}
	}
	names := make([]string, 0, len(sum))
	for n := range sum {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return sum[names[i]] > sum[names[j]] })
	out := make([]string, 0, 3)
	for _, n := range names[:min(3, len(names))] {
		out = append(out, fmt.Sprintf("%s %.2f", n, sum[n]))
	}
	return out
}

// Markdown returns the report as a GitHub Markdown table.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("| stage | ours | ours min–max | limit | ratio | ratio min–max | target | p50 ms | p95 ms | p99 ms |\n" +
		"|---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, s := range r.Stages {
		lat := "– | – | –"
		if s.Latency.N > 0 {
			lat = fmt.Sprintf("%.1f | %.1f | %.1f", s.Latency.P50, s.Latency.P95, s.Latency.P99)
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %.2f | %s | %s | %s |\n", s.Name, num(s.Ours), s.Unit, s.oursRange(), num(s.Limit),
			s.Ratio, s.ratioRange(), s.Target, lat)
	}
	b.WriteString("\n")
	for _, s := range r.Stages {
		fmt.Fprintf(&b, "- %s: %s\n", s.Name, s.Note)
	}
	if len(r.ClusterSlots) > 0 {
		fmt.Fprintf(&b, "\nRedis Cluster slots per primary when its stages started: %s.\n", r.ClusterSlots)
	}
	if r.hasCosts() {
		b.WriteString("\nWhat each unit of work cost (µs of CPU per entry, read or post; Redis: used_cpu_sys + used_cpu_user of every primary):\n\n")
		b.WriteString(r.costMarkdown())
	}
	if r.WorkerCPUPerEntry > 0 {
		fmt.Fprintf(&b, "\nWorker process CPU in the big fan-out: %.2f µs per entry.\n", r.WorkerCPUPerEntry)
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
	if len(r.LatencySamples) > 0 {
		p, err := r.latencyPlot()
		if err != nil {
			return err
		}
		if err := savePlot(p, dir, "delivery-latency"); err != nil {
			return err
		}
	}
	if p := r.costPlot(); p != nil {
		if err := savePlot(p, dir, "redis-cpu-per-entry"); err != nil {
			return err
		}
	}
	if p := r.memoryPlot(); p != nil {
		if err := savePlot(p, dir, "redis-memory-per-entry"); err != nil {
			return err
		}
	}
	return nil
}

func savePlot(p *plot.Plot, dir, name string) error {
	for _, ext := range []string{"svg", "png"} {
		if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, name+"."+ext)); err != nil {
			return err
		}
	}
	return nil
}

// Plots names the plot files Save writes.
func (r *Report) Plots() []string {
	var out []string
	if len(r.LatencySamples) > 0 {
		out = append(out, "delivery-latency.svg", "delivery-latency.png")
	}
	if r.costPlot() != nil {
		out = append(out, "redis-cpu-per-entry.svg", "redis-cpu-per-entry.png")
	}
	if r.memoryPlot() != nil {
		out = append(out, "redis-memory-per-entry.svg", "redis-memory-per-entry.png")
	}
	return out
}

// memoryPlot draws the memory stage's bytes per kept entry, ours beside the
// same entries as plain sorted sets; nil when the stage did not run.
func (r *Report) memoryPlot() *plot.Plot {
	var labels []string
	var ours, sets plotter.Values
	for _, s := range r.Stages {
		if name, ok := strings.CutPrefix(s.Name, "memory: "); ok && s.Unit == "B/entry" {
			name, _, _ = strings.Cut(name, " per kept entry")
			labels = append(labels, name)
			ours, sets = append(ours, s.Ours), append(sets, s.Limit)
		}
	}
	if len(labels) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Redis bytes per kept feed entry, full feeds"
	p.Y.Label.Text = "bytes per entry"
	p.Add(plotter.NewGrid())
	top := 0.0
	for _, v := range slices.Concat(ours, sets) {
		top = max(top, v)
	}
	p.Y.Min, p.Y.Max = 0, top*1.35 // room for the legend
	for i, side := range []struct {
		name string
		vals plotter.Values
	}{{"ours", ours}, {"sorted sets (member = score = id)", sets}} {
		bc, err := plotter.NewBarChart(side.vals, vg.Points(40))
		if err != nil {
			return nil
		}
		bc.Color = plotutil.Color(i)
		bc.LineStyle.Width = 0
		bc.Offset = vg.Points(float64(42*i - 21))
		p.Add(bc)
		p.Legend.Add(side.name, bc)
	}
	p.NominalX(labels...)
	p.Legend.Top, p.Legend.Left = true, true
	return p
}

// costBars are the bars of costPlot, with their labels: ours and the raw
// ZADD of every fan-out line with a cost per entry, and the repost fan-out's
// own (its limit is the post fan-out, drawn already).
func (r *Report) costBars() (labels []string, bars []*RedisCost) {
	for _, s := range r.Stages {
		for _, side := range []struct {
			name string
			c    *Cost
		}{{"ours", s.Cost}, {"raw ZADD", s.LimitCost}} {
			if side.c == nil || side.c.Redis == nil || side.c.Redis.Unit != "entry" {
				continue
			}
			where, _, _ := strings.Cut(s.Redis, ",") // "single", "cluster"
			if strings.Contains(s.Name, "full feeds") {
				where += ", full feeds"
			}
			if strings.Contains(s.Name, "repost") {
				if side.name != "ours" {
					continue
				}
				where += ", reposts"
			}
			labels = append(labels, where+": "+side.name)
			bars = append(bars, side.c.Redis)
		}
	}
	return labels, bars
}

// costPlot draws Redis CPU per feed entry of every fan-out measurement, ours
// and the limit, single Redis and cluster, each bar stacked by primary; nil
// when no stage measured it.
func (r *Report) costPlot() *plot.Plot {
	labels, bars := r.costBars()
	if len(bars) == 0 {
		return nil
	}
	shards := 0
	for _, b := range bars {
		shards = max(shards, len(b.Shards))
	}
	p := plot.New()
	p.Title.Text = "Redis CPU per feed entry (INFO cpu), stacked by primary, replicas on top"
	p.Y.Label.Text = "µs per entry"
	p.Add(plotter.NewGrid())
	var below *plotter.BarChart
	top := 0.0
	for _, b := range bars {
		top = max(top, b.CPUPerUnit+b.ReplicaCPUPerUnit)
	}
	p.Y.Min, p.Y.Max = 0, top*1.3 // room for the legend
	for i := range shards + 1 {
		vals := make(plotter.Values, len(bars))
		for j, b := range bars {
			switch {
			case i < len(b.Shards):
				vals[j] = b.Shards[i].CPUPerUnit
			case i == shards:
				vals[j] = b.ReplicaCPUPerUnit
			}
		}
		bc, err := plotter.NewBarChart(vals, vg.Points(40))
		if err != nil {
			return nil
		}
		bc.Color = plotutil.Color(i)
		bc.LineStyle.Width = 0
		if below != nil {
			bc.StackOn(below)
		}
		below = bc
		p.Add(bc)
		if i == shards {
			p.Legend.Add("replicas, all", bc)
		} else {
			p.Legend.Add(fmt.Sprintf("primary %d", i+1), bc)
		}
	}
	p.NominalX(labels...)
	p.Legend.Top, p.Legend.Left = true, true
	return p
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
