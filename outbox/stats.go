package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/newsfeed/newsfeed/domain"
)

// StatsFunc reads the current outbox counts.
type StatsFunc func(ctx context.Context) (domain.OutboxStats, error)

// DefaultStatsTTL is how long a Collector repeats the stats it read before
// it reads the table again.
const DefaultStatsTTL = time.Second

// Collector exports the outbox gauges that API.md names. It reads shared
// state, so any role may export it; a scrape reads the table at most once
// per TTL (DefaultStatsTTL) and repeats the last values it read while
// PostgreSQL is down; until a first read succeeds it exports nothing.
type Collector struct {
	statsFunc StatsFunc
	ttl       time.Duration
	now       func() time.Time

	mu      sync.Mutex
	last    domain.OutboxStats
	lastAt  time.Time
	pending *prometheus.Desc
	oldest  *prometheus.Desc
	dead    *prometheus.Desc
	flight  *prometheus.Desc
}

// CollectorOption changes a Collector that NewCollector builds.
type CollectorOption func(*Collector)

// WithStatsTTL sets how long the Collector repeats the stats it read before
// it reads again (DefaultStatsTTL when not set or not positive).
func WithStatsTTL(ttl time.Duration) CollectorOption {
	return func(c *Collector) {
		if ttl > 0 {
			c.ttl = ttl
		}
	}
}

// WithClock sets the clock that ages the stats (time.Now when not set).
func WithClock(now func() time.Time) CollectorOption {
	return func(c *Collector) {
		if now != nil {
			c.now = now
		}
	}
}

// NewCollector builds a Collector that reads stats with statsFunc.
func NewCollector(statsFunc StatsFunc, opts ...CollectorOption) *Collector {
	c := &Collector{
		statsFunc: statsFunc,
		ttl:       DefaultStatsTTL,
		now:       time.Now,
		pending:   prometheus.NewDesc("newsfeed_outbox_pending", "Outbox events not yet finished (waiting to be published or in flight).", nil, nil),
		oldest:    prometheus.NewDesc("newsfeed_outbox_oldest_pending_age_seconds", "Age of the oldest outbox event not yet finished.", nil, nil),
		dead:      prometheus.NewDesc("newsfeed_outbox_dead", "Outbox events parked as dead.", nil, nil),
		flight:    prometheus.NewDesc("newsfeed_outbox_in_flight", "Outbox events claimed or published and not finished.", nil, nil),
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.oldest
	ch <- c.dead
	ch <- c.flight
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastAt.IsZero() || c.now().Sub(c.lastAt) >= c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := c.statsFunc(ctx)
		cancel()
		if err == nil {
			c.last, c.lastAt = s, c.now()
		}
	}
	if c.lastAt.IsZero() {
		// Nothing read yet (PostgreSQL down since start): export nothing
		// rather than zeros that would read as an empty outbox.
		return
	}
	s := c.last
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(s.Pending+s.InFlight))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestPendingAge.Seconds())
	ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(s.Dead))
	ch <- prometheus.MustNewConstMetric(c.flight, prometheus.GaugeValue, float64(s.InFlight))
}
