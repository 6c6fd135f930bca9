// Package app wires newsfeed together: it reads the configuration, opens the
// PostgreSQL pools and the Redis client, builds every service, runs the roles
// that a command asks for, and closes everything in reverse order. It is the
// only package that knows every concrete type.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/live"
	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/newsfeed/newsfeed/ratelimit"
	"github.com/newsfeed/newsfeed/sticky"
	"github.com/newsfeed/newsfeed/store"
	"github.com/newsfeed/newsfeed/web"
)

// devSecret signs tokens in --dev mode when no auth.secret is configured.
// Anyone can read it here: never use --dev where strangers can reach the API.
const devSecret = "newsfeed-dev-secret-not-for-production" //nolint:gosec // public on purpose, for --dev only

// clusterStateReloadInterval bounds how long a Redis Cluster client keeps
// a slot map that a failover made stale.
const clusterStateReloadInterval = time.Second

// Role is one part of the system that a process can run.
type Role string

// The roles; `all` runs every one.
const (
	RoleServe    Role = "serve"
	RoleDispatch Role = "dispatch"
	RoleWork     Role = "work"
)

// System is everything a process has opened and built.
type System struct {
	Config  *Config
	Log     *zap.Logger
	Primary *pgxpool.Pool
	Read    *pgxpool.Pool
	// Redis is the client of the work no request waits for — the queue,
	// fan-out, live presence, the health watch, commands — whose calls may
	// take longer (backgroundRedis): WAIT, blocking reads.
	Redis redis.UniversalClient
	Store *store.DB
	Feeds *feed.Feeds
	Queue *queue.Queue

	// redisRequests is the client of the API's requests: each call bounded
	// in the low hundreds of milliseconds (requestRedis), so that a silent
	// Redis leaves a feed read the time to read PostgreSQL instead.
	redisRequests redis.UniversalClient

	// Dev is --dev: serve also answers POST /dev/token, which signs a
	// token for any user id (the web app's sign-in by id), and the operator
	// console is open without admin.token.
	Dev bool
	// Banner, when set (--dev), receives at start, once every listener is
	// bound, the web app's and the console's URLs and how to get a token.
	Banner io.Writer
	// Settings are the configuration in effect, secrets masked, with their
	// sources (EffectiveConfig): what the operator console shows.
	Settings []Setting

	fanoutFeeds *feed.Feeds // Feeds that wait for replicas, for the workers
	// live tells the processes that hold live streams what changed in
	// their readers' feeds; one per process, for the API and the workers.
	live *live.Publisher
	// hub holds the live streams of a process that serves the API.
	hub *live.Hub

	// health watches PostgreSQL and Redis: /readyz asks it, and it logs
	// each outage once, for every role.
	health *health.Watch
	// tracerProvider is nil with tracing off (no tracing.endpoint).
	tracerProvider trace.TracerProvider
	// draining turns /readyz 503 from the moment the process is asked to
	// stop (see Run).
	draining atomic.Bool
	// apiServers are told when the drain begins: their keep-alive
	// connections close after their next response.
	apiServersMu sync.Mutex
	apiServers   []*http.Server

	registry        *prometheus.Registry
	fanoutMetrics   *fanout.Metrics
	redisSettings   *prometheus.GaugeVec
	dispatchMetrics *outbox.Metrics
	closers         []func()
}

