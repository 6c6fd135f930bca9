package admin

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestQuantile: the estimate PromQL's histogram_quantile gives, linear
// within a bucket, from 0 below the first, and the highest finite bound for
// a rank past it.
func TestQuantile(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	bounds := []float64{0.1, 0.2, 0.4, inf}
	for _, tc := range []struct {
		name   string
		counts []float64
		q      float64
		want   float64
	}{
		{"all in the first bucket: from 0", []float64{10, 10, 10, 10}, 0.5, 0.05},
		{"the middle of the second bucket", []float64{0, 10, 10, 10}, 0.5, 0.15},
		{"the rank on a bucket's edge", []float64{5, 10, 10, 10}, 0.5, 0.1},
		{"p99 of an even spread", []float64{25, 50, 100, 100}, 0.99, 0.396},
		{"past the last finite bound", []float64{0, 0, 1, 10}, 0.99, 0.4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, quantile(tc.q, bounds, tc.counts), 1e-9)
		})
	}
}

// TestSamplerDifferences: a sample is what happened between two readings
// of the registry — deliveries, their quantiles, and rates a second — and
// the ring keeps the last ones only.
func TestSamplerDifferences(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	delivery := prometheus.NewHistogram(prometheus.HistogramOpts{Name: deliveryMetric, Buckets: []float64{0.1, 0.2, 0.4}})
	entries := prometheus.NewCounter(prometheus.CounterOpts{Name: entriesMetric})
	tickets := prometheus.NewCounterVec(prometheus.CounterOpts{Name: ticketsMetric}, []string{"type", "outcome"})
	reg.MustRegister(delivery, entries, tickets)
	s := newSampler(reg, time.Second, 2)
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

	delivery.Observe(5) // before the first reading: in no sample
	require.NoError(t, s.sample(at))
	require.Empty(t, s.snapshot().Samples, "one reading is no difference yet")

	for range 10 {
		delivery.Observe(0.15)
	}
	entries.Add(1000)
	tickets.WithLabelValues("post.created", "done").Add(8)
	tickets.WithLabelValues("follow.created", "done").Add(2)
	require.NoError(t, s.sample(at.Add(10*time.Second)))
	got := s.snapshot()
	require.Equal(t, 1.0, got.SampleEverySeconds)
	require.Len(t, got.Samples, 1)
	first := got.Samples[0]
	require.Equal(t, at.Add(10*time.Second), first.At)
	require.Equal(t, 10.0, first.Deliveries)
	require.InDelta(t, 0.15, *first.DeliveryP50Seconds, 1e-9)
	require.InDelta(t, 0.199, *first.DeliveryP99Seconds, 1e-9)
	require.Equal(t, 100.0, first.FanoutEntriesPerSecond)
	require.Equal(t, 1.0, first.FanoutTicketsPerSecond)

	require.NoError(t, s.sample(at.Add(20*time.Second)))
	quiet := s.snapshot().Samples[1]
	require.Zero(t, quiet.Deliveries)
	require.Nil(t, quiet.DeliveryP50Seconds, "no deliveries: no latency, not 0")
	require.Nil(t, quiet.DeliveryP99Seconds)
	require.Zero(t, quiet.FanoutEntriesPerSecond)

	require.NoError(t, s.sample(at.Add(30*time.Second)))
	kept := s.snapshot().Samples
	require.Len(t, kept, 2, "the ring keeps the last 2")
	require.Equal(t, at.Add(20*time.Second), kept[0].At)
	require.Equal(t, at.Add(30*time.Second), kept[1].At)
}
