// Package outbox delivers the intents that the API records beside each change:
// the dispatcher claims due outbox rows, publishes them to the queue, and
// marks them published only after the queue accepted them. Retries back off
// exponentially with jitter; a row that keeps failing is parked as dead. The
// cleaner (cleaner.go), a service of its own, deletes finished rows after
// their retention.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/defaults"
	"github.com/newsfeed/newsfeed/internal/health"
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
	// Postpone makes the row due again after retryIn without counting a
	// failure (a dependency was not ready: domain.ErrUnavailable).
	Postpone(ctx context.Context, id int64, retryIn time.Duration, cause string) error
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

// The defaults of a Dispatcher's Config, which app's configuration defaults
// are built from.
const (
	// DefaultBatchSize is rows claimed per round trip.
	DefaultBatchSize = 500
	// DefaultPollInterval is the longest sleep between claims.
	DefaultPollInterval = 500 * time.Millisecond
	// DefaultLease is how long a claim is exclusive.
	DefaultLease = 30 * time.Second
	// DefaultRedeliverAfter is when a published but unfinished row is
	// published again.
	DefaultRedeliverAfter = 2 * time.Minute
	// DefaultMaxAttempts is attempts before a row is dead.
	DefaultMaxAttempts = 10
	// DefaultPassTimeout bounds one DispatchOnce (unless Lease is longer).
	DefaultPassTimeout = 30 * time.Second
)

// Config configures a Dispatcher. A zero field takes the default it names; a
// negative one makes NewDispatcher return an error naming the field.
type Config struct {
	// BatchSize is rows claimed per round trip. Defaults to DefaultBatchSize (500).
	BatchSize int
	// PollInterval is the longest sleep between claims. Defaults to
	// DefaultPollInterval (500ms).
	PollInterval time.Duration
	// Lease is how long a claim is exclusive. Defaults to DefaultLease (30s).
	Lease time.Duration
	// RedeliverAfter is when a published but unfinished row is published
	// again. Defaults to DefaultRedeliverAfter (2m).
	RedeliverAfter time.Duration
	// MaxAttempts before a row is dead. Defaults to DefaultMaxAttempts (10).
	MaxAttempts int
	// Backoff spaces retries. A zero Base or Max takes backoff.DefaultSchedule's
	// (1s, 1h).
	Backoff backoff.Schedule
	// PassTimeout bounds one pass of DispatchOnce (claim, publish, record),
	// so that a query or a queue that hangs cannot stall the loop: the pass
	// fails and Run retries with backoff. Defaults to DefaultPassTimeout
	// (30s), or to Lease when that is longer (past its lease a batch may be
	// claimed by another dispatcher anyway).
	PassTimeout time.Duration
	// Wake, if set, wakes the dispatcher before PollInterval ends (a
	// LISTEN/NOTIFY listener sends on it).
	Wake <-chan struct{}
	// Metrics to update. Defaults to unregistered ones.
	Metrics *Metrics
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Outages tells whether a dependency outage, logged once by whoever
	// watches the dependencies, explains a failed pass: the pass is then
	// logged at debug. nil: every failure is a warning.
	Outages Outages
	// TracerProvider traces each claim that returns rows, and each event's
	// publish as the child of the trace context its row keeps (linked to
	// the claim); the ticket carries the publish's context on. Defaults to
	// none (the no-op provider): the stored context is passed on as it is.
	TracerProvider trace.TracerProvider
}

// Outages tells whether a known outage of a dependency explains an error
// (health.Watch).
type Outages interface {
	// Explained reports whether err is explained by a dependency outage
	// that is already logged.
	Explained(ctx context.Context, err error) bool
}

// validate refuses the values out of range, naming each field. Zero is in
// range: it means the default.
func (c *Config) validate() error {
	return errors.Join(
		notNegative("BatchSize", c.BatchSize, defaults.The(DefaultBatchSize)),
		notNegative("PollInterval", c.PollInterval, defaults.The(DefaultPollInterval)),
		notNegative("Lease", c.Lease, defaults.The(DefaultLease)),
		notNegative("RedeliverAfter", c.RedeliverAfter, defaults.The(DefaultRedeliverAfter)),
		notNegative("MaxAttempts", c.MaxAttempts, defaults.The(DefaultMaxAttempts)),
		notNegative("Backoff.Base", c.Backoff.Base, defaults.The(backoff.DefaultSchedule.Base)),
		notNegative("Backoff.Max", c.Backoff.Max, defaults.The(backoff.DefaultSchedule.Max)),
		notNegative("PassTimeout", c.PassTimeout, defaults.The(DefaultPassTimeout)+" (or Lease, if longer)"),
	)
}

func notNegative[T defaults.Number](field string, v T, zero string) error {
	return defaults.NotNegative("outbox.Config", field, v, zero)
}