// Open connects to PostgreSQL and Redis, retrying for database.connect_wait,
// and builds the shared services. Close releases them. For a process that
// serves the API (roles include RoleServe), Redis unreachable at start is
// logged and the process starts anyway: writes need PostgreSQL alone, feed
// reads fall back to it, and the roles that need Redis retry until it answers.
func Open(ctx context.Context, cfg *Config, log *zap.Logger, roles ...Role) (*System, error) {
	s := &System{Config: cfg, Log: log}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()

	pools := func(url string) store.PoolConfig {
		return store.PoolConfig{URL: url, MaxConns: cfg.Database.MaxConns, ConnectWait: cfg.Database.ConnectWait,
			StatementTimeout: statementTimeout(cfg, roles)}
	}
	primary, err := store.Dial(ctx, pools(cfg.Database.URL))
	if err != nil {
		if store.IsDatabaseMissing(err) {
			return nil, fmt.Errorf("database.url: the database does not exist; run `newsfeed migrate` first: %w", err)
		}
		return nil, fmt.Errorf("database.url: %w", err)
	}
	s.Primary = primary
	s.closers = append(s.closers, primary.Close)
	s.Read = primary
	if cfg.Database.ReadURL != "" {
		read, err := store.Dial(ctx, pools(cfg.Database.ReadURL))
		if err != nil {
			return nil, fmt.Errorf("database.read_url: %w", err)
		}
		s.Read = read
		s.closers = append(s.closers, read.Close)
	}

	rdb, redisAnswered, err := connectRedis(ctx, cfg, log, slices.Contains(roles, RoleServe))
	if err != nil {
		return nil, err
	}
	s.Redis = rdb
	s.closers = append(s.closers, func() { _ = rdb.Close() })
	if s.redisRequests, err = newRedisClient(cfg, requestRedis); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = s.redisRequests.Close() })

	// The pings go through the background client: a Redis slower than a
	// request's budget is slow, not down. Each ping has the watch's
	// timeout (health.DefaultTimeout), whatever the client's.
	s.health = health.NewWatch(log.Named("health"), 0, 0,
		health.Dependency{Name: health.PostgreSQL, Key: "database.url", Ping: s.Primary.Ping},
		health.Dependency{Name: health.Redis, Key: "redis.url", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	if !redisAnswered {
		// Starting without Redis: the watch logs the outage (its one line
		// for it) and knows it from the first request on, so that feed
		// reads go to PostgreSQL at once; its return is logged as any.
		_ = s.health.Check(ctx)
	}
	tp, err := newTracerProvider(ctx, cfg, log, roles)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		s.tracerProvider = tp
		// First in, so last out: the spans of the stop are flushed.
		s.closers = append([]func(){func() { s.flushTraces(tp) }}, s.closers...)
	}

	s.Store = store.New(s.Primary, s.Read)
	s.registry = prometheus.NewRegistry()
	feeds := feed.Config{
		Prefix:   cfg.Redis.Prefix,
		MaxLen:   cfg.Feed.MaxLen,
		Backfill: cfg.Feed.Backfill,
		// A request waits for another reader's rebuild at most half its
		// time: the other half reads PostgreSQL instead.
		RebuildWait: min(cfg.Feed.RebuildWait, cfg.HTTP.RequestTimeout/2),
		ActiveTTL:   time.Duration(cfg.Feed.ActiveDays) * 24 * time.Hour,
		Cluster:     cfg.Redis.Cluster,

		CelebrityThreshold: cfg.Fanout.CelebrityThreshold,
		FollowingThreshold: cfg.Fanout.FollowingThreshold,
		Logger:             log.Named("feed"),
		Registerer:         s.registry, // reads count what they filter, pushes their reruns
	}
	// The API's writes to feeds are a head start that the events' fan-out
	// does again: only the workers wait for replicas (redis.wait_replicas).
	if s.Feeds, err = feed.New(s.redisRequests, s.Store, feeds); err != nil {
		return nil, err
	}
	feeds.WaitReplicas, feeds.WaitTimeout = cfg.Redis.WaitReplicas, cfg.Redis.WaitTimeout
	feeds.RebuildWait = cfg.Feed.RebuildWait
	if s.fanoutFeeds, err = feed.New(rdb, s.Store, feeds); err != nil {
		return nil, err
	}
	s.Queue, err = queue.NewPartitioned(rdb, queue.Config{
		Stream:     cfg.Redis.Prefix + cfg.Queue.Stream,
		Group:      cfg.Queue.Group,
		Partitions: cfg.Queue.Partitions,

		WaitReplicas: cfg.Redis.WaitReplicas,
		WaitTimeout:  cfg.Redis.WaitTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("queue.partitions: %w", err)
	}

	s.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		outbox.NewCollector(s.Store.OutboxStats),
		fanout.NewPendingCollector(s.Queue.Pending),
		buildInfoGauge(ReadBuildInfo()),
	)
	s.fanoutMetrics = fanout.NewMetrics(s.registry)
	s.dispatchMetrics = outbox.NewMetrics(s.registry)
	s.redisSettings = redisSettingsGauge(s.registry)
	ok = true
	return s, nil
}

