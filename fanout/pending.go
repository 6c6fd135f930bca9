package fanout

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PendingFunc counts the tickets delivered to workers and not yet
// acknowledged (queue.Queue.Pending).
type PendingFunc func(ctx context.Context) (int64, error)

// PendingCollector exports newsfeed_queue_pending, read with a PendingFunc at
// every scrape. A read that fails does not report 0 — an empty queue is what
// an operator would conclude, and a false "drained" misleads alerts and
// autoscalers alike: the gauge repeats the last count it read (NaN, the
// Prometheus "unknown", until one read succeeded), and
// newsfeed_queue_pending_errors_total counts the failed reads, so that the
// outage itself is visible and alertable. The series never disappears:
// API.md requires it on every /metrics.
type PendingCollector struct {
	pending PendingFunc
	timeout time.Duration
	gauge   *prometheus.Desc
	errors  prometheus.Counter

	mu   sync.Mutex
	last float64
}

// NewPendingCollector builds a PendingCollector that reads with pending.
func NewPendingCollector(pending PendingFunc) *PendingCollector {
	return &PendingCollector{
		pending: pending,
		timeout: 2 * time.Second,
		gauge: prometheus.NewDesc("newsfeed_queue_pending",
			"Tickets delivered to workers and not yet acknowledged (the last count read; NaN before any read succeeded).", nil, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_queue_pending_errors_total",
			Help: "Reads of newsfeed_queue_pending that failed (the gauge kept its last value).",
		}),
		last: math.NaN(),
	}
}

// Describe implements prometheus.Collector.
func (c *PendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.gauge
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *PendingCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	n, err := c.pending(ctx)
	cancel()
	if err != nil {
		c.errors.Inc()
	} else {
		c.last = float64(n)
	}
	ch <- prometheus.MustNewConstMetric(c.gauge, prometheus.GaugeValue, c.last)
	ch <- c.errors
}