// withDefaults returns a valid c with every zero field set to its default.
func (c Config) withDefaults() Config {
	defaults.Fill(&c.BatchSize, DefaultBatchSize)
	defaults.Fill(&c.PollInterval, DefaultPollInterval)
	defaults.Fill(&c.Lease, DefaultLease)
	defaults.Fill(&c.RedeliverAfter, DefaultRedeliverAfter)
	defaults.Fill(&c.MaxAttempts, DefaultMaxAttempts)
	defaults.Fill(&c.Backoff.Base, backoff.DefaultSchedule.Base)
	defaults.Fill(&c.Backoff.Max, backoff.DefaultSchedule.Max)
	defaults.Fill(&c.PassTimeout, max(DefaultPassTimeout, c.Lease)) // after Lease
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	return c
}

// Dispatcher moves due outbox rows into the queue. Several may run at once.
type Dispatcher struct {
	store   Store
	pub     Publisher
	cfg     Config
	log     *zap.Logger
	metrics *Metrics
	tracer  trace.Tracer
}

// instrumentationName names the dispatcher's tracer.
const instrumentationName = "github.com/newsfeed/newsfeed/outbox"

// Metrics are the Prometheus metrics of the dispatcher and the cleaner.
type Metrics struct {
	published prometheus.Counter
	failed    prometheus.Counter
	dead      prometheus.Counter
	cleaned   prometheus.Counter
}

// NewMetrics builds the dispatcher and cleaner metrics and registers them with reg, if not nil.
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

// NewDispatcher builds a dispatcher. It returns an error, naming the field,
// when cfg holds a value out of range.
func NewDispatcher(store Store, pub Publisher, cfg Config) (*Dispatcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Dispatcher{store: store, pub: pub, cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics,
		tracer: cfg.TracerProvider.Tracer(instrumentationName)}, nil
}

// Run dispatches until ctx is done. Failures of PostgreSQL or the queue are
// logged and retried with backoff; Run returns only when ctx ends, with nil.
// Finished rows are deleted by a Cleaner, which runs beside it.
func (d *Dispatcher) Run(ctx context.Context) error {
	poll := time.NewTimer(0)
	defer poll.Stop()
	var errWait backoff.Doubling
	wake := d.cfg.Wake
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
		}
		n, err := d.DispatchOnce(ctx)
		next := d.cfg.PollInterval
		wake = d.cfg.Wake
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			next = errWait.Next()
			// While backing off, new writes do not cut the wait short: a
			// dependency that is down would be hit once per post.
			wake = nil
			health.Log(ctx, d.cfg.Outages, d.log, "dispatch failed; retrying", err, zap.Duration("retry_in", next))
		case n == d.cfg.BatchSize:
			errWait.Reset()
			next = 0 // a full batch: there is probably more
		default:
			errWait.Reset()
		}
		poll.Reset(next)
	}
}

// DispatchOnce claims one batch, publishes it, and records the outcome,
// within PassTimeout. It returns how many rows it claimed.
func (d *Dispatcher) DispatchOnce(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.PassTimeout)
	defer cancel()
	claimedAt := time.Now()
	events, err := d.store.Claim(ctx, d.cfg.BatchSize, d.cfg.Lease)
	if err == nil && len(events) == 0 {
		return 0, nil // an idle poll: no span
	}
	claim := d.claimSpan(ctx, claimedAt, len(events), err)
	if err != nil {
		return 0, err
	}
	claimed := len(events)
	// Rows due again after a publication: their ticket may still wait in the
	// queue (workers slow or down) and need no second one.
	var ids []int64
	var tickets []string
	events, ids, tickets = d.stillQueued(ctx, events)
	spans := d.startPublishSpans(ctx, claim, events)
	published, errs := d.pub.Publish(ctx, events)
	endPublishSpans(spans, published, errs)
	var failures []error
	var postponed []int64
	for i, e := range events {
		if errs[i] == nil {
			ids, tickets = append(ids, e.ID), append(tickets, published[i])
			continue
		}
		d.metrics.failed.Inc()
		if ferr := d.fail(ctx, e, fmt.Sprintf("publish: %v", errs[i]), errs[i]); ferr != nil {
			failures = append(failures, ferr) // the lease runs out and another claim retries it
		}
		if errors.Is(errs[i], domain.ErrUnavailable) {
			// Postponed, and no reason to slow down the other rows: one
			// shard's replica behind holds back its own partitions only.
			postponed = append(postponed, e.ID)
			continue
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
	if len(postponed) > 0 {
		d.log.Warn("tickets postponed: the queue's replicas are behind", zap.Int("rows", len(postponed)),
			zap.Int64s("outbox_ids", postponed[:min(len(postponed), 10)]))
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
		health.Log(ctx, d.cfg.Outages, d.log, "cannot check queued tickets; publishing again", err)
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

func (d *Dispatcher) fail(ctx context.Context, e domain.Event, cause string, err error) error {
	if errors.Is(err, domain.ErrUnavailable) {
		return d.store.Postpone(ctx, e.ID, d.cfg.Backoff.Postpone(e.Attempt), cause)
	}
	dead, err := d.store.Fail(ctx, e.ID, d.cfg.MaxAttempts, d.cfg.Backoff.Delay(e.Failures+1), cause)
	if dead {
		d.metrics.dead.Inc()
		d.log.Error("outbox event is dead", zap.Int64("outbox_id", e.ID), zap.String("type", e.Type),
			zap.Int("failures", e.Failures+1), zap.String("cause", cause))
	}
	return err
}