// statementTimeout is the statement_timeout (and
// idle_in_transaction_session_timeout) of a process's PostgreSQL sessions:
// the longest any of its roles waits for a statement. A process that only
// serves the API has nothing longer than a request; background roles bound
// each pass, the dispatcher's at outbox.lease or outbox.DefaultPassTimeout.
func statementTimeout(cfg *Config, roles []Role) time.Duration {
	if len(roles) > 0 && !slices.ContainsFunc(roles, func(r Role) bool { return r != RoleServe }) {
		return cfg.HTTP.RequestTimeout
	}
	return max(cfg.HTTP.RequestTimeout, cfg.Outbox.Lease, outbox.DefaultPassTimeout)
}

// Close releases what Open opened, in reverse order.
func (s *System) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// redisLogger sends go-redis's own log lines to the process logger (at debug:
// every failure they report is also returned to, and reported by, a caller).
type redisLogger struct{ log *zap.SugaredLogger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) { l.log.Debugf(format, v...) }

// redisBounds are the timeouts of a Redis client (docs/DESIGN.md,
// "Timeouts"), go-redis's own: a silent Redis costs a call at most
// (retries + 1) × (read + backoff), a refused one (retries + 1) × dials.
type redisBounds struct {
	// read bounds each socket read and write (ReadTimeout, WriteTimeout);
	// a blocking read (XREADGROUP BLOCK) gets its block time on top, from
	// go-redis, and its caller's deadline (queue).
	read time.Duration
	// dial bounds one dial (DialTimeout); dials tries it that often
	// (DialerRetries) for one connection.
	dial  time.Duration
	dials int
	// pool bounds the wait for a pooled connection when all are busy
	// (PoolTimeout).
	pool time.Duration
	// retries is MaxRetries: go-redis tries a call again on a timeout or
	// a broken connection.
	retries int
}

var (
	// requestRedis bounds the API's calls: a silent Redis fails a call
	// within about 2 × 300 ms, and a feed read then reads PostgreSQL, well
	// within 2 s. One retry: a pooled connection that broke gets a fresh
	// one.
	requestRedis = redisBounds{read: 300 * time.Millisecond, dial: 500 * time.Millisecond, dials: 1,
		pool: 500 * time.Millisecond, retries: 1}
	// backgroundRedis bounds the calls no request waits for: 3 s reads
	// cover a WAIT of redis.wait_timeout (at most maxWaitTimeout) in a
	// pipeline; the loops bound each pass and each blocking read besides.
	backgroundRedis = redisBounds{read: 3 * time.Second, dial: 2 * time.Second, pool: 4 * time.Second, retries: 3}
)

// newRedisClient makes a client of redis.url (a Redis Cluster with
// redis.cluster) with bounds b. A context's deadline bounds the socket reads
// and writes too (ContextTimeoutEnabled), not only the wait for a
// connection: a Redis that accepts and never answers holds a call no longer
// than its caller allows (the rate limiter gives it 250 ms, a request
// http.request_timeout). TCP keepalive is go-redis's (30 s + 3 × 5 s).
func newRedisClient(cfg *Config, b redisBounds) (redis.UniversalClient, error) {
	poolSize := cfg.Fanout.Concurrency + 32 // one per in-flight ticket, plus readers and the API
	if cfg.Redis.Cluster {
		opts, err := redis.ParseClusterURL(cfg.Redis.URL)
		if err != nil {
			return nil, fmt.Errorf("redis.url: %w", err)
		}
		opts.PoolSize = poolSize
		opts.ContextTimeoutEnabled = true
		opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = b.read, b.read, b.pool
		opts.DialTimeout, opts.DialerRetries, opts.MaxRetries = b.dial, b.dials, b.retries
		// go-redis reloads the slot map on MOVED and ASK, but not when a
		// primary stops answering (redis/go-redis#3979): without this a
		// client dials a dead primary for up to a minute after its replica
		// took over. A reload is one CLUSTER SLOTS, in the background.
		opts.ClusterStateReloadInterval = clusterStateReloadInterval
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(cfg.Redis.URL)
	if err != nil {
		return nil, fmt.Errorf("redis.url: %w", err)
	}
	opts.PoolSize = poolSize
	opts.ContextTimeoutEnabled = true
	opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = b.read, b.read, b.pool
	opts.DialTimeout, opts.DialerRetries, opts.MaxRetries = b.dial, b.dials, b.retries
	return redis.NewClient(opts), nil
}

// connectRedis connects to redis.url with the background bounds, retrying
// for database.connect_wait. An optional Redis (a process that serves the
// API) is tried once: when it does not answer, the client is returned with
// answered false, and the process starts without it.
func connectRedis(ctx context.Context, cfg *Config, log *zap.Logger, optional bool) (rdb redis.UniversalClient, answered bool, err error) {
	redis.SetLogger(redisLogger{log.Named("redis").Sugar()})
	if rdb, err = newRedisClient(cfg, backgroundRedis); err != nil {
		return nil, false, err
	}
	err = backoff.Retry(ctx, cfg.Database.ConnectWait, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := rdb.Ping(ctx).Err()
		if optional {
			return backoff.Permanent(err) // no wait: the process starts without it
		}
		return err
	})
	switch {
	case err == nil:
		return rdb, true, nil
	case optional && ctx.Err() == nil:
		return rdb, false, nil
	default:
		_ = rdb.Close()
		return nil, false, fmt.Errorf("redis.url: cannot reach Redis: %w", err)
	}
}

