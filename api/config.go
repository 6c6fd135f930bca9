package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/newsfeed/newsfeed/internal/defaults"
)

// The defaults of Config: a zero field takes its default.
const (
	// DefaultMaxChars is the longest post body in characters (posts.max_chars).
	DefaultMaxChars = 1000
	// DefaultFallbackConcurrency bounds the feed reads served from
	// PostgreSQL at once while Redis does not answer (feed.fallback_concurrency).
	DefaultFallbackConcurrency = 16
	// DefaultStreamHeartbeat is how often an idle stream sends a comment
	// line (stream.heartbeat).
	DefaultStreamHeartbeat = 15 * time.Second
	// DefaultStreamMaxDuration is how long a stream stays open
	// (stream.max_duration).
	DefaultStreamMaxDuration = time.Hour
	// DefaultStreamCatchUp is how often a stream reads the top of its feed
	// for what the live channel may have lost.
	DefaultStreamCatchUp = time.Minute
	// DefaultRequestTimeout is how long a request may take, answer
	// included (http.request_timeout).
	DefaultRequestTimeout = 5 * time.Second
)

// Config configures the API. A zero field takes the default named; a
// negative one is out of range, and New refuses it.
type Config struct {
	// Secret is the HS256 key of bearer tokens. Required.
	Secret []byte
	// MaxChars is the longest post body in characters. Defaults to
	// DefaultMaxChars (1000).
	MaxChars int
	// OutboxWrittenFunc, if set, is called after each committed outbox write
	// (to wake dispatchers).
	OutboxWrittenFunc func()
	// Ops serves /metrics, /healthz and /readyz beside the API.
	Ops http.Handler
	// RequestTimeout is how long a request may take, its answer included
	// (http.request_timeout): what it asks of PostgreSQL and Redis gets
	// the request's context, whose deadline leaves room to answer; a live
	// stream has it until its headers are sent. Defaults to
	// DefaultRequestTimeout (5s).
	RequestTimeout time.Duration
	// FallbackConcurrency bounds the feed reads served from PostgreSQL at
	// once while Redis does not answer (feed.fallback_concurrency); beyond
	// it a read answers 503. Defaults to DefaultFallbackConcurrency (16).
	FallbackConcurrency int
	// Truth reads home feeds from PostgreSQL when Redis cannot; nil: no
	// fallback, a read answers 503.
	Truth TruthReader
	// RateLimiter counts posts and follows per user, across processes; nil:
	// no limits.
	RateLimiter RateLimiter
	// PostsPerMinute is ratelimit.posts_per_minute: posts one user may
	// create a minute. 0: no limit.
	PostsPerMinute int
	// FollowsPerMinute is ratelimit.follows_per_minute: follows and
	// unfollows one user may make a minute. 0: no limit.
	FollowsPerMinute int
	// Registerer receives the HTTP request histogram. Defaults to none.
	Registerer prometheus.Registerer
	// ReadYourWrites, when set (database.read_url names a replica), sends a
	// caller's listings to the primary while the replica has not replayed
	// the caller's own recent writes. nil: listings read where posts and
	// graph read.
	ReadYourWrites *ReadYourWrites
	// App is the web app, served at / and its assets without
	// authentication. nil: no app, / answers 404.
	App App
	// DevTokens adds POST /dev/token, which signs a token for any user id
	// it is given: for --dev only, where the secret is public. Without it
	// the route does not exist (404).
	DevTokens bool
	// Logger defaults to a no-op logger. Every line of a request carries
	// its request id.
	Logger *zap.Logger
	// AccessLogLevel is the level of the access log's line per request
	// (log.access_level): below the logger's level, there is none.
	// Defaults to info.
	AccessLogLevel zapcore.Level
	// Outages tells whether a dependency outage, logged once by whoever
	// watches the dependencies, explains a failure: a request that fails
	// during one logs at debug instead of warn or error. While it knows
	// Redis to be down, nothing waits for Redis: feed reads go to Truth at
	// once, rate limits let requests through, listings read the primary.
	// nil: nothing is explained, and every request tries Redis.
	Outages Outages
	// TracerProvider, when set (tracing.endpoint), traces every request
	// (a server span, the child of the caller's traceparent if any) and
	// the create transaction, whose trace context the post's outbox row
	// keeps. nil: no tracing, at no cost.
	TracerProvider trace.TracerProvider
	// Live, when set, serves GET /v1/feed/stream: the caller's home feed as
	// Server-Sent Events. nil: no live streams, the route answers 503.
	Live Live
	// Changes tells the caller's open streams, in any process, of the
	// follows and unfollows made here (live.Publisher). nil: nobody.
	Changes FollowChanges
	// StreamHeartbeat is how often an idle stream sends a comment line
	// (stream.heartbeat). Defaults to DefaultStreamHeartbeat (15s).
	StreamHeartbeat time.Duration
	// StreamMaxDuration is how long a stream stays open before the server
	// ends it, so that clients reconnect through load balancers
	// (stream.max_duration). Defaults to DefaultStreamMaxDuration (1h).
	StreamMaxDuration time.Duration
	// StreamCatchUp is how often a stream reads the top of its feed for
	// what the live channel may have lost. Defaults to
	// DefaultStreamCatchUp (1m).
	StreamCatchUp time.Duration

	// streamSettleAfter replaces settleAfter when not nil; empty: a stream
	// does not read its feed again after it opens. Only tests set it
	// (export_test.go), to show that the live push alone brings events.
	streamSettleAfter []time.Duration
}

// validate refuses the values out of range, naming each field. Zero is in
// range: it means the default (or, for the rate limits, no limit).
func (c *Config) validate() error {
	return errors.Join(
		notNegative("MaxChars", c.MaxChars, defaults.The(DefaultMaxChars)),
		notNegative("FallbackConcurrency", c.FallbackConcurrency, defaults.The(DefaultFallbackConcurrency)),
		notNegative("PostsPerMinute", c.PostsPerMinute, "no limit"),
		notNegative("FollowsPerMinute", c.FollowsPerMinute, "no limit"),
		notNegative("StreamHeartbeat", c.StreamHeartbeat, defaults.The(DefaultStreamHeartbeat)),
		notNegative("StreamMaxDuration", c.StreamMaxDuration, defaults.The(DefaultStreamMaxDuration)),
		notNegative("StreamCatchUp", c.StreamCatchUp, defaults.The(DefaultStreamCatchUp)),
		notNegative("RequestTimeout", c.RequestTimeout, defaults.The(DefaultRequestTimeout)),
	)
}

func notNegative[T defaults.Number](field string, v T, zero string) error {
	return defaults.NotNegative("api.Config", field, v, zero)
}

// withDefaults returns a valid c with every zero field set to its default.
func (c Config) withDefaults() Config {
	defaults.Fill(&c.MaxChars, DefaultMaxChars)
	defaults.Fill(&c.FallbackConcurrency, DefaultFallbackConcurrency)
	defaults.Fill(&c.StreamHeartbeat, DefaultStreamHeartbeat)
	defaults.Fill(&c.StreamMaxDuration, DefaultStreamMaxDuration)
	defaults.Fill(&c.StreamCatchUp, DefaultStreamCatchUp)
	defaults.Fill(&c.RequestTimeout, DefaultRequestTimeout)
	if c.streamSettleAfter == nil {
		c.streamSettleAfter = settleAfter
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.OutboxWrittenFunc == nil {
		c.OutboxWrittenFunc = func() {}
	}
	return c
}
