package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDependenciesDown: with PostgreSQL or Redis unreachable the API answers
// 503 unavailable (and writes nothing half), /readyz turns 503, and every role
// keeps running and resumes by itself when the dependency returns.
func TestDependenciesDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dbURL, err := url.Parse(c.dbURL)
	require.NoError(t, err)
	pg := newProxy(t, dbURL.Host)
	dbURL.Host = pg.addr
	redisURL, err := url.Parse(c.redisURL)
	require.NoError(t, err)
	rd := newProxy(t, redisURL.Host)
	redisURL.Host = rd.addr
	c.env = append(c.env, "NEWSFEED_DATABASE_URL="+dbURL.String(), "NEWSFEED_REDIS_URL="+redisURL.String(),
		"NEWSFEED_OUTBOX_BACKOFF_BASE=100ms", "NEWSFEED_OUTBOX_NOTIFY=false")

	serve, dispatcher, worker := c.start("serve"), c.start("dispatch"), c.start("work")
	const author = 5
	followers := c.seedFollowers(author, 500, 20)
	c.markFeedsBuilt(followers)
	john := serve.client(author)
	alan := serve.client(followers[0])

	requireUnavailable := func(status int, body []byte) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, status, string(body))
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(body, &e))
		require.Equal(t, "unavailable", e.Error.Code)
	}
	ready := func(p *proc) int {
		resp, err := http.Get("http://" + p.metricsAddr + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	t.Log("PostgreSQL down")
	pg.down()
	requireUnavailable(john.do("POST", "/v1/posts", map[string]string{"body": "lost?"}))
	requireUnavailable(john.do("PUT", "/v1/following/99", nil))
	for _, p := range []*proc{serve, dispatcher, worker} {
		require.Equal(t, http.StatusServiceUnavailable, ready(p), p.role)
	}
	time.Sleep(time.Second) // the dispatcher and the worker fail and back off meanwhile
	pg.up()
	require.Eventually(t, func() bool { return ready(serve) == 200 }, 20*time.Second, 50*time.Millisecond)
	var posts int
	require.NoError(t, c.pool.QueryRow(context.Background(), "SELECT count(*) FROM posts").Scan(&posts))
	require.Zero(t, posts, "a refused post left nothing behind")
	p1 := john.post("after PostgreSQL came back")
	require.Eventually(t, func() bool { return c.feedsHolding(followers, p1.ID) == len(followers) },
		30*time.Second, 20*time.Millisecond, "delivery resumed")

	t.Log("Redis down")
	rd.down()
	requireUnavailable(alan.do("GET", "/v1/feed", nil))
	for _, p := range []*proc{serve, dispatcher, worker} {
		require.Equal(t, http.StatusServiceUnavailable, ready(p), p.role)
	}
	p2 := john.post("written while Redis is down") // posting needs only PostgreSQL
	time.Sleep(time.Second)
	rd.up()
	require.Eventually(t, func() bool { return c.feedsHolding(followers, p2.ID) == len(followers) },
		30*time.Second, 20*time.Millisecond, "delivery resumed")
	items := alan.feed()
	require.Len(t, items, 2)
	require.Equal(t, p2.ID, items[0].ID)

	for _, p := range []*proc{serve, dispatcher, worker} {
		select {
		case <-p.done:
			t.Fatalf("%s exited while a dependency was down: %v", p.role, p.exitErr)
		default:
		}
		require.Equal(t, 0, p.stop())
	}
}
