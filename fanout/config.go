package fanout

import (
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/backoff"
)

// Config configures a Worker. Zero fields take the defaults named.
type Config struct {
	// Concurrency is tickets processed at once. Defaults to 64.
	Concurrency int
	// PageSize is followers read and written per round trip. Defaults to 1000.
	PageSize int
	// ChunkSize: a fan-out to more followers is split into chunks of this
	// many that any worker can take (fanout.chunk_size). Defaults to 5000.
	ChunkSize int
	// ClaimIdle is when a ticket held by a silent consumer is taken over;
	// the worker touches its own tickets well within it. Defaults to 30s.
	ClaimIdle time.Duration
	// MaxDeliveries: a ticket delivered more often (its workers keep dying)
	// is dead-lettered. Defaults to 5.
	MaxDeliveries int64
	// MaxAttempts before a failing event is dead. Defaults to 10.
	MaxAttempts int
	// Backoff spaces retries of a failing event. Defaults to backoff.DefaultSchedule.
	Backoff backoff.Schedule
	// RedeliverAfter is how far each heartbeat pushes the outbox row's
	// redelivery deadline. Defaults to 2m.
	RedeliverAfter time.Duration
	// ShutdownTimeout is how long Run lets in-flight tickets finish after its
	// context ends before cancelling them (they are redelivered). Defaults to 15s.
	ShutdownTimeout time.Duration
	// Consumer names this worker in the consumer group. Defaults to host-pid.
	Consumer string
	// Metrics to update. Defaults to unregistered ones.
	Metrics *Metrics
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

func (c *Config) setDefaults() {
	setDefault(&c.Concurrency, 64)
	setDefault(&c.PageSize, 1000)
	setDefault(&c.ChunkSize, 5000)
	setDefault(&c.ClaimIdle, 30*time.Second)
	setDefault(&c.MaxDeliveries, 5)
	setDefault(&c.MaxAttempts, 10)
	setDefault(&c.RedeliverAfter, 2*time.Minute)
	setDefault(&c.ShutdownTimeout, 15*time.Second)
	if c.Backoff == (backoff.Schedule{}) {
		c.Backoff = backoff.DefaultSchedule
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1e6)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
