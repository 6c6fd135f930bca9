package api_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/ratelimit"
	"github.com/newsfeed/newsfeed/sticky"
	"github.com/newsfeed/newsfeed/store"
)

// The messages of the health watch's lines about Redis.
const (
	redisDownLine = "Redis is unreachable: what needs it fails, and is retried, until it answers"
	redisUpLine   = "Redis answers again"
)

// cuttableRedis is the test's Redis behind a dialer it can cut: while cut,
// every open connection is closed and every dial is refused at once, as
// from a Redis that stopped.
type cuttableRedis struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

func (r *cuttableRedis) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err == nil {
		r.conns[conn] = true
	}
	return conn, err
}

func (r *cuttableRedis) setCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for c := range r.conns {
			_ = c.Close()
		}
		clear(r.conns)
	}
}

// countingFeeds, countingLimiter and countingPositions count what the API
// asks of Redis.
type countingFeeds struct {
	*feed.Feeds
	reads atomic.Int64
}

func (f *countingFeeds) Read(ctx context.Context, userID, before int64, limit int) (domain.FeedPage, error) {
	f.reads.Add(1)
	return f.Feeds.Read(ctx, userID, before, limit)
}

type countingLimiter struct {
	api.RateLimiter
	calls atomic.Int64
}

func (l *countingLimiter) Allow(ctx context.Context, action string, user int64, perMinute int) (time.Duration, error) {
	l.calls.Add(1)
	return l.RateLimiter.Allow(ctx, action, user, perMinute)
}

type countingPositions struct {
	api.WritePositions
	calls atomic.Int64
}

func (p *countingPositions) Record(ctx context.Context, user, lsn int64) error {
	p.calls.Add(1)
	return p.WritePositions.Record(ctx, user, lsn)
}

func (p *countingPositions) Get(ctx context.Context, user int64) (int64, bool, error) {
	p.calls.Add(1)
	return p.WritePositions.Get(ctx, user)
}

// outageBundle is a serve process as app wires it, on a Redis the test can
// cut: feeds with the PostgreSQL fallback, rate limits and read-your-writes
// in that Redis, and a health watch (pinging every 20 ms while something is
// down) that the API asks about outages. Everything logs at debug into the
// observer, the watch as "health", the rest as "api".
type outageBundle struct {
	*testBundle
	redis     *cuttableRedis
	client    *redis.Client
	watch     *health.Watch
	logs      *observer.ObservedLogs
	reg       *prometheus.Registry
	feeds     *countingFeeds
	limiter   *countingLimiter
	positions *countingPositions
}

func newOutageBundle(t *testing.T) *outageBundle {
	t.Helper()
	pool := testenv.NewPool(t)
	db := store.New(pool, pool) // a "replica" that never says it replayed: writers' listings read the primary
	_, prefix := testenv.NewRedis(t)
	cut := &cuttableRedis{conns: map[net.Conn]bool{}}
	opts, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	// As app configures its client (connectRedis), whose dial and retry
	// budget the tests measure; the pool fails fast without dialing once
	// PoolSize dials in a row failed, so it is as large as app's default.
	opts.PoolSize, opts.ContextTimeoutEnabled, opts.Dialer = 96, true, cut.dial
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })

	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	watch := health.NewWatch(log.Named("health"), 20*time.Millisecond, time.Second,
		health.Dependency{Name: health.PostgreSQL, Key: "database.url", Ping: pool.Ping},
		health.Dependency{Name: health.Redis, Key: "redis.url", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { _ = watch.Run(ctx) })
	t.Cleanup(func() { cancel(); run.Wait() })

	feeds := &countingFeeds{Feeds: newFeeds(t, rdb, db, feed.Config{Prefix: prefix, Backfill: 50, Logger: log.Named("feed")})}
	limiter := &countingLimiter{RateLimiter: ratelimit.New(rdb, prefix)}
	positions := &countingPositions{WritePositions: sticky.New(rdb, prefix)}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(newAPI(t, db, db, feeds, api.Config{
		Secret:           testSecret,
		Truth:            db,
		RateLimiter:      limiter,
		PostsPerMinute:   1000,
		FollowsPerMinute: 1000,
		ReadYourWrites:   &api.ReadYourWrites{Positions: positions, Replication: db, Primary: db},
		Registerer:       reg,
		Logger:           log.Named("api"),
		Outages:          watch,
	}))
	t.Cleanup(srv.Close)
	return &outageBundle{
		testBundle: &testBundle{pool: pool, db: db, prefix: prefix, srv: srv, secret: testSecret},
		redis:      cut, client: rdb, watch: watch, logs: logs, reg: reg,
		feeds: feeds, limiter: limiter, positions: positions,
	}
}

