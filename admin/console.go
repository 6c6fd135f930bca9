// Package admin is the operator console: a page at /admin and the JSON API
// behind it under /admin/api/, served on the ops server (metrics.addr) of
// every role, never on the public API's address. It shows what the process
// it runs in can see: the outbox's counts and its dead events, each with a
// button that retries it (`newsfeed outbox retry-dead --id N`), the ticket
// streams' pending lists per consumer and partition, charts of delivery
// latency and fan-out rate sampled from the process's own metrics, and the
// configuration in effect with its secrets masked.
//
// The API needs admin.token as a bearer token (compared in constant time),
// which the page asks for and sends from JavaScript: no cookie, so no
// request can be forged from another site. Without a token the console is
// off (403), unless Config.Open (--dev) leaves it open to whoever reaches
// the ops server.
//
// Each panel reads one dependency through an endpoint of its own: with
// PostgreSQL or Redis down, that panel says so (503 unavailable, naming
// the dependency) and the others go on. The package owns the small
// interfaces it needs (Outbox, Queue); app hands it the store and the queue.
package admin

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/defaults"

	"github.com/newsfeed/newsfeed/domain"
)

// Path is where the console's page is served; its files are under
// Path+"/assets/" and its API under Path+"/api/".
const Path = "/admin"

// Defaults of Config.
const (
	DefaultSampleEvery       = 5 * time.Second
	DefaultSamples           = 180 // 15 minutes at DefaultSampleEvery
	DefaultDependencyTimeout = 3 * time.Second
)

// Outbox is what the console reads and repairs in the outbox (the store).
type Outbox interface {
	// OutboxStats counts the outbox rows by state.
	OutboxStats(ctx context.Context) (domain.OutboxStats, error)
	// DeadEvents returns up to limit dead events, the last to die first,
	// and how many are dead in all.
	DeadEvents(ctx context.Context, limit int) ([]domain.DeadEvent, int64, error)
	// RetryDeadEvent makes the dead event id pending again with fresh
	// counts. An event that is not dead is left alone: the error wraps
	// domain.ErrNotDead and says its status, or wraps domain.ErrNotFound
	// when there is no such event.
	RetryDeadEvent(ctx context.Context, id int64) error
}

// Queue is what the console reads of the ticket queue.
type Queue interface {
	// Inspect returns every partition's stream length, pending list by
	// consumer and dead letters.
	Inspect(ctx context.Context) ([]domain.QueuePartition, error)
}

// Setting is one configuration key as the console shows it. Value must be
// masked already: the console shows it as it is given.
type Setting struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Process describes the process the console runs in.
type Process struct {
	// Roles are the roles it runs (serve, dispatch, work).
	Roles []string
	// Version is its version line, as `newsfeed version` prints it.
	Version string
	// StartedAt is when it started.
	StartedAt time.Time
}

// Config configures a Console. A zero field takes its default; a negative
// one makes New return an error naming the field.
type Config struct {
	// Token is admin.token: every API request must carry it as a bearer
	// token. Empty turns the console off, unless Open.
	Token string
	// Open serves the console to anybody without a token (--dev with no
	// admin.token). Ignored when Token is set.
	Open bool
	// Outbox and Queue are read by the panels; both are required.
	Outbox Outbox
	Queue  Queue
	// Gatherer is the process's own metrics registry, which the charts
	// sample. Required.
	Gatherer prometheus.Gatherer
	// Settings are the configuration in effect, secrets masked.
	Settings []Setting
	// Process describes the process, for the page's header.
	Process Process
	// SampleEvery is how often the metrics are sampled for the charts.
	// Defaults to DefaultSampleEvery (5s).
	SampleEvery time.Duration
	// Samples is how many samples the charts keep. Defaults to
	// DefaultSamples (180).
	Samples int
	// DependencyTimeout bounds each panel's read of PostgreSQL or Redis,
	// so that a dependency that hangs answers 503 instead of hanging the
	// panel. Defaults to DefaultDependencyTimeout (3s).
	DependencyTimeout time.Duration
	// Logger receives the operators' actions (a retry) and what fails.
	// Defaults to a no-op logger.
	Logger *zap.Logger
}

// Console is the operator console: an http.Handler for Path and everything
// under it, and the sampler of the charts (Run).
type Console struct {
	cfg       Config
	tokenHash [sha256.Size]byte
	handler   http.Handler
	samples   *sampler
	log       *zap.Logger
}

// New checks cfg and builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Outbox == nil || cfg.Queue == nil || cfg.Gatherer == nil {
		return nil, errors.New("admin: Config.Outbox, Config.Queue and Config.Gatherer are required")
	}
	if err := errors.Join(
		defaults.NotNegative("admin.Config", "SampleEvery", cfg.SampleEvery, defaults.The(DefaultSampleEvery)),
		defaults.NotNegative("admin.Config", "Samples", cfg.Samples, defaults.The(DefaultSamples)),
		defaults.NotNegative("admin.Config", "DependencyTimeout", cfg.DependencyTimeout, defaults.The(DefaultDependencyTimeout)),
	); err != nil {
		return nil, err
	}
	defaults.Fill(&cfg.SampleEvery, DefaultSampleEvery)
	defaults.Fill(&cfg.Samples, DefaultSamples)
	defaults.Fill(&cfg.DependencyTimeout, DefaultDependencyTimeout)
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Token != "" {
		cfg.Open = false
	}
	c := &Console{
		cfg:       cfg,
		tokenHash: sha256.Sum256([]byte(cfg.Token)),
		samples:   newSampler(cfg.Gatherer, cfg.SampleEvery, cfg.Samples),
		log:       cfg.Logger,
	}
	c.handler = c.routes()
	return c, nil
}

// Mode says how the console is reached: "token", "open" or "off".
func (c *Console) Mode() string {
	switch {
	case c.cfg.Token != "":
		return "token"
	case c.cfg.Open:
		return "open"
	}
	return "off"
}

// ServeHTTP answers Path and every path under it.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.handler.ServeHTTP(w, r)
}

// Run samples the process's metrics for the charts until ctx ends. It
// returns nil then; sampling never fails the process (a gather error is
// logged and the point skipped).
func (c *Console) Run(ctx context.Context) error {
	if c.Mode() == "off" {
		<-ctx.Done()
		return nil
	}
	c.samples.run(ctx, c.log)
	return nil
}
