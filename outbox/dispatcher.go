// Package outbox delivers the intents that the API records beside each change:
// the dispatcher claims due outbox rows, publishes them to the queue, and
// marks them published only after the queue accepted them. Retries back off
// exponentially with jitter; a row that keeps failing is parked as dead.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/backoff"
)

// Store is what the dispatcher needs from the outbox table.
type Store interface {
	// Claim leases up to limit due rows for lease and counts an attempt on each.
	Claim(ctx context.Context, limit int, lease time.Duration) ([]domain.Event, error)
	// MarkPublished records that the queue holds tickets[i] for row ids[i];
	// they are due again after redeliverAfter unless a worker finishes them.
	MarkPublished(ctx context.Context, ids []int64, tickets []string, redeliverAfter time.Duration) error
	// Fail records a failed attempt and reports whether the row is now dead
	// (its maxAttempts-th failure).
	Fail(ctx context.Context, id int64, maxAttempts int, retryIn time.Duration, cause string) (dead bool, err error)
	// DeleteFinished deletes up to limit rows finished more than olderThan ago.
	DeleteFinished(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

// Publisher puts events in the queue.
type Publisher interface {
	// Publish returns, per event, the ticket id the queue gave it or the
	// error it gave instead.
	Publish(ctx context.Context, events []domain.Event) (tickets []string, errs []error)
	// Holds reports, per ticket id, whether the queue still holds the ticket
	// (waiting or in progress).
	Holds(ctx context.Context, tickets []string) ([]bool, error)
}

// Config configures a Dispatcher. Zero fields take the defaults named.
type Config struct {
	// BatchSize is rows claimed per round trip. Defaults to 500.
	BatchSize int
	// PollInterval is the longest sleep between claims. Defaults to 500ms.
	PollInterval time.Duration
	// Lease is how long a claim is exclusive. Defaults to 30s.
	Lease time.Duration
	// RedeliverAfter is when a published but unfinished row is published
	// again. Defaults to 2m.
	RedeliverAfter time.Duration
	// MaxAttempts before a row is dead. Defaults to 10.
	MaxAttempts int
	// Backoff spaces retries. Defaults to backoff.DefaultSchedule.
	Backoff backoff.Schedule
	// Retention keeps finished rows this long before the cleaner deletes
	// them. Defaults to 24h.
	Retention time.Duration
	// Wake, if set, wakes the dispatcher before PollInterval ends (a
	// LISTEN/NOTIFY listener sends on it).
	Wake <-chan struct{}
	// Metrics to update. Defaults to unregistered ones.
	Metrics *Metrics
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

func (c *Config) setDefaults() {
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.RedeliverAfter <= 0 {
		c.RedeliverAfter = 2 * time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.Backoff == (backoff.Schedule{}) {
		c.Backoff = backoff.DefaultSchedule
	}
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Dispatcher moves due outbox rows into the queue. Several may run at once.
type Dispatcher struct {
	store   Store
	pub     Publisher
	cfg     Config
	log     *zap.Logger
	metrics *Metrics
}

// Metrics are the dispatcher's Prometheus metrics.
type Metrics struct {
	published prometheus.Counter
	failed    prometheus.Counter
	dead      prometheus.Counter
	cleaned   prometheus.Counter
}

// NewMetrics builds the dispatcher metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_outbox_published_total", Help: "Outbox events the queue accepted.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_outbox_publish_failures_total", Help: "Outbox events the queue refused, to be retried.",
		}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_outbox_dead_total", Help: "Outbox events parked as dead by this process's dispatcher.",
		}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_outbox_cleaned_total", Help: "Finished outbox rows deleted after retention.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.failed, m.dead, m.cleaned)
	}
	return m
}

// NewDispatcher builds a dispatcher.
func NewDispatcher(store Store, pub Publisher, cfg Config) *Dispatcher {
	cfg.setDefaults()
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Dispatcher{store: store, pub: pub, cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics}
}