// flushTraces sends the spans the tracer provider still holds, within
// shutdown_timeout.
func (s *System) flushTraces(tp *sdktrace.TracerProvider) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Config.ShutdownTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		s.Log.Warn("cannot flush the last spans", zap.String("key", "tracing.endpoint"), zap.Error(err))
	}
}

// errDraining is what /readyz says once the process was asked to stop.
var errDraining = errors.New("shutting down")

// Ready reports whether the process takes traffic: not stopping, and
// PostgreSQL and Redis answer. The error says which is not so (a
// *health.DownError names the dependency).
func (s *System) Ready(ctx context.Context) error {
	if s.draining.Load() {
		return errDraining
	}
	return s.health.Check(ctx)
}

// opsHandler serves /metrics, /healthz, /readyz and, when enabled, pprof.
func (s *System) opsHandler() http.Handler {
	mux := http.NewServeMux()
	// The Prometheus text format only, whatever the scraper prefers:
	// OpenMetrics names a counter's family without _total, so the counter
	// newsfeed_outbox_dead_total and the gauge newsfeed_outbox_dead (both in
	// the contract) would be one family twice there (docs/OPERATIONS.md,
	// Metrics and health; e2e TestMetricsPassPromtool).
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{EnableOpenMetrics: false}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// Not logged: an outage is logged once by the health watch, and a
		// balancer asks every few seconds.
		if err := s.Ready(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable,
				`{"error":{"code":"unavailable","message":"`+err.Error()+`"}}`)
			return
		}
		writeJSON(w, http.StatusOK, `{"status":"ready"}`)
	})
	if s.Config.Metrics.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body + "\n"))
}

// Run runs the roles until ctx ends, then stops them gracefully: /readyz
// answers 503 at once; a process that serves the API goes on answering for
// shutdown_drain, so that load balancers take it out before it stops
// accepting; then every role stops within shutdown_timeout. Every
// long-running piece runs in one errgroup: Run returns the error that
// stopped it (the first one a piece returned: a port already taken, say),
// or nil when ctx ended and everything stopped. A System runs one Run at a
// time: a process that wants its roles apart opens a System for each.
func (s *System) Run(ctx context.Context, roles []Role, secret []byte) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopDraining := context.AfterFunc(ctx, func() { s.drain(runCtx, slices.Contains(roles, RoleServe)); cancel() })
	defer stopDraining()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return s.health.Run(gctx) })
	g.Go(func() error { return s.checkRedisSettings(gctx) })
	if err := s.startRoles(gctx, g, roles, secret); err != nil {
		cancel() // what had started stops
		_ = g.Wait()
		return err
	}
	s.Log.Info("started", zap.Any("roles", roles), zap.String("http_addr", s.Config.HTTP.Addr),
		zap.String("metrics_addr", s.Config.Metrics.Addr))
	if s.Banner != nil {
		_, _ = io.WriteString(s.Banner, devBanner(s.Config, roles, string(secret) == devSecret))
	}
	err := g.Wait()
	s.Log.Info("stopped")
	return err
}

