package e2e

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeStartsWithoutRedis: Redis is unreachable when serve starts. serve
// starts anyway: /healthz 200, /readyz 503, posts and follows are accepted
// on PostgreSQL alone, the feed is read from PostgreSQL; once Redis answers,
// every post accepted meanwhile reaches every follower's feed exactly once.
func TestServeStartsWithoutRedis(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_BACKOFF_BASE=100ms", "NEWSFEED_OUTBOX_NOTIFY=false"))
	c.skipOnCluster("a TCP proxy cuts Redis; a cluster client would reach the nodes directly")
	redisURL, err := url.Parse(c.redisURL)
	require.NoError(t, err)
	px := newProxy(t, redisURL.Host)
	px.down()
	viaProxy := *redisURL
	viaProxy.Host = px.addr
	serve := c.startWith("serve", []string{"NEWSFEED_REDIS_URL=" + viaProxy.String()})

	// The answer to GET path on the metrics address, checked against
	// docs/openapi.yaml (on any goroutine: require.Eventually's condition
	// runs on its own).
	status := func(path string) int {
		code, _, err := opsGet(t, serve.metricsAddr, path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
		}
		return code
	}
	require.Equal(t, http.StatusOK, status("/healthz"))
	require.Equal(t, http.StatusServiceUnavailable, status("/readyz"))

	const author = 7
	followers := []int64{701, 702, 703}
	for _, f := range followers {
		serve.client(f).follow(author)
	}
	var posts []int64
	for i := range 5 {
		posts = append(posts, serve.client(author).post("while Redis is down "+string(rune('a'+i))).ID)
	}
	slices.Reverse(posts)
	require.Equal(t, posts, postIDs(serve.client(followers[0]).feed()), "read from PostgreSQL")

	// Redis answers again, with the followers' feeds as they were before
	// the outage (built, empty); the dispatcher and the worker deliver what
	// waited, into every feed, before anyone reads.
	px.up()
	c.markFeedsBuilt(followers)
	c.start("dispatch")
	c.start("work")
	c.waitOutboxDrained(60 * time.Second)
	for _, id := range posts {
		require.Equal(t, len(followers), c.feedsHolding(followers, id), "post %d delivered to every feed", id)
	}
	require.Eventually(t, func() bool { return status("/readyz") == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	for _, f := range followers {
		require.Equal(t, posts, postIDs(serve.client(f).feed()), "follower %d, from Redis: each post once", f)
	}
}
