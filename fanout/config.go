package fanout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/defaults"
)

// The defaults of Config: a zero field takes its default.
const (
	// DefaultConcurrency is tickets processed at once.
	DefaultConcurrency = 64
	// DefaultPageSize is followers read and written per round trip.
	DefaultPageSize = 1000
	// DefaultChunkSize is followers per chunk of a split fan-out.
	DefaultChunkSize = 5000
	// DefaultClaimIdle is how long a ticket held by a silent consumer waits
	// before another takes it over.
	DefaultClaimIdle = 30 * time.Second
	// DefaultMaxDeliveries is how often a ticket may be delivered before it
	// is dead-lettered.
	DefaultMaxDeliveries = 5
	// DefaultMaxAttempts is how often a failing event is tried before it is dead.
	DefaultMaxAttempts = 10
	// DefaultRedeliverAfter is how far each heartbeat pushes the outbox
	// row's redelivery deadline.
	DefaultRedeliverAfter = 2 * time.Minute
	// DefaultShutdownTimeout is how long Run lets in-flight tickets finish
	// after its context ends.
	DefaultShutdownTimeout = 15 * time.Second
)

// Config configures a Worker. A zero field takes the default named; a
// negative one is out of range, and New refuses it.
type Config struct {
	// Concurrency is tickets processed at once. Defaults to
	// DefaultConcurrency (64).
	Concurrency int
	// PageSize is followers read and written per round trip. Defaults to
	// DefaultPageSize (1000).
	PageSize int
	// ChunkSize: a fan-out to more followers is split into chunks of this
	// many that any worker can take (fanout.chunk_size). Defaults to
	// DefaultChunkSize (5000).
	ChunkSize int
	// ClaimIdle is when a ticket held by a silent consumer is taken over;
	// the worker touches its own tickets well within it. Defaults to
	// DefaultClaimIdle (30s).
	ClaimIdle time.Duration
	// ClaimInterval is how often the worker looks for tickets idle for
	// ClaimIdle. Defaults to half of ClaimIdle. (A shorter one lets a test
	// that sets the tickets' idle times itself see a take-over at once,
	// with a ClaimIdle no slow machine reaches.)
	ClaimInterval time.Duration
	// MaxDeliveries: a ticket delivered more often (its workers keep dying)
	// is dead-lettered. Defaults to DefaultMaxDeliveries (5).
	MaxDeliveries int64
	// MaxAttempts before a failing event is dead. Defaults to
	// DefaultMaxAttempts (10).
	MaxAttempts int
	// Backoff spaces retries of a failing event. Defaults to
	// backoff.DefaultSchedule; a negative Base or Max is out of range.
	Backoff backoff.Schedule
	// RedeliverAfter is how far each heartbeat pushes the outbox row's
	// redelivery deadline. Defaults to DefaultRedeliverAfter (2m).
	RedeliverAfter time.Duration
	// ShutdownTimeout is how long Run lets in-flight tickets finish after its
	// context ends before cancelling them (they are redelivered). Defaults to
	// DefaultShutdownTimeout (15s).
	ShutdownTimeout time.Duration
	// Consumer names this worker in the consumer group. Defaults to host-pid.
	Consumer string
	// Metrics to update. Defaults to unregistered ones.
	Metrics *Metrics
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Outages tells whether a dependency outage, logged once by whoever
	// watches the dependencies, explains a failure: it is then logged at
	// debug. nil: every failure is a warning.
	Outages Outages
	// TracerProvider traces each ticket's fan-out, as the child of the
	// trace context the ticket carries (the dispatcher's publish), and each
	// page of followers it writes. Defaults to none (the no-op provider).
	TracerProvider trace.TracerProvider
	// Live tells the readers who watch their feed (GET /v1/feed/stream)
	// what the worker changed in it. Defaults to nobody (no live streams).
	Live Live
}