// Run dispatches until ctx is done. Failures of PostgreSQL or the queue are
// logged and retried with backoff; Run returns only when ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	cleanEvery := time.NewTicker(time.Minute)
	defer cleanEvery.Stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	var errWait backoff.Doubling
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-cleanEvery.C:
			d.clean(ctx)
			continue
		case <-d.cfg.Wake:
		case <-poll.C:
		}
		n, err := d.DispatchOnce(ctx)
		next := d.cfg.PollInterval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			next = errWait.Next()
			d.log.Warn("dispatch failed; retrying", zap.Error(err), zap.Duration("retry_in", next))
		case n == d.cfg.BatchSize:
			errWait.Reset()
			next = 0 // a full batch: there is probably more
		default:
			errWait.Reset()
		}
		poll.Reset(next)
	}
}

// DispatchOnce claims one batch, publishes it, and records the outcome. It
// returns how many rows it claimed.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	events, err := d.store.Claim(ctx, d.cfg.BatchSize, d.cfg.Lease)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	claimed := len(events)
	// Rows due again after a publication: their ticket may still wait in the
	// queue (workers slow or down) and need no second one.
	var ids []int64
	var tickets []string
	events, ids, tickets = d.stillQueued(ctx, events)
	published, errs := d.pub.Publish(ctx, events)
	var failures []error
	for i, e := range events {
		if errs[i] == nil {
			ids, tickets = append(ids, e.ID), append(tickets, published[i])
			continue
		}
		d.metrics.failed.Inc()
		if ferr := d.fail(ctx, e, fmt.Sprintf("publish: %v", errs[i])); ferr != nil {
			failures = append(failures, ferr) // the lease runs out and another claim retries it
		}
		failures = append(failures, fmt.Errorf("publish outbox row %d: %w", e.ID, errs[i]))
	}
	if len(ids) > 0 {
		// If this fails the lease runs out, the rows are published again and
		// workers, being idempotent, do the fan-out a second time harmlessly.
		if err := d.store.MarkPublished(ctx, ids, tickets, d.cfg.RedeliverAfter); err != nil {
			failures = append(failures, err)
		} else {
			d.metrics.published.Add(float64(len(ids)))
		}
	}
	return claimed, errors.Join(failures...)
}

// stillQueued splits off the events whose last ticket the queue still holds,
// returning the others and the ids and tickets of those it split off. When
// the queue cannot tell, every event is published again: a duplicate ticket
// is harmless, a lost one is not.
func (d *Dispatcher) stillQueued(ctx context.Context, events []domain.Event) (rest []domain.Event, ids []int64, tickets []string) {
	var old []domain.Event
	for _, e := range events {
		if e.Ticket != "" {
			old = append(old, e)
		}
	}
	if len(old) == 0 {
		return events, nil, nil
	}
	oldTickets := make([]string, len(old))
	for i, e := range old {
		oldTickets[i] = e.Ticket
	}
	held, err := d.pub.Holds(ctx, oldTickets)
	if err != nil {
		d.log.Warn("cannot check queued tickets; publishing again", zap.Error(err))
		return events, nil, nil
	}
	heldByID := make(map[int64]bool, len(old))
	for i, e := range old {
		heldByID[e.ID] = held[i]
	}
	for _, e := range events {
		if heldByID[e.ID] {
			ids, tickets = append(ids, e.ID), append(tickets, e.Ticket)
		} else {
			rest = append(rest, e)
		}
	}
	return rest, ids, tickets
}

func (d *Dispatcher) fail(ctx context.Context, e domain.Event, cause string) error {
	dead, err := d.store.Fail(ctx, e.ID, d.cfg.MaxAttempts, d.cfg.Backoff.Delay(e.Failures+1), cause)
	if dead {
		d.metrics.dead.Inc()
		d.log.Error("outbox event is dead", zap.Int64("outbox_id", e.ID), zap.String("type", e.Type),
			zap.Int("failures", e.Failures+1), zap.String("cause", cause))
	}
	return err
}

// clean deletes finished rows past retention in batches, so that the table
// and its indexes stay small.
func (d *Dispatcher) clean(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := d.store.DeleteFinished(ctx, d.cfg.Retention, 1000)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("outbox cleanup failed", zap.Error(err))
			}
			return
		}
		d.metrics.cleaned.Add(float64(n))
		if n < 1000 {
			return
		}
	}
}
