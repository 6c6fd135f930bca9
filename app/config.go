package app

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/backoff"
	"github.com/newsfeed/newsfeed/live"
	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/queue"
)

// Config is the whole configuration of a newsfeed process. Every key can be set
// in the YAML file, overridden by NEWSFEED_<KEY> (upper-cased, "." → "_"), and
// some by command-line flags: flags beat env beat file beat defaults.
type Config struct {
	Database struct {
		// URL of the primary PostgreSQL. Defaults to postgres://postgres@127.0.0.1:5432/newsfeed?sslmode=disable.
		URL string `koanf:"url"`
		// ReadURL, when set, points the listings that users page through
		// (a user's followers, whom they follow, their posts) at a replica
		// (or a pooler in front of replicas). Writes, feed rebuilds and
		// every read of fan-out stay on the primary: a lagging replica
		// would lose posts from feeds. Defaults to empty: the primary.
		ReadURL string `koanf:"read_url"`
		// MaxConns per pool. Defaults to 16.
		MaxConns int32 `koanf:"max_conns"`
		// ConnectWait is how long a process retries an unreachable database
		// (and Redis) at start-up before it gives up. Defaults to 10s.
		ConnectWait time.Duration `koanf:"connect_wait"`
	} `koanf:"database"`
	Redis struct {
		// URL of Redis; the path selects the database. A redis:// URL with
		// several addr= parameters, or cluster: true, connects to a Redis Cluster.
		// Defaults to redis://127.0.0.1:6379/0.
		URL string `koanf:"url"`
		// Cluster connects to a Redis Cluster at URL's host. Defaults to false.
		Cluster bool `koanf:"cluster"`
		// Prefix is put before every key, so several installs (or tests) can
		// share one Redis. Defaults to "nf:".
		Prefix string `koanf:"prefix"`
		// WaitReplicas is how many replicas of every Redis primary must have
		// a fan-out's feed writes, or a ticket, before it counts as done
		// (WAIT): 1 on a Redis Cluster with a replica per primary, so that a
		// failover loses no delivered post. Defaults to 0: no wait.
		WaitReplicas int `koanf:"wait_replicas"`
		// WaitTimeout bounds that wait; fewer replicas in time postpone the
		// work, which is done again shortly (not counted as a failure).
		// 1ms to maxWaitTimeout. Defaults to 1s.
		WaitTimeout time.Duration `koanf:"wait_timeout"`
		// Configure lets the product raise, with CONFIG SET at start, the
		// Redis settings below what stores a reader's data compactly
		// (feed.ServerSettings); without it they are only checked and a
		// warning is logged. Defaults to false.
		Configure bool `koanf:"configure"`
	} `koanf:"redis"`
	HTTP struct {
		// Addr is the listen address of serve and all. Defaults to :8080.
		Addr string `koanf:"addr"`
		// ReadHeaderTimeout: a client that has not sent its request headers
		// within this is disconnected. Defaults to 5s.
		ReadHeaderTimeout time.Duration `koanf:"read_header_timeout"`
		// ReadTimeout bounds reading a whole request, body included.
		// Defaults to 30s.
		ReadTimeout time.Duration `koanf:"read_timeout"`
		// IdleTimeout closes a keep-alive connection that sends no request
		// for this long. Defaults to 2m.
		IdleTimeout time.Duration `koanf:"idle_timeout"`
		// MaxHeaderBytes bounds the request line and headers; more is
		// refused with 431. Defaults to 65536.
		MaxHeaderBytes int `koanf:"max_header_bytes"`
		// RequestTimeout: every API request is answered within it,
		// whatever a dependency does (a live stream once its headers are
		// sent excepted); at least minRequestTimeout. Defaults to 5s.
		RequestTimeout time.Duration `koanf:"request_timeout"`
	} `koanf:"http"`
	Metrics struct {
		// Addr serves /metrics, /healthz and /readyz for every role; empty
		// turns it off. Defaults to :9090.
		Addr string `koanf:"addr"`
		// Pprof adds /debug/pprof/ to the metrics listener. Defaults to false.
		Pprof bool `koanf:"pprof"`
	} `koanf:"metrics"`
	Auth struct {
		// Secret is the HMAC key of the HS256 bearer tokens. No default.
		Secret string `koanf:"secret"`
	} `koanf:"auth"`
	Admin struct {
		// Token is the bearer token of the operator console at /admin on
		// metrics.addr, at least 16 characters; empty turns the console off
		// (--dev opens it without one). No default.
		Token string `koanf:"token"`
	} `koanf:"admin"`
	RateLimit struct {
		// PostsPerMinute is how many posts one user may create a minute,
		// counted in Redis and so shared by every serve process; 0 turns the
		// limit off. Defaults to 60.
		PostsPerMinute int `koanf:"posts_per_minute"`
		// FollowsPerMinute is how many follows and unfollows, together, one
		// user may make a minute; 0 turns the limit off. Defaults to 300.
		FollowsPerMinute int `koanf:"follows_per_minute"`
	} `koanf:"ratelimit"`
	Posts struct {
		// MaxChars is the longest post body in characters. Defaults to 1000.
		MaxChars int `koanf:"max_chars"`
	} `koanf:"posts"`
	Feed struct {
		// MaxLen is how many entries a feed keeps in Redis. Defaults to 800.
		MaxLen int `koanf:"max_len"`
		// Backfill is how many recent posts of a newly followed author are
		// merged into the follower's feed. Defaults to 50.
		Backfill int `koanf:"backfill"`
		// RebuildWait bounds how long a read waits for another reader's
		// rebuild of the same feed. Defaults to 5s.
		RebuildWait time.Duration `koanf:"rebuild_wait"`
		// ActiveDays: a feed not read for this many days leaves Redis, fan-out
		// skips its owner, and the next read rebuilds it. Defaults to 30.
		ActiveDays int `koanf:"active_days"`
		// FallbackConcurrency bounds the feed reads one serve process sends
		// to PostgreSQL at once while Redis does not answer; beyond it a read
		// answers 503. Defaults to 16.
		FallbackConcurrency int `koanf:"fallback_concurrency"`
	} `koanf:"feed"`
	Fanout struct {
		// ChunkSize is followers per unit of fan-out work. Defaults to 5000.
		ChunkSize int `koanf:"chunk_size"`
		// PageSize is followers read and written per round trip. Defaults to 1000.
		PageSize int `koanf:"page_size"`
		// CelebrityThreshold: authors with more followers are merged at read
		// time instead of fanned out. Defaults to 10000.
		CelebrityThreshold int64 `koanf:"celebrity_threshold"`
		// Concurrency is tickets in flight per work process. Defaults to 64.
		Concurrency int `koanf:"concurrency"`
	} `koanf:"fanout"`
	Outbox struct {
		// BatchSize is rows claimed per dispatcher round trip. Defaults to 500.
		BatchSize int `koanf:"batch_size"`
		// PollInterval is the longest a dispatcher sleeps between claims when
		// no notification wakes it. Defaults to 500ms.
		PollInterval time.Duration `koanf:"poll_interval"`
		// Notify turns on LISTEN/NOTIFY wake-ups; turn it off behind PgBouncer
		// in transaction mode. Defaults to true.
		Notify bool `koanf:"notify"`
		// Lease is how long a claimed row stays with its dispatcher before any
		// other may take it. Defaults to 30s.
		Lease time.Duration `koanf:"lease"`
		// RedeliverAfter: a published row whose fan-out no worker reported
		// finished (and no worker is extending) is published again after
		// this long. Defaults to 2m.
		RedeliverAfter time.Duration `koanf:"redeliver_after"`
		// MaxAttempts before a row is parked as dead. Defaults to 10.
		MaxAttempts int `koanf:"max_attempts"`
		// BackoffBase spaces retries: base·attempt⁴ with jitter. Defaults to 1s.
		BackoffBase time.Duration `koanf:"backoff_base"`
		// BackoffMax caps the wait between retries. Defaults to 1h.
		BackoffMax time.Duration `koanf:"backoff_max"`
		// Retention is how long finished rows are kept. Defaults to 24h.
		Retention time.Duration `koanf:"retention"`
	} `koanf:"outbox"`
	Queue struct {
		// Stream is the Redis stream name (after the prefix). Defaults to "tickets".
		Stream string `koanf:"stream"`
		// Group is the consumer group of the workers. Defaults to "fanout".
		Group string `koanf:"group"`
		// Partitions is how many streams the tickets are spread over, 1 to
		// 1024: on a Redis Cluster each is in a slot of its own, so that
		// the queue spreads over the shards (16 or more for a cluster of 3);
		// every worker reads them all. It may change on a running system:
		// workers read what the old count left until it is empty. Defaults to 1.
		Partitions int `koanf:"partitions"`
		// ClaimIdle: tickets idle this long in a dead consumer's pending list
		// are taken over. Defaults to 30s.
		ClaimIdle time.Duration `koanf:"claim_idle"`
		// MaxDeliveries: a ticket delivered more often than this (its workers
		// keep dying on it) is dead-lettered. Defaults to 5.
		MaxDeliveries int64 `koanf:"max_deliveries"`
	} `koanf:"queue"`
	Log struct {
		// Level is debug, info, warn or error. Defaults to info.
		Level string `koanf:"level"`
		// Format is json or console. Defaults to json (console with --dev).
		Format string `koanf:"format"`
		// AccessLevel is the level of the access log, one line per API
		// request: debug, info, warn or error; below Level there is none
		// (debug turns it off at the default level). Defaults to info.
		AccessLevel string `koanf:"access_level"`
	} `koanf:"log"`
	Tracing struct {
		// Endpoint is the OTLP/HTTP endpoint of a trace collector
		// (http://collector:4318; traces go to its /v1/traces unless the
		// URL has a path); empty turns tracing off. Defaults to empty.
		Endpoint string `koanf:"endpoint"`
		// SampleRatio is the share of new traces recorded, 0 to 1; a trace
		// started elsewhere (a caller's traceparent, a post's stored
		// context) keeps its own decision. Defaults to 1.
		SampleRatio float64 `koanf:"sample_ratio"`
	} `koanf:"tracing"`
	Stream struct {
		// Heartbeat is how often an idle live stream sends a comment line,
		// so that proxies keep it open. Defaults to 15s.
		Heartbeat time.Duration `koanf:"heartbeat"`
		// MaxDuration is how long a live stream stays open before the
		// server ends it; clients reconnect (through the load balancer) and
		// resume. Defaults to 1h.
		MaxDuration time.Duration `koanf:"max_duration"`
		// MaxPerUser is live streams one user may have open, in every
		// serve process together; more answer 429. Defaults to 5.
		MaxPerUser int `koanf:"max_per_user"`
		// MaxConnections is live streams one process holds; more answer
		// 503. Defaults to 10000.
		MaxConnections int `koanf:"max_connections"`
	} `koanf:"stream"`
	// ShutdownDrain is how long a process that serves the API keeps
	// answering after SIGTERM, with /readyz answering 503, so that load
	// balancers move traffic away before it stops accepting; 0 stops at
	// once. Defaults to 5s.
	ShutdownDrain time.Duration `koanf:"shutdown_drain"`
	// ShutdownTimeout bounds a graceful stop, after the drain. Defaults to 15s.
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
}

