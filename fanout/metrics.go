package fanout

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the worker's Prometheus metrics. Every role registers them, so
// that every process exports the names API.md lists; a process that does no
// fan-out exports zeros.
type Metrics struct {
	entries  prometheus.Counter
	delivery prometheus.Histogram
	tickets  *prometheus.CounterVec
}

// NewMetrics builds the worker metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_fanout_entries_total", Help: "Feed entries written by fan-out (a redelivery's repeats of an entry not counted).",
		}),
		delivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "newsfeed_delivery_seconds",
			Help:    "Time from a post's creation to the end of its fan-out.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
		}),
		tickets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "newsfeed_fanout_tickets_total", Help: "Tickets processed, by event type and outcome.",
		}, []string{"type", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.entries, m.delivery, m.tickets)
	}
	return m
}
