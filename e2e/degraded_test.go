package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The health watch's lines about Redis, which every process logs once per
// outage (docs/API.md, "Logs").
const (
	redisDownLine = "Redis is unreachable: what needs it fails, and is retried, until it answers"
	redisUpLine   = "Redis answers again"
)

// startedWithoutRedis is a process started while its Redis (behind px) was
// unreachable, and the posts it accepted meanwhile.
type startedWithoutRedis struct {
	proc      *proc
	px        *proxy
	followers []int64
	posts     []int64 // newest first, as a feed lists them
}

// startWithoutRedis starts role (serve or all) with Redis unreachable and
// checks what an operator and a user meet: /healthz 200, /readyz 503 naming
// Redis, follows 204, posts 201, and the feed 200 read from PostgreSQL.
func startWithoutRedis(t *testing.T, c *cluster, role string, args ...string) startedWithoutRedis {
	t.Helper()
	redisURL, err := url.Parse(c.redisURL)
	require.NoError(t, err)
	px := newProxy(t, redisURL.Host)
	px.down()
	viaProxy := *redisURL
	viaProxy.Host = px.addr
	p := c.startWith(role, []string{"NEWSFEED_REDIS_URL=" + viaProxy.String()}, args...)

	code, _, err := opsGet(t, p.metricsAddr, "/healthz")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	code, body, err := opsGet(t, p.metricsAddr, "/readyz")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, code)
	var answer struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &answer), "%s", body)
	require.Equal(t, "unavailable", answer.Error.Code)
	require.Equal(t, "Redis is unreachable", answer.Error.Message, "/readyz names what is down")

	const author = 7
	followers := []int64{701, 702, 703}
	for _, f := range followers {
		p.client(f).follow(author)
	}
	var posts []int64
	for i := range 5 {
		posts = append(posts, p.client(author).post("while Redis is down "+string(rune('a'+i))).ID)
	}
	slices.Reverse(posts)
	require.Equal(t, posts, postIDs(p.client(followers[0]).feed()), "read from PostgreSQL")
	return startedWithoutRedis{proc: p, px: px, followers: followers, posts: posts}
}

// requireRedisOutageLoggedOnce requires p to have logged the Redis outage
// in two lines, when it began and when it ended: the only warning, and no
// stack trace.
func requireRedisOutageLoggedOnce(t *testing.T, p *proc) {
	t.Helper()
	require.Equal(t, 1, p.count(redisDownLine), "%s: one line when the outage began", p.role)
	require.Equal(t, 1, p.count(redisUpLine), "%s: one line when it ended", p.role)
	for _, l := range p.lines() {
		require.NotContains(t, l, "stacktrace", "%s: %v", p.role, l)
		if l["msg"] != redisDownLine {
			require.Contains(t, []any{"info", "debug"}, l["level"], "%s: %v", p.role, l)
		}
	}
}

// TestServeStartsWithoutRedis: Redis is unreachable when serve starts. serve
// starts anyway: /healthz 200, /readyz 503 naming Redis, posts and follows
// are accepted on PostgreSQL alone, the feed is read from PostgreSQL; once
// Redis answers, every post accepted meanwhile reaches every follower's feed
// exactly once. The outage is two lines of serve's log.
func TestServeStartsWithoutRedis(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_BACKOFF_BASE=100ms", "NEWSFEED_OUTBOX_NOTIFY=false", "NEWSFEED_LOG_LEVEL=info"))
	c.skipOnCluster("a TCP proxy cuts Redis; a cluster client would reach the nodes directly")
	started := startWithoutRedis(t, c, "serve")
	serve, posts, followers := started.proc, started.posts, started.followers

	// Redis answers again, with the followers' feeds as they were before
	// the outage (built, empty); the dispatcher and the worker deliver what
	// waited, into every feed, before anyone reads.
	started.px.up()
	c.markFeedsBuilt(followers)
	c.start("dispatch")
	c.start("work")
	c.waitOutboxDrained(60 * time.Second)
	for _, id := range posts {
		require.Equal(t, len(followers), c.feedsHolding(followers, id), "post %d delivered to every feed", id)
	}
	require.Eventually(t, func() bool { return readyz(t, serve.metricsAddr) == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	for _, f := range followers {
		require.Equal(t, posts, postIDs(serve.client(f).feed()), "follower %d, from Redis: each post once", f)
	}
	requireRedisOutageLoggedOnce(t, serve)
}

// TestAllStartsWithoutRedis: the same for `newsfeed all`, whose own
// dispatcher and workers wait for Redis and deliver once it answers.
func TestAllStartsWithoutRedis(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_BACKOFF_BASE=100ms", "NEWSFEED_OUTBOX_NOTIFY=false", "NEWSFEED_LOG_LEVEL=info"))
	c.skipOnCluster("a TCP proxy cuts Redis; a cluster client would reach the nodes directly")
	started := startWithoutRedis(t, c, "all", "--concurrency", "4")
	all, posts, followers := started.proc, started.posts, started.followers

	started.px.up()
	require.Eventually(t, func() bool { return readyz(t, all.metricsAddr) == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	c.waitOutboxDrained(60 * time.Second)
	for _, f := range followers {
		require.Equal(t, posts, postIDs(all.client(f).feed()), "follower %d, from Redis: each post once", f)
	}
	requireRedisOutageLoggedOnce(t, all)
}