// maxWaitTimeout bounds redis.wait_timeout: WAIT goes in a pipeline with its
// marker, which the Redis client gives its read timeout (3s) and no more.
const maxWaitTimeout = 2 * time.Second

// minRequestTimeout bounds http.request_timeout from below: a request's
// calls get it less at least 750 ms kept to answer, and a feed read gives a
// silent Redis some hundreds of milliseconds of that before it reads
// PostgreSQL instead.
const minRequestTimeout = 2 * time.Second

// minAdminToken is the shortest admin.token taken: the console retries
// dead events, so its token must not be guessable.
const minAdminToken = 16

// defaults holds every key with its default value; it is also the list of
// known keys, used to map environment variables and reject unknown file keys.
// Where a component owns a default (outbox.DefaultBatchSize, …) the value is
// taken from it, so the code cannot disagree with the configuration; tests
// hold config.yaml and docs/CONFIG.md's table to these values.
var defaults = map[string]any{
	"database.url":                 "postgres://postgres@127.0.0.1:5432/newsfeed?sslmode=disable",
	"database.read_url":            "",
	"database.max_conns":           16,
	"database.connect_wait":        "10s",
	"redis.url":                    "redis://127.0.0.1:6379/0",
	"redis.cluster":                false,
	"redis.prefix":                 "nf:",
	"redis.wait_replicas":          0,
	"redis.wait_timeout":           queue.DefaultWaitTimeout.String(),
	"redis.configure":              false,
	"http.addr":                    ":8080",
	"http.read_header_timeout":     "5s",
	"http.read_timeout":            "30s",
	"http.idle_timeout":            "2m",
	"http.max_header_bytes":        65536,
	"http.request_timeout":         api.DefaultRequestTimeout.String(),
	"ratelimit.posts_per_minute":   60,
	"ratelimit.follows_per_minute": 300,
	"metrics.addr":                 ":9090",
	"metrics.pprof":                false,
	"auth.secret":                  "",
	"admin.token":                  "",
	"posts.max_chars":              api.DefaultMaxChars,
	"feed.max_len":                 feed.DefaultMaxLen,
	"feed.backfill":                feed.RecommendedBackfill,
	"feed.rebuild_wait":            feed.DefaultRebuildWait.String(),
	"feed.fallback_concurrency":    api.DefaultFallbackConcurrency,
	"feed.active_days":             int(feed.DefaultActiveTTL / (24 * time.Hour)),
	"fanout.chunk_size":            fanout.DefaultChunkSize,
	"fanout.page_size":             fanout.DefaultPageSize,
	"fanout.celebrity_threshold":   feed.RecommendedCelebrityThreshold,
	"fanout.concurrency":           fanout.DefaultConcurrency,
	"outbox.batch_size":            outbox.DefaultBatchSize,
	"outbox.poll_interval":         outbox.DefaultPollInterval.String(),
	"outbox.notify":                true,
	"outbox.lease":                 outbox.DefaultLease.String(),
	"outbox.redeliver_after":       outbox.DefaultRedeliverAfter.String(),
	"outbox.max_attempts":          outbox.DefaultMaxAttempts,
	"outbox.backoff_base":          backoff.DefaultSchedule.Base.String(),
	"outbox.backoff_max":           backoff.DefaultSchedule.Max.String(),
	"outbox.retention":             outbox.DefaultRetention.String(),
	"queue.stream":                 queue.DefaultStream,
	"queue.group":                  queue.DefaultGroup,
	"queue.partitions":             queue.DefaultPartitions,
	"queue.claim_idle":             fanout.DefaultClaimIdle.String(),
	"queue.max_deliveries":         fanout.DefaultMaxDeliveries,
	"log.level":                    "info",
	"log.format":                   "json",
	"log.access_level":             "info",
	"stream.heartbeat":             api.DefaultStreamHeartbeat.String(),
	"stream.max_duration":          api.DefaultStreamMaxDuration.String(),
	"stream.max_per_user":          live.DefaultMaxPerUser,
	"stream.max_connections":       live.DefaultMaxConnections,
	"tracing.endpoint":             "",
	"tracing.sample_ratio":         1.0,
	"shutdown_drain":               "5s",
	"shutdown_timeout":             "15s",
}