// waitRedisBack waits until the watch has seen Redis answer again.
func (b *outageBundle) waitRedisBack(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return !b.watch.IsDown(health.Redis) }, 30*time.Second, 10*time.Millisecond,
		"the watch sees Redis answer again")
}

// TestRedisOutageLoggedOncePerProcess: Redis stops while feed reads (served
// from PostgreSQL), rate-limited posts and follows, and listings checked for
// read-your-writes go on, and comes back. The process logs the outage in
// two lines, the watch's: one when it began, one when it ended. Every other
// line is a request's, at debug, with that request's id; none has a stack.
func TestRedisOutageLoggedOncePerProcess(t *testing.T) {
	t.Parallel()
	b := newOutageBundle(t)
	const reader, author = 1, 2
	b.follow(t, reader, author)
	b.createPost(t, author, "before the outage")

	var mu sync.Mutex
	ids := map[string]bool{}
	requests := func(round string) {
		t.Helper()
		var wg sync.WaitGroup
		send := func(want int, r req) {
			wg.Go(func() {
				res, err := b.tryDo(r)
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, want, res.status, "%s: %s %s: %s", round, r.method, r.path, res.body)
				mu.Lock()
				ids[res.header.Get("X-Request-Id")] = true
				mu.Unlock()
			})
		}
		for i := range 8 {
			follower := int64(100 + i)
			send(http.StatusOK, req{method: http.MethodGet, path: "/v1/feed", auth: "Bearer " + b.token(t, reader)})
			send(http.StatusCreated, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body":"during"}`), auth: "Bearer " + b.token(t, author)})
			send(http.StatusOK, req{method: http.MethodGet, path: "/v1/users/2/followers", auth: "Bearer " + b.token(t, reader)})
			send(http.StatusNoContent, req{method: http.MethodPut, path: "/v1/following/2", auth: "Bearer " + b.token(t, follower)})
			send(http.StatusNoContent, req{method: http.MethodDelete, path: "/v1/following/" + strconv.Itoa(300+i), auth: "Bearer " + b.token(t, follower)})
		}
		wg.Wait()
	}

	before := b.logs.Len()
	b.redis.setCut(true)
	requests("Redis cut, the outage not known yet")
	require.Eventually(t, func() bool { return b.watch.IsDown(health.Redis) }, 10*time.Second, 10*time.Millisecond)
	requests("Redis known to be down")
	b.redis.setCut(false)
	b.waitRedisBack(t)
	requests("Redis back")

	require.Len(t, b.logs.FilterMessage(redisDownLine).All(), 1, "one line when the outage began")
	require.Len(t, b.logs.FilterMessage(redisUpLine).All(), 1, "one line when it ended")
	require.Zero(t, b.logs.FilterLevelExact(zapcore.ErrorLevel).Len(), "no request failed")
	require.Len(t, b.logs.FilterLevelExact(zapcore.WarnLevel).All(), 1, "the only warning is the outage's: %s", everything(t, b.logs))
	for _, e := range b.logs.All()[before:] {
		require.Empty(t, e.Stack, "%s", e.Message)
		if e.LoggerName == "health" {
			require.Contains(t, []string{redisDownLine, redisUpLine}, e.Message)
			continue
		}
		id, _ := e.ContextMap()["request_id"].(string)
		require.True(t, ids[id], "a line written while serving a request has its request_id: %s %v", e.Message, e.ContextMap())
	}
}

