package admin

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// The metrics the charts are drawn from, as API.md names them.
const (
	deliveryMetric = "newsfeed_delivery_seconds"
	entriesMetric  = "newsfeed_fanout_entries_total"
	ticketsMetric  = "newsfeed_fanout_tickets_total"
)

// Sample is what the process did during one sampling interval, ending At.
type Sample struct {
	At time.Time `json:"at"`
	// Deliveries counts the posts whose fan-out this process finished.
	Deliveries float64 `json:"deliveries"`
	// DeliveryP50Seconds and DeliveryP99Seconds estimate the median and
	// the 99th percentile of their delivery latency (created → fan-out
	// finished) from the histogram's buckets, as PromQL's
	// histogram_quantile does; null without deliveries.
	DeliveryP50Seconds *float64 `json:"delivery_p50_seconds"`
	DeliveryP99Seconds *float64 `json:"delivery_p99_seconds"`
	// FanoutEntriesPerSecond is feed entries written a second.
	FanoutEntriesPerSecond float64 `json:"fanout_entries_per_second"`
	// FanoutTicketsPerSecond is tickets processed a second, every outcome.
	FanoutTicketsPerSecond float64 `json:"fanout_tickets_per_second"`
}

// Samples is the charts' data: the last samples, oldest first.
type Samples struct {
	SampleEverySeconds float64  `json:"sample_every_seconds"`
	Samples            []Sample `json:"samples"`
}

// reading is the metrics' cumulative values at one moment.
type reading struct {
	at      time.Time
	bounds  []float64 // the histogram's upper bounds, +Inf last
	counts  []float64 // cumulative count of each bound
	entries float64
	tickets float64
}

// sampler reads the process's registry every interval and keeps the
// differences between readings in a ring of the last keep samples.
type sampler struct {
	gatherer prometheus.Gatherer
	every    time.Duration
	keep     int

	mu      sync.Mutex
	samples []Sample // oldest first, at most keep
	last    *reading
}

func newSampler(g prometheus.Gatherer, every time.Duration, keep int) *sampler {
	return &sampler{gatherer: g, every: every, keep: keep}
}

func (s *sampler) run(ctx context.Context, log *zap.Logger) {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		if err := s.sample(time.Now()); err != nil {
			log.Warn("operator console: cannot read the process's metrics; this point of the charts is skipped", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample takes a reading and, from the second on, adds a sample.
func (s *sampler) sample(now time.Time) error {
	families, err := s.gatherer.Gather()
	if err != nil {
		return err
	}
	cur := read(families, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil {
		s.samples = append(s.samples, between(s.last, cur))
		if over := len(s.samples) - s.keep; over > 0 {
			s.samples = append(s.samples[:0], s.samples[over:]...)
		}
	}
	s.last = cur
	return nil
}

// snapshot returns a copy of the samples.
func (s *sampler) snapshot() Samples {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Samples{SampleEverySeconds: s.every.Seconds(), Samples: append([]Sample{}, s.samples...)}
}

// read takes the charts' metrics from a gather; a metric the registry does
// not have reads as zero.
func read(families []*dto.MetricFamily, at time.Time) *reading {
	r := &reading{at: at}
	for _, f := range families {
		switch f.GetName() {
		case entriesMetric:
			for _, m := range f.GetMetric() {
				r.entries += m.GetCounter().GetValue()
			}
		case ticketsMetric:
			for _, m := range f.GetMetric() {
				r.tickets += m.GetCounter().GetValue()
			}
		case deliveryMetric:
			if ms := f.GetMetric(); len(ms) == 1 {
				h := ms[0].GetHistogram()
				for _, b := range h.GetBucket() {
					r.bounds = append(r.bounds, b.GetUpperBound())
					r.counts = append(r.counts, float64(b.GetCumulativeCount()))
				}
				r.bounds = append(r.bounds, math.Inf(1))
				r.counts = append(r.counts, float64(h.GetSampleCount()))
			}
		}
	}
	return r
}

// between is what happened from reading a to reading b.
func between(a, b *reading) Sample {
	seconds := b.at.Sub(a.at).Seconds()
	s := Sample{At: b.at.UTC()}
	if seconds > 0 {
		s.FanoutEntriesPerSecond = max(b.entries-a.entries, 0) / seconds
		s.FanoutTicketsPerSecond = max(b.tickets-a.tickets, 0) / seconds
	}
	if len(a.counts) != len(b.counts) || len(b.counts) == 0 {
		return s
	}
	counts := make([]float64, len(b.counts))
	for i := range counts {
		counts[i] = max(b.counts[i]-a.counts[i], 0)
	}
	s.Deliveries = counts[len(counts)-1]
	if s.Deliveries > 0 {
		p50, p99 := quantile(0.5, b.bounds, counts), quantile(0.99, b.bounds, counts)
		s.DeliveryP50Seconds, s.DeliveryP99Seconds = &p50, &p99
	}
	return s
}

// quantile estimates the q-quantile of observations counted in cumulative
// buckets (bounds ascending, +Inf last), as PromQL's histogram_quantile
// does: linearly within the bucket the rank falls in, from 0 for the first
// bucket, and the highest finite bound for a rank in the +Inf bucket.
func quantile(q float64, bounds, counts []float64) float64 {
	total := counts[len(counts)-1]
	rank := q * total
	for i, c := range counts {
		if c < rank || c == 0 {
			continue
		}
		if math.IsInf(bounds[i], 1) {
			if i == 0 {
				return 0
			}
			return bounds[i-1]
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = bounds[i-1], counts[i-1]
		}
		return lower + (bounds[i]-lower)*(rank-below)/(c-below)
	}
	return bounds[len(bounds)-1]
}

func (c *Console) metricSamples(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, c.samples.snapshot())
}