// drain marks the process not ready and, for one that serves the API,
// waits shutdown_drain while it answers on (or until runCtx ends: a piece
// failed meanwhile).
func (s *System) drain(runCtx context.Context, servesAPI bool) {
	s.draining.Store(true)
	wait := s.Config.ShutdownDrain
	if !servesAPI || wait <= 0 {
		return
	}
	// A client on a kept-alive connection would stay with this process
	// whatever the balancer does: its next request gets an answer and
	// Connection: close, and it reconnects through the balancer.
	s.apiServersMu.Lock()
	for _, srv := range s.apiServers {
		srv.SetKeepAlivesEnabled(false)
	}
	s.apiServersMu.Unlock()
	s.Log.Info("draining: /readyz answers 503 and the API answers on until it stops accepting",
		zap.Duration("shutdown_drain", wait))
	drained := time.NewTimer(wait)
	defer drained.Stop()
	select {
	case <-drained.C:
	case <-runCtx.Done():
	}
}

// startRoles builds each role and starts its pieces in g; the first role
// that cannot start ends it with its error. The ops server comes last, so
// that /healthz answering means every listener of the process is bound.
func (s *System) startRoles(ctx context.Context, g *errgroup.Group, roles []Role, secret []byte) error {
	has := func(r Role) bool { return slices.Contains(roles, r) }
	if has(RoleServe) || has(RoleWork) {
		pub := s.publisher()
		g.Go(func() error { return pub.Run(ctx) })
	}
	if has(RoleServe) {
		if err := s.serveRole(ctx, g, secret); err != nil {
			return err
		}
	}
	if has(RoleDispatch) {
		if err := s.dispatchRole(ctx, g); err != nil {
			return err
		}
	}
	if has(RoleWork) {
		if err := s.workRole(ctx, g, s.publisher()); err != nil {
			return err
		}
	}
	return s.opsRole(ctx, g, roles)
}

// opsRole serves /metrics, /healthz and /readyz on metrics.addr, unless it is
// off or it is the API's address (the API then serves them), and the
// operator console at /admin there.
func (s *System) opsRole(ctx context.Context, g *errgroup.Group, roles []Role) error {
	cfg := s.Config
	if cfg.Metrics.Addr == "" {
		s.Log.Info("operator console off: metrics.addr is empty")
		return nil
	}
	if slices.Contains(roles, RoleServe) && cfg.Metrics.Addr == cfg.HTTP.Addr {
		// The console never answers on the public API's address.
		s.Log.Warn("operator console off: metrics.addr is the API's address (http.addr); give it an address of its own",
			zap.String("metrics_addr", cfg.Metrics.Addr))
		return nil
	}
	handler, err := s.withConsole(ctx, g, roles, s.opsHandler())
	if err != nil {
		return err
	}
	return s.serveHTTP(ctx, g, "metrics", cfg.Metrics.Addr, handler)
}

