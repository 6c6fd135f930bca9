package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// Nothing listens on port 1 of the loopback: connections are refused at once.
const deadAddr = "127.0.0.1:1"

func TestDependencyDown(t *testing.T) {
	t.Parallel()

	// Redis down does not take writes down (API.md): posts, deletes, follows
	// and unfollows are accepted on PostgreSQL alone (204 for an unfollow),
	// each with its outbox event to deliver it when Redis returns; reads of
	// PostgreSQL work; a feed read answers 503 without a fallback, and the
	// page from PostgreSQL with one.
	t.Run("Redis down", func(t *testing.T) {
		t.Parallel()
		pool := testenv.NewPool(t)
		db := store.New(pool, nil)
		rdb := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		feeds := newFeeds(t, rdb, db, feed.Config{Backfill: 50})
		srv := httptest.NewServer(newAPI(t, db, db, feeds, api.Config{Secret: testSecret}))
		t.Cleanup(srv.Close)
		b := &testBundle{pool: pool, db: db, srv: srv, secret: testSecret}
		events := func(eventType string) int {
			return b.count(t, "outbox", "event_type = $1 AND status = 'pending'", eventType)
		}

		requireError(t, b.get(t, 1, "/v1/feed"), http.StatusServiceUnavailable, "unavailable") // no fallback configured

		p := b.createPost(t, 2, "still here")
		require.Equal(t, http.StatusOK, b.get(t, 1, postPath(p.ID)).status)
		require.Equal(t, 1, events("post.created"))
		gone := b.createPost(t, 2, "deleted while Redis is down")
		require.Equal(t, http.StatusNoContent, b.del(t, 2, postPath(gone.ID)).status)
		requireError(t, b.get(t, 1, postPath(gone.ID)), http.StatusNotFound, "not_found")
		require.Equal(t, 1, events("post.deleted"))

		b.follow(t, 1, 2)
		require.Equal(t, 1, events("follow.created"))
		b.follow(t, 1, 3)
		require.Equal(t, http.StatusNoContent, b.del(t, 1, "/v1/following/3").status, "an unfollow stands on PostgreSQL alone")
		require.Equal(t, 1, events("follow.deleted"))

		require.Equal(t, []int64{p.ID}, postIDs(page[apiPost](t, b, 1, "/v1/users/2/posts").Items))
		require.Equal(t, []int64{2}, followIDs(page[apiFollow](t, b, 1, "/v1/users/1/following").Items))
		require.Equal(t, []int64{1}, followIDs(page[apiFollow](t, b, 1, "/v1/users/2/followers").Items))

		// Feed reads: 503 without a fallback, the page from PostgreSQL with one.
		withTruth := httptest.NewServer(newAPI(t, db, db, feeds, api.Config{Secret: testSecret, Truth: db}))
		t.Cleanup(withTruth.Close)
		fb := &testBundle{pool: pool, db: db, srv: withTruth, secret: testSecret}
		older := b.createPost(t, 2, "older")
		first := page[apiPost](t, fb, 1, "/v1/feed?limit=1")
		require.Equal(t, []int64{older.ID}, postIDs(first.Items))
		require.NotNil(t, first.NextCursor)
		rest := page[apiPost](t, fb, 1, "/v1/feed?limit=5&cursor="+*first.NextCursor)
		require.Equal(t, []int64{p.ID}, postIDs(rest.Items), "paged on, the deleted post left out")
		require.Nil(t, rest.NextCursor)
	})

	// PostgreSQL down: every route answers 503 unavailable, and nothing is
	// half-written: Redis holds nothing of the refused writes. (A feed read
	// may leave a rebuild's placeholder, which expires: it is read last.)
	t.Run("PostgreSQL down", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+deadAddr+"/nope?sslmode=disable&connect_timeout=2")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		db := store.New(pool, nil)
		rdb, prefix := testenv.NewRedis(t)
		feeds := newFeeds(t, rdb, db, feed.Config{Prefix: prefix, Backfill: 50})
		srv := httptest.NewServer(newAPI(t, db, db, feeds, api.Config{Secret: testSecret}))
		t.Cleanup(srv.Close)
		b := &testBundle{srv: srv, secret: testSecret}

		for _, r := range []req{
			{method: http.MethodPost, path: "/v1/posts", body: []byte(`{"body": "x"}`)},
			{method: http.MethodGet, path: "/v1/posts/1"},
			{method: http.MethodDelete, path: "/v1/posts/1"},
			{method: http.MethodPut, path: "/v1/following/2"},
			{method: http.MethodDelete, path: "/v1/following/2"},
			{method: http.MethodGet, path: "/v1/users/2/followers"},
			{method: http.MethodGet, path: "/v1/users/2/following"},
			{method: http.MethodGet, path: "/v1/users/2/posts"},
			{method: http.MethodGet, path: "/v1/feed"},
		} {
			r.as = 1
			res := b.do(t, r)
			require.Equal(t, http.StatusServiceUnavailable, res.status, "%s %s: %s", r.method, r.path, res.body)
			require.Equal(t, "unavailable", errorCode(t, res), "%s %s", r.method, r.path)
			if r.method != http.MethodGet {
				keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
				require.NoError(t, err)
				require.Empty(t, keys, "%s %s, refused by PostgreSQL, wrote nothing to Redis", r.method, r.path)
			}
		}
	})
}