// envKeys maps NEWSFEED_FEED_MAX_LEN to feed.max_len for every known key.
var envKeys = func() map[string]string {
	m := make(map[string]string, len(defaults))
	for key := range defaults {
		m["NEWSFEED_"+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))] = key
	}
	return m
}()

// KnownKeys lists every configuration key, sorted.
func KnownKeys() []string {
	keys := make([]string, 0, len(defaults))
	for k := range defaults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// validate returns what is wrong with the values, each problem naming its
// key (LoadConfig adds where the value came from).
func (c *Config) validate() []problem {
	var problems []problem
	bad := func(key, format string, args ...any) {
		problems = append(problems, problem{key: key, text: fmt.Sprintf(format, args...)})
	}
	positive := func(key string, v int64) {
		if v <= 0 {
			bad(key, "must be positive, got %d", v)
		}
	}
	notNegative := func(key string, v int64) {
		if v < 0 {
			bad(key, "must not be negative (0 turns it off), got %d", v)
		}
	}
	positiveDur := func(key string, v time.Duration) {
		if v <= 0 {
			bad(key, "must be a positive duration, got %s", v)
		}
	}
	notEmpty := func(key, v string) {
		if v == "" {
			bad(key, "must not be empty")
		}
	}
	notEmpty("database.url", c.Database.URL)
	notEmpty("redis.url", c.Redis.URL)
	positive("database.max_conns", int64(c.Database.MaxConns))
	positiveDur("database.connect_wait", c.Database.ConnectWait)
	notNegative("redis.wait_replicas", int64(c.Redis.WaitReplicas))
	if c.Redis.WaitTimeout < time.Millisecond || c.Redis.WaitTimeout > maxWaitTimeout {
		bad("redis.wait_timeout", "must be from 1ms to %s, got %s", maxWaitTimeout, c.Redis.WaitTimeout)
	}
	positiveDur("http.read_header_timeout", c.HTTP.ReadHeaderTimeout)
	positiveDur("http.read_timeout", c.HTTP.ReadTimeout)
	positiveDur("http.idle_timeout", c.HTTP.IdleTimeout)
	if c.HTTP.RequestTimeout < minRequestTimeout {
		bad("http.request_timeout", "must be at least %s, got %s", minRequestTimeout, c.HTTP.RequestTimeout)
	}
	if c.HTTP.MaxHeaderBytes < 4096 {
		bad("http.max_header_bytes", "must be at least 4096, got %d", c.HTTP.MaxHeaderBytes)
	}
	notNegative("ratelimit.posts_per_minute", int64(c.RateLimit.PostsPerMinute))
	notNegative("ratelimit.follows_per_minute", int64(c.RateLimit.FollowsPerMinute))
	if n := len(c.Admin.Token); n > 0 && n < minAdminToken {
		bad("admin.token", "must be at least %d characters (a random string: openssl rand -hex 32), got %d", minAdminToken, n)
	}
	positive("posts.max_chars", int64(c.Posts.MaxChars))
	positive("feed.max_len", int64(c.Feed.MaxLen))
	notNegative("feed.backfill", int64(c.Feed.Backfill))
	positiveDur("feed.rebuild_wait", c.Feed.RebuildWait)
	positive("feed.fallback_concurrency", int64(c.Feed.FallbackConcurrency))
	positive("feed.active_days", int64(c.Feed.ActiveDays))
	positive("fanout.concurrency", int64(c.Fanout.Concurrency))
	positive("fanout.page_size", int64(c.Fanout.PageSize))
	positive("fanout.chunk_size", int64(c.Fanout.ChunkSize))
	notNegative("fanout.celebrity_threshold", c.Fanout.CelebrityThreshold)
	positive("outbox.batch_size", int64(c.Outbox.BatchSize))
	positiveDur("outbox.poll_interval", c.Outbox.PollInterval)
	positiveDur("outbox.lease", c.Outbox.Lease)
	positiveDur("outbox.redeliver_after", c.Outbox.RedeliverAfter)
	positive("outbox.max_attempts", int64(c.Outbox.MaxAttempts))
	positiveDur("outbox.backoff_base", c.Outbox.BackoffBase)
	positiveDur("outbox.backoff_max", c.Outbox.BackoffMax)
	positiveDur("outbox.retention", c.Outbox.Retention)
	notEmpty("queue.stream", c.Queue.Stream)
	notEmpty("queue.group", c.Queue.Group)
	if c.Queue.Partitions < 1 || c.Queue.Partitions > queue.MaxPartitions {
		bad("queue.partitions", "must be 1 to %d, got %d", queue.MaxPartitions, c.Queue.Partitions)
	}
	if c.Queue.Partitions > 1 {
		// Each partition's stream carries a hash tag of its own.
		for _, kv := range [][2]string{{"redis.prefix", c.Redis.Prefix}, {"queue.stream", c.Queue.Stream}} {
			if strings.Contains(kv[1], "{") {
				problems = append(problems, problem{key: kv[0], related: []string{"queue.partitions"},
					text: fmt.Sprintf("must not hold a hash tag (\"{\") when queue.partitions > 1: each partition has its own, got %q", kv[1])})
			}
		}
	}
	positiveDur("queue.claim_idle", c.Queue.ClaimIdle)
	positive("queue.max_deliveries", c.Queue.MaxDeliveries)
	for _, l := range [][2]string{{"log.level", c.Log.Level}, {"log.access_level", c.Log.AccessLevel}} {
		switch l[1] {
		case "debug", "info", "warn", "error":
		default:
			bad(l[0], "must be debug, info, warn or error, got %q", l[1])
		}
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		bad("log.format", "must be json or console, got %q", c.Log.Format)
	}
	if c.Tracing.Endpoint != "" {
		if _, err := traceEndpoint(c.Tracing.Endpoint); err != nil {
			bad("tracing.endpoint", "%v", err)
		}
	}
	if c.Tracing.SampleRatio < 0 || c.Tracing.SampleRatio > 1 || math.IsNaN(c.Tracing.SampleRatio) {
		bad("tracing.sample_ratio", "must be from 0 to 1, got %v", c.Tracing.SampleRatio)
	}
	positiveDur("stream.heartbeat", c.Stream.Heartbeat)
	positiveDur("stream.max_duration", c.Stream.MaxDuration)
	positive("stream.max_per_user", int64(c.Stream.MaxPerUser))
	positive("stream.max_connections", int64(c.Stream.MaxConnections))
	if c.ShutdownDrain < 0 {
		bad("shutdown_drain", "must not be negative (0 stops at once), got %s", c.ShutdownDrain)
	}
	positiveDur("shutdown_timeout", c.ShutdownTimeout)
	return problems
}
