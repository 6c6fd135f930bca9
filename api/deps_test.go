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

	t.Run("Redis down", func(t *testing.T) {
		t.Parallel()
		pool := testenv.NewPool(t)
		db := store.New(pool, nil)
		rdb := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		feeds := feed.New(rdb, db, feed.Config{Backfill: 50})
		srv := httptest.NewServer(api.New(db, db, feeds, api.Config{Secret: testSecret}))
		t.Cleanup(srv.Close)
		b := &testBundle{pool: pool, db: db, srv: srv, secret: testSecret}

		requireError(t, b.get(t, 1, "/v1/feed"), http.StatusServiceUnavailable, "unavailable")
		// What needs only PostgreSQL still works.
		p := b.createPost(t, 2, "still here")
		require.Equal(t, http.StatusOK, b.get(t, 1, postPath(p.ID)).status)
	})

	t.Run("PostgreSQL down", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+deadAddr+"/nope?sslmode=disable&connect_timeout=2")
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		db := store.New(pool, nil)
		rdb, prefix := testenv.NewRedis(t)
		feeds := feed.New(rdb, db, feed.Config{Prefix: prefix, Backfill: 50})
		srv := httptest.NewServer(api.New(db, db, feeds, api.Config{Secret: testSecret}))
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
		}
	})
}
