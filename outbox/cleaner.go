package outbox

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/defaults"
	"github.com/newsfeed/newsfeed/internal/health"
)

// The defaults of a Cleaner's CleanerConfig, which app's configuration
// defaults are built from.
const (
	// DefaultRetention is how long finished rows are kept.
	DefaultRetention = 24 * time.Hour
	// DefaultCleanerInterval is the wait between two passes of the cleaner.
	DefaultCleanerInterval = time.Minute
	// DefaultCleanerTimeout bounds one pass of the cleaner.
	DefaultCleanerTimeout = 30 * time.Second
	// DefaultCleanerBatchSize is rows deleted per statement.
	DefaultCleanerBatchSize = 1000
)

// CleanerStore is what the cleaner needs from the outbox table.
type CleanerStore interface {
	// DeleteFinished deletes up to limit rows finished more than olderThan ago.
	DeleteFinished(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

// CleanerConfig configures a Cleaner. A zero field takes the default it
// names; a negative one makes NewCleaner return an error naming the field.
type CleanerConfig struct {
	// Retention keeps finished rows this long before they are deleted.
	// Defaults to DefaultRetention (24h).
	Retention time.Duration
	// Interval is the wait between passes; the first pass runs one Interval
	// after Run starts. Defaults to DefaultCleanerInterval (1m).
	Interval time.Duration
	// Timeout bounds one pass, its batches together, so that a DELETE that
	// hangs cannot stall the cleaner: the pass fails, is logged, and the
	// next one goes on where it stopped. Defaults to DefaultCleanerTimeout (30s).
	Timeout time.Duration
	// BatchSize is rows deleted per statement; a pass deletes batch after
	// batch until one is not full. Defaults to DefaultCleanerBatchSize (1000).
	BatchSize int
	// Metrics to update (newsfeed_outbox_cleaned_total). Defaults to
	// unregistered ones.
	Metrics *Metrics
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Outages, like the Dispatcher's, turns a failed pass that a known
	// outage explains into a debug line. nil: every failure is a warning.
	Outages Outages
}

// validate refuses the values out of range, naming each field. Zero is in
// range: it means the default.
func (c *CleanerConfig) validate() error {
	const config = "outbox.CleanerConfig"
	return errors.Join(
		defaults.NotNegative(config, "Retention", c.Retention, defaults.The(DefaultRetention)),
		defaults.NotNegative(config, "Interval", c.Interval, defaults.The(DefaultCleanerInterval)),
		defaults.NotNegative(config, "Timeout", c.Timeout, defaults.The(DefaultCleanerTimeout)),
		defaults.NotNegative(config, "BatchSize", c.BatchSize, defaults.The(DefaultCleanerBatchSize)),
	)
}

// withDefaults returns a valid c with every zero field set to its default.
func (c CleanerConfig) withDefaults() CleanerConfig {
	defaults.Fill(&c.Retention, DefaultRetention)
	defaults.Fill(&c.Interval, DefaultCleanerInterval)
	defaults.Fill(&c.Timeout, DefaultCleanerTimeout)
	defaults.Fill(&c.BatchSize, DefaultCleanerBatchSize)
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Cleaner deletes finished outbox rows once they are older than the
// retention, so that the table and its indexes stay small. It is a service
// of its own, beside the dispatchers: a slow cleanup delays no dispatch.
// Several may run at once (each deletes what it finds).
type Cleaner struct {
	store CleanerStore
	cfg   CleanerConfig
}

// NewCleaner builds a cleaner. It returns an error, naming the field, when
// cfg holds a value out of range.
func NewCleaner(store CleanerStore, cfg CleanerConfig) (*Cleaner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Cleaner{store: store, cfg: cfg.withDefaults()}, nil
}

// Run cleans every Interval until ctx ends, then returns nil. A failed pass
// is logged and the next one tries again.
func (c *Cleaner) Run(ctx context.Context) error {
	every := time.NewTicker(c.cfg.Interval)
	defer every.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-every.C:
		}
		if ctx.Err() != nil {
			return nil // both were ready: the end wins
		}
		if _, err := c.CleanOnce(ctx); err != nil && ctx.Err() == nil {
			health.Log(ctx, c.cfg.Outages, c.cfg.Logger, "outbox cleanup failed", err)
		}
	}
}

// CleanOnce runs one pass within Timeout: it deletes rows finished before
// the retention, batch after batch, until a batch is not full. It returns
// how many rows it deleted, also when it fails part way.
func (c *Cleaner) CleanOnce(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var total int64
	for {
		n, err := c.store.DeleteFinished(ctx, c.cfg.Retention, c.cfg.BatchSize)
		total += n
		c.cfg.Metrics.cleaned.Add(float64(n))
		if err != nil {
			return total, err
		}
		if n < int64(c.cfg.BatchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err // no next batch after a shutdown or the timeout
		}
	}
}