// serveRole serves the HTTP API, with the notifier that wakes dispatchers
// after writes to the outbox.
func (s *System) serveRole(ctx context.Context, g *errgroup.Group, secret []byte) error {
	cfg := s.Config
	notifier := store.NewNotifier(s.Primary, s.Log.Named("notify"))
	g.Go(func() error { return notifier.Run(ctx) })
	outboxWritten := func() {}
	if cfg.Outbox.Notify {
		outboxWritten = notifier.Notify
	}
	var readYourWrites *api.ReadYourWrites
	if s.Read != s.Primary {
		// A caller's own writes show in their listings at once: while the
		// replica has not replayed them, their listings read the primary.
		readYourWrites = &api.ReadYourWrites{
			Positions:   sticky.New(s.redisRequests, cfg.Redis.Prefix),
			Replication: s.Store,
			Primary:     store.New(s.Primary, nil),
		}
	}
	// Live streams: this process's hub holds them and hears from every
	// worker what changed in their readers' feeds.
	hub, err := s.liveHub()
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	g.Go(func() error { return hub.Run(ctx) })
	e, err := api.New(s.Store, s.Store, s.Feeds, api.Config{
		Secret:            secret,
		MaxChars:          cfg.Posts.MaxChars,
		OutboxWrittenFunc: outboxWritten,
		Truth:             s.Store,
		// Feed reads while Redis is down: PostgreSQL, bounded.
		FallbackConcurrency: cfg.Feed.FallbackConcurrency,
		// Per-user limits, in Redis so that every serve process counts
		// together; they fail open while Redis is down.
		RateLimiter:      ratelimit.New(s.redisRequests, cfg.Redis.Prefix),
		PostsPerMinute:   cfg.RateLimit.PostsPerMinute,
		FollowsPerMinute: cfg.RateLimit.FollowsPerMinute,
		ReadYourWrites:   readYourWrites,
		Ops:              s.opsHandler(),
		RequestTimeout:   cfg.HTTP.RequestTimeout,
		Registerer:       s.registry,
		Logger:           s.Log.Named("api"),
		AccessLogLevel:   accessLevel(cfg.Log.AccessLevel),
		Outages:          s.health,
		TracerProvider:   s.tracerProvider,

		Live:              hub,
		Changes:           s.publisher(),
		StreamHeartbeat:   cfg.Stream.Heartbeat,
		StreamMaxDuration: cfg.Stream.MaxDuration,

		// The web app at /; with --dev it offers to sign in by user id.
		App:       web.New(web.Config{Dev: s.Dev, MaxChars: cfg.Posts.MaxChars}),
		DevTokens: s.Dev,
	})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return s.serveHTTP(ctx, g, "api", cfg.HTTP.Addr, e)
}

// publisher returns the System's live publisher, made on first use.
func (s *System) publisher() *live.Publisher {
	if s.live == nil { // once per System: its metrics are registered once
		s.live = live.NewPublisher(s.Redis, live.PublisherConfig{
			Prefix: s.Config.Redis.Prefix, Logger: s.Log.Named("live"), Outages: s.health, Registerer: s.registry,
		})
	}
	return s.live
}

// liveHub returns the System's hub of live streams, made on first use.
func (s *System) liveHub() (*live.Hub, error) {
	if s.hub == nil { // once per System: its metrics are registered once
		cfg := s.Config
		hub, err := live.NewHub(s.Redis, live.HubConfig{
			Prefix:         cfg.Redis.Prefix,
			MaxPerUser:     cfg.Stream.MaxPerUser,
			MaxConnections: cfg.Stream.MaxConnections,
			Posts:          s.Feeds,
			Follows:        s.Feeds,
			Logger:         s.Log.Named("live"),
			Outages:        s.health,
			Registerer:     s.registry,
		})
		if err != nil {
			return nil, err
		}
		s.hub = hub
	}
	return s.hub, nil
}

// dispatchRole runs the dispatcher, the listener that wakes it (with
// outbox.notify) and the cleaner of finished rows.
func (s *System) dispatchRole(ctx context.Context, g *errgroup.Group) error {
	cfg := s.Config
	var wake <-chan struct{}
	if cfg.Outbox.Notify {
		l := store.NewListener(cfg.Database.URL, s.Log.Named("listen"))
		g.Go(func() error { return l.Run(ctx) })
		wake = l.Wake()
	}
	d, err := outbox.NewDispatcher(s.Store, s.Queue, outbox.Config{
		BatchSize:      cfg.Outbox.BatchSize,
		PollInterval:   cfg.Outbox.PollInterval,
		Lease:          cfg.Outbox.Lease,
		RedeliverAfter: cfg.Outbox.RedeliverAfter,
		MaxAttempts:    cfg.Outbox.MaxAttempts,
		Backoff:        backoff.Schedule{Base: cfg.Outbox.BackoffBase, Max: cfg.Outbox.BackoffMax},
		Wake:           wake,
		Metrics:        s.dispatchMetrics,
		Logger:         s.Log.Named("dispatch"),
		Outages:        s.health,
		TracerProvider: s.tracerProvider,
	})
	if err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	c, err := outbox.NewCleaner(s.Store, outbox.CleanerConfig{
		Retention: cfg.Outbox.Retention,
		Metrics:   s.dispatchMetrics,
		Logger:    s.Log.Named("clean"),
		Outages:   s.health,
	})
	if err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	g.Go(func() error { return d.Run(ctx) })
	g.Go(func() error { return c.Run(ctx) })
	return nil
}

