package api_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/ratelimit"
	"github.com/newsfeed/newsfeed/store"
)

// limitedServers builds n API servers over one database and one Redis prefix
// — n serve processes of one deployment — with the given limits, and a
// bundle per server. limiterRedis, when set, is the Redis the limiter talks
// to (a dead one, say); otherwise the feeds' Redis.
func limitedServers(t *testing.T, n, postsPerMinute, followsPerMinute int, limiterRedis redis.UniversalClient) ([]*testBundle, *prometheus.Registry) {
	t.Helper()
	pool := testenv.NewPool(t)
	db := store.New(pool, nil)
	rdb, prefix := testenv.NewRedis(t)
	if limiterRedis == nil {
		limiterRedis = rdb
	}
	reg := prometheus.NewRegistry()
	var bundles []*testBundle
	for i := range n {
		feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix})
		cfg := api.Config{
			Secret:           testSecret,
			RateLimiter:      ratelimit.New(limiterRedis, prefix),
			PostsPerMinute:   postsPerMinute,
			FollowsPerMinute: followsPerMinute,
		}
		if i == 0 {
			cfg.Registerer = reg
		}
		srv := httptest.NewServer(newAPI(t, db, db, feeds, cfg))
		t.Cleanup(srv.Close)
		bundles = append(bundles, &testBundle{pool: pool, db: db, rdb: rdb, prefix: prefix, feeds: feeds, srv: srv, secret: testSecret})
	}
	return bundles, reg
}

func (b *testBundle) tryPost(t *testing.T, author int64) response {
	t.Helper()
	return b.do(t, req{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body":"hello"}`), as: author})
}

// requireRateLimited requires 429 rate_limited with a Retry-After of whole
// seconds, at least 1 and at most the limit's period.
func requireRateLimited(t *testing.T, res response) {
	t.Helper()
	requireError(t, res, http.StatusTooManyRequests, "rate_limited")
	secs, err := strconv.Atoi(res.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q is whole seconds", res.header.Get("Retry-After"))
	require.GreaterOrEqual(t, secs, 1)
	require.LessOrEqual(t, secs, 60)
}

// A user over the posts limit gets 429 with Retry-After, nothing is written,
// and another user is served meanwhile.
func TestPostsRateLimitPerUser(t *testing.T) {
	t.Parallel()
	servers, reg := limitedServers(t, 1, 3, 0, nil)
	b := servers[0]
	for range 3 {
		require.Equal(t, http.StatusCreated, b.tryPost(t, 1).status)
	}
	before := b.state(t)
	res := b.tryPost(t, 1)
	requireRateLimited(t, res)
	// 3 a minute: the next post is allowed about 20 s later.
	require.InDelta(t, 20, mustAtoi(t, res.header.Get("Retry-After")), 1)
	require.Equal(t, before, b.state(t), "a refused post writes nothing")

	require.Equal(t, http.StatusCreated, b.tryPost(t, 2).status, "another user is not slowed")
	require.Equal(t, 1.0, counterValue(t, reg, "newsfeed_ratelimit_rejected_total", "posts"))

	// Reads are not limited.
	require.Equal(t, http.StatusOK, b.get(t, 1, "/v1/feed").status)
}

// Follows and unfollows share one limit.
func TestFollowsRateLimitCountsUnfollowsToo(t *testing.T) {
	t.Parallel()
	servers, _ := limitedServers(t, 1, 0, 2, nil)
	b := servers[0]
	b.follow(t, 1, 2)
	b.unfollow(t, 1, 2)
	requireRateLimited(t, b.put(t, 1, "/v1/following/3"))
	requireRateLimited(t, b.del(t, 1, "/v1/following/2"))
	require.Zero(t, b.count(t, "follows", "follower_id = 1"), "the refused follow was not made")
	b.follow(t, 4, 2) // another user
}

// The limit is shared by every serve process of a deployment: it lives in
// Redis.
func TestRateLimitHoldsAcrossServers(t *testing.T) {
	t.Parallel()
	servers, _ := limitedServers(t, 2, 4, 0, nil)
	for i := range 4 {
		require.Equal(t, http.StatusCreated, servers[i%2].tryPost(t, 7).status)
	}
	requireRateLimited(t, servers[0].tryPost(t, 7))
	requireRateLimited(t, servers[1].tryPost(t, 7))
}

// 0 turns a limit off: more posts than the default 60 a minute go through.
func TestRateLimitZeroIsOff(t *testing.T) {
	t.Parallel()
	servers, _ := limitedServers(t, 1, 0, 0, nil)
	for range 70 {
		require.Equal(t, http.StatusCreated, servers[0].tryPost(t, 1).status)
	}
	for i := range 70 {
		servers[0].follow(t, 1, int64(100+i))
	}
}

// When the limiter's Redis does not answer, requests go through (fail open)
// and are counted.
func TestRateLimitFailsOpenWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = dead.Close() })
	servers, reg := limitedServers(t, 1, 1, 1, dead)
	b := servers[0]
	for range 3 {
		require.Equal(t, http.StatusCreated, b.tryPost(t, 1).status)
	}
	b.follow(t, 1, 2)
	b.follow(t, 1, 3)
	require.Equal(t, 3.0, counterValue(t, reg, "newsfeed_ratelimit_fail_open_total", "posts"))
	require.Equal(t, 2.0, counterValue(t, reg, "newsfeed_ratelimit_fail_open_total", "follows"))
}

// counterValue reads the counter of a registered vector by its one label
// value.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%q} in the registry", name, label)
	return 0
}

func mustAtoi(t *testing.T, s string) float64 {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return float64(n)
}