// commandBudget is the least time one command takes against a Redis that
// refuses connections, with opts (filled in by the client): each attempt
// (the first and MaxRetries more) dials DialerRetries times, waiting
// DialerRetryTimeout between dials. A request that waits for it has tried
// Redis.
func commandBudget(opts *redis.Options) time.Duration {
	return time.Duration(opts.MaxRetries+1) * time.Duration(opts.DialerRetries-1) * opts.DialerRetryTimeout
}

// TestKnownRedisOutageIsNotWaitedFor: once the health watch knows Redis is
// down, a feed read goes to PostgreSQL without trying Redis, and answers in
// less than a Redis command's dial and retry budget; rate limits and
// read-your-writes checks do not ask Redis either. When Redis answers again,
// the watch sees it and reads go back to Redis.
func TestKnownRedisOutageIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	b := newOutageBundle(t)
	const reader, author = 1, 2
	b.follow(t, reader, author)
	cached := b.createPost(t, author, "in the feed Redis keeps")
	require.Equal(t, []int64{cached.ID}, postIDs(page[apiPost](t, b.testBundle, reader, "/v1/feed").Items))
	served := func() float64 { return counterValue(t, b.reg, "newsfeed_feed_fallback_reads_total", "served") }

	b.redis.setCut(true)
	require.Equal(t, []int64{cached.ID}, postIDs(page[apiPost](t, b.testBundle, reader, "/v1/feed").Items))
	require.Equal(t, 1.0, served())
	require.Eventually(t, func() bool { return b.watch.IsDown(health.Redis) }, 10*time.Second, 10*time.Millisecond,
		"the read that failed had the watch look")
	budget := commandBudget(b.client.Options())
	start := time.Now()
	require.Error(t, b.client.Get(t.Context(), "k").Err())
	require.GreaterOrEqual(t, time.Since(start), budget, "what trying the cut Redis costs")

	fresh := b.createPost(t, author, "only in PostgreSQL until its event is delivered")
	feedReads, limiterCalls, positionCalls := b.feeds.reads.Load(), b.limiter.calls.Load(), b.positions.calls.Load()
	for i := range 3 {
		start := time.Now()
		require.Equal(t, []int64{fresh.ID, cached.ID}, postIDs(page[apiPost](t, b.testBundle, reader, "/v1/feed").Items))
		took := time.Since(start)
		t.Logf("feed read %d during the known outage: %s (budget %s)", i, took, budget)
		require.Less(t, took, budget, "a read during a known outage does not wait for Redis")
	}
	require.Equal(t, 4.0, served())
	require.Equal(t, http.StatusCreated, b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body":"x"}`), as: author}).status)
	require.Equal(t, []int64{author}, followIDs(page[apiFollow](t, b.testBundle, reader, "/v1/users/1/following").Items))
	require.Equal(t, feedReads, b.feeds.reads.Load(), "no feed read tried Redis")
	require.Equal(t, limiterCalls, b.limiter.calls.Load(), "no rate limit asked Redis")
	require.Equal(t, positionCalls, b.positions.calls.Load(), "no write position was read or recorded")
	require.Equal(t, 2.0, counterValue(t, b.reg, "newsfeed_ratelimit_fail_open_total", "posts"), "each post let through, counted")
	require.Equal(t, 1.0, counterValue(t, b.reg, "newsfeed_read_primary_fallback_total", "unchecked"), "the listing read the primary")

	b.redis.setCut(false)
	b.waitRedisBack(t)
	got := postIDs(page[apiPost](t, b.testBundle, reader, "/v1/feed").Items)
	require.Equal(t, feedReads+1, b.feeds.reads.Load(), "Redis is tried again")
	require.Equal(t, 4.0, served(), "and serves the read")
	require.Equal(t, []int64{cached.ID}, got, "the feed Redis keeps, which no worker has updated here")
	b.createPost(t, author, "after")
	require.Equal(t, limiterCalls+1, b.limiter.calls.Load(), "the rate limit is asked again")
}