// workRole runs the fan-out workers.
func (s *System) workRole(ctx context.Context, g *errgroup.Group, changes fanout.Live) error {
	cfg := s.Config
	if err := s.Queue.EnsureGroup(ctx); err != nil {
		// At debug while the watch has logged Redis down (`all` started
		// without it): the outage is its line.
		health.Log(ctx, s.health, s.Log, "cannot create the consumer group yet; workers will retry", err)
	}
	w, err := fanout.New(s.Store, s.fanoutFeeds, s.Store, s.Queue, fanout.Config{
		Concurrency:     cfg.Fanout.Concurrency,
		PageSize:        cfg.Fanout.PageSize,
		ChunkSize:       cfg.Fanout.ChunkSize,
		ClaimIdle:       cfg.Queue.ClaimIdle,
		MaxDeliveries:   cfg.Queue.MaxDeliveries,
		MaxAttempts:     cfg.Outbox.MaxAttempts,
		Backoff:         backoff.Schedule{Base: cfg.Outbox.BackoffBase, Max: cfg.Outbox.BackoffMax},
		RedeliverAfter:  cfg.Outbox.RedeliverAfter,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Metrics:         s.fanoutMetrics,
		Logger:          s.Log.Named("work"),
		Outages:         s.health,
		TracerProvider:  s.tracerProvider,
		Live:            changes,
	})
	if err != nil {
		return fmt.Errorf("work: %w", err)
	}
	g.Go(func() error { return w.Run(ctx) })
	return nil
}

// serveHTTP listens now (so a taken port fails the start) and serves until
// ctx ends, then shuts down gracefully within shutdown_timeout.
func (s *System) serveHTTP(ctx context.Context, g *errgroup.Group, name, addr string, h http.Handler) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		key := "http.addr"
		if name == "metrics" {
			key = "metrics.addr"
		}
		return fmt.Errorf("%s: %w", key, err)
	}
	// Bounded reads, headers and idle connections: a client that trickles
	// its request cannot hold a connection and a goroutine for ever.
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.Config.HTTP.ReadHeaderTimeout,
		ReadTimeout:       s.Config.HTTP.ReadTimeout,
		IdleTimeout:       s.Config.HTTP.IdleTimeout,
		MaxHeaderBytes:    s.Config.HTTP.MaxHeaderBytes,
	}
	if name == "api" {
		s.apiServersMu.Lock()
		s.apiServers = append(s.apiServers, srv)
		s.apiServersMu.Unlock()
	}
	g.Go(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s server: %w", name, err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), s.Config.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			s.Log.Warn("http shutdown timed out", zap.String("server", name), zap.Error(err))
			_ = srv.Close()
		}
		return nil
	})
	return nil
}

// NewLogger builds the process logger: JSON for machines, console for
// people, both with ISO-8601 UTC timestamps ("2026-12-01T08:00:00.123Z")
// and no stack traces: an error a dependency causes is not a bug, and a
// panic logs its own stack.
func NewLogger(cfg *Config) (*zap.Logger, error) {
	zc, err := loggerConfig(cfg)
	if err != nil {
		return nil, err
	}
	return zc.Build()
}

// loggerConfig is the configuration of the process logger, writing to stderr.
func loggerConfig(cfg *Config) (zap.Config, error) {
	level, err := zapcore.ParseLevel(cfg.Log.Level)
	if err != nil {
		return zap.Config{}, fmt.Errorf("log.level: %w", err)
	}
	var zc zap.Config
	if cfg.Log.Format == "console" {
		zc = zap.NewDevelopmentConfig()
	} else {
		zc = zap.NewProductionConfig()
		zc.Sampling = nil
	}
	zc.DisableStacktrace = true
	zc.EncoderConfig.EncodeTime = utcISO8601
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.OutputPaths = []string{"stderr"}
	return zc, nil
}

// utcISO8601 writes a log line's time in ISO 8601, UTC, to the millisecond.
func utcISO8601(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
	enc.AppendString(t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
}

// accessLevel is log.access_level as a zap level (validated with the
// configuration).
func accessLevel(name string) zapcore.Level {
	level, err := zapcore.ParseLevel(name)
	if err != nil {
		return zapcore.InfoLevel
	}
	return level
}
