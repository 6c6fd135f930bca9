package app

import (
	"fmt"
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

// Config is the whole configuration of a newsfeed process. Every key can be
// set in the YAML file, overridden by NEWSFEED_<KEY> (upper-cased, "." →
// "_"), and some by command-line flags: flags beat env beat file beat
// defaults. A field's koanf tags make its key; its default, the values it
// takes and what it does are declared once, in keys.
type Config struct {
	Database struct {
		URL         string        `koanf:"url"`
		ReadURL     string        `koanf:"read_url"`
		MaxConns    int32         `koanf:"max_conns"`
		ConnectWait time.Duration `koanf:"connect_wait"`
	} `koanf:"database"`
	Redis struct {
		URL          string        `koanf:"url"`
		Cluster      bool          `koanf:"cluster"`
		Prefix       string        `koanf:"prefix"`
		WaitReplicas int           `koanf:"wait_replicas"`
		WaitTimeout  time.Duration `koanf:"wait_timeout"`
		Configure    bool          `koanf:"configure"`
	} `koanf:"redis"`
	HTTP struct {
		Addr              string        `koanf:"addr"`
		ReadHeaderTimeout time.Duration `koanf:"read_header_timeout"`
		ReadTimeout       time.Duration `koanf:"read_timeout"`
		IdleTimeout       time.Duration `koanf:"idle_timeout"`
		RequestTimeout    time.Duration `koanf:"request_timeout"`
		MaxHeaderBytes    int           `koanf:"max_header_bytes"`
	} `koanf:"http"`
	RateLimit struct {
		PostsPerMinute   int `koanf:"posts_per_minute"`
		FollowsPerMinute int `koanf:"follows_per_minute"`
	} `koanf:"ratelimit"`
	Stream struct {
		Heartbeat      time.Duration `koanf:"heartbeat"`
		MaxDuration    time.Duration `koanf:"max_duration"`
		MaxPerUser     int           `koanf:"max_per_user"`
		MaxConnections int           `koanf:"max_connections"`
	} `koanf:"stream"`
	Metrics struct {
		Addr  string `koanf:"addr"`
		Pprof bool   `koanf:"pprof"`
	} `koanf:"metrics"`
	Auth struct {
		Secret string `koanf:"secret"`
	} `koanf:"auth"`
	Admin struct {
		Token string `koanf:"token"`
	} `koanf:"admin"`
	Posts struct {
		MaxChars int `koanf:"max_chars"`
	} `koanf:"posts"`
	Feed struct {
		MaxLen              int           `koanf:"max_len"`
		Backfill            int           `koanf:"backfill"`
		RebuildWait         time.Duration `koanf:"rebuild_wait"`
		FallbackConcurrency int           `koanf:"fallback_concurrency"`
		ActiveDays          int           `koanf:"active_days"`
	} `koanf:"feed"`
	Fanout struct {
		Concurrency        int   `koanf:"concurrency"`
		PageSize           int   `koanf:"page_size"`
		ChunkSize          int   `koanf:"chunk_size"`
		CelebrityThreshold int64 `koanf:"celebrity_threshold"`
		FollowingThreshold int64 `koanf:"following_threshold"`
	} `koanf:"fanout"`
	Outbox struct {
		BatchSize      int           `koanf:"batch_size"`
		PollInterval   time.Duration `koanf:"poll_interval"`
		Notify         bool          `koanf:"notify"`
		Lease          time.Duration `koanf:"lease"`
		RedeliverAfter time.Duration `koanf:"redeliver_after"`
		MaxAttempts    int           `koanf:"max_attempts"`
		BackoffBase    time.Duration `koanf:"backoff_base"`
		BackoffMax     time.Duration `koanf:"backoff_max"`
		Retention      time.Duration `koanf:"retention"`
	} `koanf:"outbox"`
	Queue struct {
		Stream        string        `koanf:"stream"`
		Group         string        `koanf:"group"`
		Partitions    int           `koanf:"partitions"`
		ClaimIdle     time.Duration `koanf:"claim_idle"`
		MaxDeliveries int64         `koanf:"max_deliveries"`
	} `koanf:"queue"`
	Log struct {
		Level       string `koanf:"level"`
		Format      string `koanf:"format"`
		AccessLevel string `koanf:"access_level"`
	} `koanf:"log"`
	Tracing struct {
		Endpoint    string  `koanf:"endpoint"`
		SampleRatio float64 `koanf:"sample_ratio"`
	} `koanf:"tracing"`
	ShutdownDrain   time.Duration `koanf:"shutdown_drain"`
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

// logLevels are the values of log.level and log.access_level.
var logLevels = []string{"debug", "info", "warn", "error"}

//go:generate go test -run ^TestConfigDoc$ -update .

// keys declares every key of c, once, in the order docs/CONFIG.md lists
// them: the field that holds it (its key is the field's koanf tags), its
// default, the values it takes and what it does, in the words of
// docs/CONFIG.md, whose table is generated from this (TestConfigDoc). Where
// a component owns a default (outbox.DefaultBatchSize, …) it is taken from
// there, so the code cannot disagree with the configuration.
func (c *Config) keys() []*keyDecl {
	return []*keyDecl{
		declare(&c.Database.URL, "postgres://postgres@127.0.0.1:5432/newsfeed?sslmode=disable", postgresURL(false),
			"PostgreSQL, the primary: every write, feed rebuilds, the outbox"),
		declare(&c.Database.ReadURL, "", postgresURL(true),
			"a PostgreSQL replica for reads that may be slightly stale: the listings users page through (followers, "+
				"following, a user's posts); feed rebuilds, fan-out and `GET /v1/posts/{id}` read the primary; empty = "+
				"the primary. A caller reads their own writes even so (see [Replicas](API.md#replicas-and-read-your-writes))"),
		declare(&c.Database.MaxConns, 16, positive[int32](), "connections per PostgreSQL pool"),
		declare(&c.Database.ConnectWait, 10*time.Second, positive[time.Duration](),
			"how long start-up retries an unreachable PostgreSQL (and, for `dispatch` and `work`, Redis) before it gives up"),

		declare(&c.Redis.URL, "redis://127.0.0.1:6379/0", redisURL(&c.Redis.Cluster),
			"Redis; the db number selects a database"),
		declare(&c.Redis.Cluster, false, anyValue[bool](),
			"`redis.url` names a Redis Cluster: `redis://host1:port?addr=host2:port&addr=host3:port`"),
		declare(&c.Redis.Prefix, "nf:", anyValue[string](), "put before every Redis key the product writes"),
		declare(&c.Redis.WaitReplicas, 0, notNegative[int](),
			"how many replicas of every Redis primary must have acknowledged (`WAIT`) a worker's feed writes before its "+
				"event is finished, and a ticket before its outbox row is marked published: 1 on a Redis Cluster with a "+
				"replica per primary, so that a failover cannot lose a delivered post (see "+
				"[DESIGN.md](DESIGN.md#on-a-redis-cluster)). A primary with fewer replicas holds the fan-out to its shard "+
				"back until it has them again. 0 waits for none"),
		declare(&c.Redis.WaitTimeout, queue.DefaultWaitTimeout, between(time.Millisecond, maxWaitTimeout),
			"how long those writes wait for the replicas; fewer in time postpone the event "+
				"(`newsfeed_fanout_tickets_total{outcome=\"postponed\"}`): it is published again after its backoff, at "+
				"most 30 s, without counting a failure against `outbox.max_attempts`"),
		declare(&c.Redis.Configure, false, anyValue[bool](),
			"at start, once Redis answers, every role reads on every Redis node the settings a reader's data needs to "+
				"be stored compactly (today `hash-max-listpack-entries` ≥ 1024: a reader's following hash above it is a "+
				"hash table, ~60 bytes a followee instead of ~7) and logs one warning per setting some node has below "+
				"it, with `newsfeed_redis_setting_expensive{setting}` 1; `true` raises them with `CONFIG SET` where the "+
				"server allows it (put them in `redis.conf` too: a restart forgets them). Feeds themselves take the "+
				"same bytes on any server"),

		declare(&c.HTTP.Addr, ":8080", listenAddr(false), "listen address of the API (`serve`, `all`)"),
		declare(&c.HTTP.ReadHeaderTimeout, 5*time.Second, positive[time.Duration](),
			"a client that has not sent its request line and headers within this is disconnected"),
		declare(&c.HTTP.ReadTimeout, 30*time.Second, positive[time.Duration](),
			"bound of reading a whole request, body included"),
		declare(&c.HTTP.IdleTimeout, 2*time.Minute, positive[time.Duration](),
			"a keep-alive connection with no request for this long is closed"),
		declare(&c.HTTP.RequestTimeout, api.DefaultRequestTimeout, atLeast(minRequestTimeout),
			"every API request is answered within this, whatever a dependency does (`/v1/feed/stream` excepted once "+
				"its headers are sent): `503 unavailable` with `Retry-After` for a request that needs a dependency "+
				"that did not answer"),
		declare(&c.HTTP.MaxHeaderBytes, 65536, atLeast(4096),
			"bound of the request line and headers; more is refused with `431`"),

		declare(&c.RateLimit.PostsPerMinute, 60, notNegative[int](),
			"posts one user may create a minute, shared by every `serve` process; 0 = no limit"),
		declare(&c.RateLimit.FollowsPerMinute, 300, notNegative[int](),
			"follows and unfollows, counted together, one user may make a minute; 0 = no limit"),

		declare(&c.Stream.Heartbeat, api.DefaultStreamHeartbeat, positive[time.Duration](),
			"an idle live stream (`GET /v1/feed/stream`) sends a comment line this often"),
		declare(&c.Stream.MaxDuration, api.DefaultStreamMaxDuration, positive[time.Duration](),
			"the server ends a live stream after this; the client reconnects and resumes"),
		declare(&c.Stream.MaxPerUser, live.DefaultMaxPerUser, positive[int](),
			"live streams one user may hold open, every `serve` process together; more answer `429 rate_limited`"),
		declare(&c.Stream.MaxConnections, live.DefaultMaxConnections, positive[int](),
			"live streams one process holds; more answer `503 unavailable`"),

		declare(&c.Metrics.Addr, ":9090", listenAddr(true),
			"every role process serves `/metrics`, `/healthz` and `/readyz` here (`serve` and `all` serve them on "+
				"`http.addr` too), and the [operator console](OPERATIONS.md#operator-console); empty turns it off"),
		declare(&c.Metrics.Pprof, false, anyValue[bool](), "also serve Go's `/debug/pprof/` on `metrics.addr`"),
		declare(&c.Auth.Secret, "", anyValue[string](),
			"HMAC secret of the HS256 bearer tokens. `serve` and `all` refuse to start without one, except with `--dev`"),
		declare(&c.Admin.Token, "", adminToken(),
			"the bearer token of the [operator console](OPERATIONS.md#operator-console) at `/admin` on "+
				"`metrics.addr` (`openssl rand -hex 32`); masked wherever the configuration is shown. Unset, the "+
				"console answers `403 forbidden` on every path, except with `--dev`, where it is open without a token"),
		declare(&c.Posts.MaxChars, api.DefaultMaxChars, positive[int](),
			"longest post body, in characters (Unicode code points)"),

		declare(&c.Feed.MaxLen, feed.DefaultMaxLen, positive[int](),
			"entries kept per feed in Redis; fan-out trims in batches, so a feed may hold up to `max_len/16` more "+
				"between trims. Older pages come from PostgreSQL"),
		declare(&c.Feed.Backfill, feed.RecommendedBackfill, notNegative[int](),
			"recent posts of a newly followed author merged into the follower's feed"),
		declare(&c.Feed.RebuildWait, feed.DefaultRebuildWait, positive[time.Duration](),
			"how long a read waits for another reader's rebuild of the same feed before it answers from PostgreSQL"),
		declare(&c.Feed.FallbackConcurrency, api.DefaultFallbackConcurrency, positive[int](),
			"feed reads one `serve` process sends to PostgreSQL at once while Redis does not answer; beyond it "+
				"`503 unavailable`"),
		declare(&c.Feed.ActiveDays, int(feed.DefaultActiveTTL/(24*time.Hour)), positive[int](),
			"a feed unread for this many days leaves Redis and fan-out skips its owner; the next read rebuilds it"),

		declare(&c.Fanout.Concurrency, fanout.DefaultConcurrency, positive[int](),
			"tickets in flight per `work` process (`--concurrency`)"),
		declare(&c.Fanout.PageSize, fanout.DefaultPageSize, positive[int](),
			"followers per PostgreSQL page and per Redis pipeline"),
		declare(&c.Fanout.ChunkSize, fanout.DefaultChunkSize, positive[int](),
			"a fan-out to more followers is split into chunks of this many, each a unit of work any worker can take"),
		declare(&c.Fanout.CelebrityThreshold, feed.RecommendedCelebrityThreshold, notNegative[int64](),
			"authors with more followers than this are not fanned out on write; their posts are merged into feeds at "+
				"read time. 0: nobody is pulled; do not set 0 once authors have been pulled (their posts of that time "+
				"are only in their own timelines, which reads would stop merging)"),
		declare(&c.Fanout.FollowingThreshold, feed.RecommendedFollowingThreshold, notNegative[int64](),
			"readers who follow more accounts than this are not fanned out to: Redis keeps no feed for them, and "+
				"their home feed is read from PostgreSQL at each read. 0: every reader is fanned out to"),

		declare(&c.Outbox.BatchSize, outbox.DefaultBatchSize, positive[int](),
			"outbox rows claimed per dispatcher round trip"),
		declare(&c.Outbox.PollInterval, outbox.DefaultPollInterval, positive[time.Duration](),
			"longest sleep between claims when no NOTIFY wakes the dispatcher"),
		declare(&c.Outbox.Notify, true, anyValue[bool](),
			"LISTEN/NOTIFY wake-ups of dispatchers; `false` behind PgBouncer in transaction mode (polling only)"),
		declare(&c.Outbox.Lease, outbox.DefaultLease, positive[time.Duration](),
			"how long a claim is exclusive; a dead dispatcher's rows are claimable again after it"),
		declare(&c.Outbox.RedeliverAfter, outbox.DefaultRedeliverAfter, positive[time.Duration](),
			"an event published but not finished by a worker within this is published again (a worker's heartbeat "+
				"extends it while it works)"),
		declare(&c.Outbox.MaxAttempts, outbox.DefaultMaxAttempts, positive[int](),
			"failed attempts before an event is parked as dead"),
		declare(&c.Outbox.BackoffBase, backoff.DefaultSchedule.Base, positive[time.Duration](),
			"retry `n` of a failed event waits `backoff_base · n⁴` (±25 % jitter) …"),
		declare(&c.Outbox.BackoffMax, backoff.DefaultSchedule.Max, positive[time.Duration](), "… at most this"),
		declare(&c.Outbox.Retention, outbox.DefaultRetention, positive[time.Duration](),
			"finished outbox rows are deleted after this"),

		declare(&c.Queue.Stream, queue.DefaultStream, notEmpty(),
			"the Redis stream of tickets (behind `redis.prefix`)"),
		declare(&c.Queue.Group, queue.DefaultGroup, notEmpty(), "the stream's consumer group that workers share"),
		declare(&c.Queue.Partitions, queue.DefaultPartitions, between(1, queue.MaxPartitions),
			"how many streams the tickets are spread over: partition 0 is `queue.stream`, partition p the stream "+
				"`queue.stream:{p}`, each in a Redis Cluster slot of its own, so that the queue spreads over the "+
				"shards (16 or more on a cluster of 3). Every worker reads every partition. It may change on a "+
				"running system: workers go on reading the partitions the old count wrote to until they are empty. "+
				"Above 1, `redis.prefix` and `queue.stream` must not hold a `{`"),
		declare(&c.Queue.ClaimIdle, fanout.DefaultClaimIdle, positive[time.Duration](),
			"tickets a silent worker held this long are taken over by another"),
		declare(&c.Queue.MaxDeliveries, fanout.DefaultMaxDeliveries, positive[int64](),
			"a ticket delivered more often than this (its workers keep dying) is parked as dead"),

		declare(&c.Log.Level, "info", oneOf(logLevels...), "the least level logged"),
		declare(&c.Log.Format, "json", oneOf("json", "console"),
			"`console` with `--dev`; logs go to stderr, timestamps in ISO 8601, UTC (`2026-12-01T08:00:00.123Z`)"),
		declare(&c.Log.AccessLevel, "info", oneOf(logLevels...),
			"level of the access log's line per API request; below `log.level` it is not written"),
		declare(&c.Tracing.Endpoint, "", collectorURL(),
			"OpenTelemetry traces over OTLP/HTTP to this collector (`http://otel-collector:4318`; to `/v1/traces` "+
				"unless the URL has a path); empty: no tracing (see [Logs and traces](OPERATIONS.md#logs-and-traces))"),
		declare(&c.Tracing.SampleRatio, 1.0, between(0.0, 1.0),
			"share of new traces recorded (parent-based: a trace begun by a caller's `traceparent`, or a post's "+
				"stored context, keeps its decision)"),
		declare(&c.ShutdownDrain, 5*time.Second, notNegativeBecause[time.Duration]("0 stops at once"),
			"after SIGTERM a process that serves the API answers on for this long, `/readyz` answering 503, before "+
				"it stops accepting; 0: no drain"),
		declare(&c.ShutdownTimeout, 15*time.Second, positive[time.Duration](),
			"bound of the graceful stop that follows the drain"),
	}
}

// together returns what is wrong with keys that are right alone and wrong
// with each other (each value was already checked alone).
func (c *Config) together() []problem {
	var problems []problem
	if c.Queue.Partitions > 1 {
		// Each partition's stream carries a hash tag of its own.
		for _, kv := range [][2]string{{"redis.prefix", c.Redis.Prefix}, {"queue.stream", c.Queue.Stream}} {
			if strings.Contains(kv[1], "{") {
				problems = append(problems, problem{key: kv[0], related: []string{"queue.partitions"},
					text: fmt.Sprintf("must not hold a hash tag (\"{\") when queue.partitions > 1: each partition has its own, got %q", kv[1])})
			}
		}
	}
	return problems
}
