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
// keeps running — trying again — and resumes by itself when the dependency
// returns.
func TestDependenciesDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_BACKOFF_BASE=100ms", "NEWSFEED_OUTBOX_NOTIFY=false"))
	c.skipOnCluster("a TCP proxy cuts Redis; a cluster client would reach the nodes directly")
	dbURL, err := url.Parse(c.dbURL)
	require.NoError(t, err)
	redisURL, err := url.Parse(c.redisURL)
	require.NoError(t, err)

	// Each process reaches each server through a proxy of its own, so that
	// the test sees which process tried to connect while it was down.
	type proxies struct{ pg, rd *proxy }
	via := map[*proc]proxies{}
	start := func(role string) *proc {
		px := proxies{pg: newProxy(t, dbURL.Host), rd: newProxy(t, redisURL.Host)}
		pgURL, rdURL := *dbURL, *redisURL
		pgURL.Host, rdURL.Host = px.pg.addr, px.rd.addr
		p := c.startWith(role, []string{"NEWSFEED_DATABASE_URL=" + pgURL.String(), "NEWSFEED_REDIS_URL=" + rdURL.String()})
		via[p] = px
		return p
	}
	serve, dispatcher, worker := start("serve"), start("dispatch"), start("work")
	roles := []*proc{serve, dispatcher, worker}
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
	// /readyz, its answer checked against docs/openapi.yaml (on any
	// goroutine: require.Eventually's condition runs on its own).
	ready := func(p *proc) int { return readyz(t, p.metricsAddr) }
	// tries waits until p has tried to connect to the server behind px n
	// more times since it answered its readyz (nothing else asks it to): its
	// own loop keeps trying, with back-off, while the server is away.
	tries := func(p *proc, px *proxy, n int, what string) {
		t.Helper()
		since := px.refusals()
		require.Eventually(t, func() bool { return px.refusals() >= since+n }, 30*time.Second, 10*time.Millisecond,
			"%s tries %s again", p.role, what)
	}

	t.Log("PostgreSQL down")
	for _, p := range roles {
		via[p].pg.down()
	}
	requireUnavailable(john.do("POST", "/v1/posts", map[string]string{"body": "lost?"}))
	requireUnavailable(john.do("PUT", "/v1/following/99", nil))
	for _, p := range roles {
		require.Equal(t, http.StatusServiceUnavailable, ready(p), p.role)
	}
	tries(dispatcher, via[dispatcher].pg, 5, "PostgreSQL") // claims fail, and it backs off and claims again
	for _, p := range roles {
		via[p].pg.up()
	}
	require.Eventually(t, func() bool { return ready(serve) == 200 }, 20*time.Second, 50*time.Millisecond)
	var posts, events int
	require.NoError(t, c.pool.QueryRow(context.Background(), "SELECT count(*) FROM posts").Scan(&posts))
	require.NoError(t, c.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox").Scan(&events))
	require.Zero(t, posts, "a refused post left nothing behind")
	require.Zero(t, events, "a refused post or follow left no event behind")
	p1 := john.post("after PostgreSQL came back")
	require.Eventually(t, func() bool { return c.feedsHolding(followers, p1.ID) == len(followers) },
		30*time.Second, 20*time.Millisecond, "delivery resumed")

	t.Log("Redis down")
	for _, p := range roles {
		via[p].rd.down()
	}
	// The feed is read from PostgreSQL meanwhile: the same page.
	require.Equal(t, []int64{p1.ID}, postIDs(alan.feed()), "from PostgreSQL while Redis is down")
	for _, p := range roles {
		require.Equal(t, http.StatusServiceUnavailable, ready(p), p.role)
	}
	p2 := john.post("written while Redis is down") // posting needs only PostgreSQL
	// The dispatcher tried to publish it and failed (the row counts the
	// failure and waits for its retry); the worker keeps trying to read.
	require.Eventually(t, func() bool {
		var failures int
		require.NoError(t, c.pool.QueryRow(context.Background(),
			"SELECT failures FROM outbox WHERE (payload->>'post_id')::bigint = $1", p2.ID).Scan(&failures))
		return failures >= 1
	}, 30*time.Second, 10*time.Millisecond, "the dispatcher failed to publish the post")
	tries(worker, via[worker].rd, 5, "Redis")
	for _, p := range roles {
		via[p].rd.up()
	}
	require.Eventually(t, func() bool { return c.feedsHolding(followers, p2.ID) == len(followers) },
		30*time.Second, 20*time.Millisecond, "delivery resumed")
	items := alan.feed()
	require.Len(t, items, 2)
	require.Equal(t, p2.ID, items[0].ID)

	for _, p := range roles {
		select {
		case <-p.done:
			t.Fatalf("%s exited while a dependency was down: %v", p.role, p.exitErr)
		default:
		}
		require.Equal(t, 0, p.stop())
	}
}
