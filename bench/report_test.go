package bench

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpread: a line's runs give the lowest and highest of each figure,
// and the tables show the ratio's beside the median, and the notes.
func TestSpread(t *testing.T) {
	s := spreadOf([]float64{3, 1, 2}, []float64{10, 30, 20}, []float64{0.42, 0.38, 0.40})
	require.Equal(t, 3, s.Runs)
	require.Equal(t, Range{Min: 1, Max: 3}, s.Ours)
	require.Equal(t, Range{Min: 10, Max: 30}, s.Limit)
	require.Equal(t, Range{Min: 0.38, Max: 0.42}, s.Ratio)
	require.Equal(t, "0.38–0.42 (3 runs)", Stage{Spread: s}.ratioRange())
	require.Equal(t, "1.20–1.40 (2 runs)", Stage{Spread: spreadOf(nil, nil, []float64{1.4, 1.2})}.ratioRange())
	require.Equal(t, "–", Stage{}.ratioRange())
	require.Equal(t, "1.000–3.000", Stage{Spread: s}.oursRange())
	require.Equal(t, "104.7–104.8", Stage{Spread: spreadOf([]float64{104.69, 104.77}, nil, nil)}.oursRange())
	require.Equal(t, "106067–162207", Stage{Spread: spreadOf([]float64{162207.2, 106067.4}, nil, nil)}.oursRange())
	require.Equal(t, "–", Stage{}.oursRange())

	r := &Report{Stages: []Stage{{Name: "fan-out", Unit: "entries/s", Ours: 2, Limit: 4, Ratio: 0.5, Target: "≥ 0.8", Spread: s, Note: "what it measured"}}}
	require.Contains(t, r.Markdown(), "| fan-out | 2.00 entries/s | 1.000–3.000 | 4.00 | 0.50 | 0.38–0.42 (3 runs) | ≥ 0.8 |")
	require.Contains(t, r.Markdown(), "\n- fan-out: what it measured\n")
}

// The memory plot draws the memory stage's bytes per entry, and only when
// that stage ran.
func TestMemoryPlot(t *testing.T) {
	t.Parallel()
	r := &Report{Stages: []Stage{{Name: "fan-out", Unit: "entries/s", Ours: 1, Limit: 2}}}
	if r.memoryPlot() != nil {
		t.Fatal("a plot without the memory stage")
	}
	r.Stages = append(r.Stages,
		Stage{Name: "memory: MEMORY USAGE per kept entry, full feeds", Unit: "B/entry", Ours: 9.3, Limit: 105},
		Stage{Name: "memory: used_memory growth per kept entry, full feeds", Unit: "B/entry", Ours: 9.2, Limit: 113},
		Stage{Name: "memory: Redis per 1M readers with full feeds", Unit: "GB", Ours: 7.4, Limit: 90})
	if r.memoryPlot() == nil {
		t.Fatal("no plot with the memory stage")
	}
	if !slices.Contains(r.Plots(), "redis-memory-per-entry.svg") {
		t.Fatalf("Plots() = %v, want the memory plot", r.Plots())
	}
}

// A limit that measured nothing (a stage too short on a busy machine: "pgx
// 0 posts/s") gives a ratio of 0, not +Inf, which JSON cannot hold: the
// report still saves.
func TestReportSavesWithALimitOfNothing(t *testing.T) {
	t.Parallel()
	ours, limit := []float64{59}, []float64{0}
	ratios := []float64{ratio(ours[0], limit[0])}
	r := &Report{Stages: []Stage{{Name: "post creation", Unit: "posts/s", Ours: median(ours), Limit: median(limit),
		Ratio: median(ratios), Spread: spreadOf(ours, limit, ratios)}}}
	if err := r.Save(t.TempDir()); err != nil {
		t.Fatalf("save: %v", err)
	}
}

// TestCostBars: the repost fan-out's Redis CPU is drawn beside the posts',
// and its limit (the post fan-out) not twice.
func TestCostBars(t *testing.T) {
	cost := func(us float64) *Cost { return &Cost{Redis: &RedisCost{Unit: "entry", CPUPerUnit: us}} }
	r := &Report{Stages: []Stage{
		{Name: "fan-out", Redis: "single", Cost: cost(2), LimitCost: cost(1.5)},
		{Name: "repost fan-out", Redis: "single", Cost: cost(2.2), LimitCost: cost(2)},
		{Name: "feed reads", Redis: "single", Cost: &Cost{Redis: &RedisCost{Unit: "read", CPUPerUnit: 50}}},
	}}
	labels, bars := r.costBars()
	require.Equal(t, []string{"single: ours", "single: raw ZADD", "single, reposts: ours"}, labels)
	require.InDelta(t, 2.2, bars[2].CPUPerUnit, 0)
}