// Live is told what changed in which feeds, after it was written, for the
// readers connected to a live stream (live.Publisher). It never fails a
// fan-out: what it does not bring, the streams find in the feeds.
type Live interface {
	// Pushed: post by author is in the feeds of followers now.
	Pushed(ctx context.Context, postID, authorID int64, followers []int64)
	// Unsure: the feeds of readers are not in Redis, and what they hold now
	// is for a read to learn (which rebuilds them).
	Unsure(ctx context.Context, readers []int64)
	// Removed: post left the feeds of readers.
	Removed(ctx context.Context, postID int64, readers []int64)
	// Pulled and Unpulled: a celebrity's post was added to, or deleted
	// from, their timeline.
	Pulled(ctx context.Context, postID, authorID int64)
	Unpulled(ctx context.Context, postID, authorID int64)
	// Followed and Unfollowed: follower's feed took in, or lost, followee's posts.
	Followed(ctx context.Context, follower, followee int64)
	Unfollowed(ctx context.Context, follower, followee int64)
	// Hid: what the feeds of readers hide changed (a mute, a block, or
	// their undoing); their streams read their feeds again.
	Hid(ctx context.Context, readers []int64)
}

// noLive is the Live of a deployment without streams.
type noLive struct{}

func (noLive) Pushed(context.Context, int64, int64, []int64) {}
func (noLive) Removed(context.Context, int64, []int64)       {}
func (noLive) Unsure(context.Context, []int64)               {}
func (noLive) Pulled(context.Context, int64, int64)          {}
func (noLive) Unpulled(context.Context, int64, int64)        {}
func (noLive) Followed(context.Context, int64, int64)        {}
func (noLive) Unfollowed(context.Context, int64, int64)      {}
func (noLive) Hid(context.Context, []int64)                  {}

// validate refuses the values out of range, naming each field. Zero is in
// range: it means the default.
func (c *Config) validate() error {
	return errors.Join(
		nonNegative("Concurrency", c.Concurrency, DefaultConcurrency),
		nonNegative("PageSize", c.PageSize, DefaultPageSize),
		nonNegative("ChunkSize", c.ChunkSize, DefaultChunkSize),
		nonNegative("ClaimIdle", c.ClaimIdle, DefaultClaimIdle),
		defaults.NotNegative("fanout.Config", "ClaimInterval", c.ClaimInterval, "half of ClaimIdle"),
		nonNegative("MaxDeliveries", c.MaxDeliveries, DefaultMaxDeliveries),
		nonNegative("MaxAttempts", c.MaxAttempts, DefaultMaxAttempts),
		nonNegativeBackoff("Backoff.Base", c.Backoff.Base),
		nonNegativeBackoff("Backoff.Max", c.Backoff.Max),
		nonNegative("RedeliverAfter", c.RedeliverAfter, DefaultRedeliverAfter),
		nonNegative("ShutdownTimeout", c.ShutdownTimeout, DefaultShutdownTimeout),
	)
}

func nonNegative[T defaults.Number](field string, v, def T) error {
	return defaults.NotNegative("fanout.Config", field, v, defaults.The(def))
}

// nonNegativeBackoff checks a field of Backoff, which takes its default
// (backoff.DefaultSchedule) only as a whole, when both fields are zero.
func nonNegativeBackoff(field string, v time.Duration) error {
	if v >= 0 {
		return nil
	}
	return fmt.Errorf("fanout: Config.%s is %v, out of range: it must not be negative", field, v)
}

// setDefaults fills the zero fields of a valid Config.
func (c *Config) setDefaults() {
	defaults.Fill(&c.Concurrency, DefaultConcurrency)
	defaults.Fill(&c.PageSize, DefaultPageSize)
	defaults.Fill(&c.ChunkSize, DefaultChunkSize)
	defaults.Fill(&c.ClaimIdle, DefaultClaimIdle)
	defaults.Fill(&c.ClaimInterval, c.ClaimIdle/2)
	defaults.Fill(&c.MaxDeliveries, DefaultMaxDeliveries)
	defaults.Fill(&c.MaxAttempts, DefaultMaxAttempts)
	defaults.Fill(&c.RedeliverAfter, DefaultRedeliverAfter)
	defaults.Fill(&c.ShutdownTimeout, DefaultShutdownTimeout)
	if c.Backoff == (backoff.Schedule{}) {
		c.Backoff = backoff.DefaultSchedule
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1e6)
	}
	if c.Live == nil {
		c.Live = noLive{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
}
