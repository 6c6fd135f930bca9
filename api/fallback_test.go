package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/api"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// heldTruth is the real store whose fallback feed reads wait for the test.
type heldTruth struct {
	*store.DB
	entered, release chan struct{}
}

func (h *heldTruth) FolloweePosts(ctx context.Context, follower, before int64, limit int) ([]domain.Post, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.DB.FolloweePosts(ctx, follower, before, limit)
}

// While Redis is down, feed reads go to PostgreSQL, at most
// feed.fallback_concurrency at once; beyond that a read answers 503. Both
// are counted.
func TestFeedFallbackIsBounded(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	db := store.New(pool, nil)
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	truth := &heldTruth{DB: db, entered: make(chan struct{}), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(newAPI(t, db, db, newFeeds(t, rdb, db, feed.Config{}), api.Config{
		Secret: testSecret, Truth: truth, FallbackConcurrency: 1, Registerer: reg,
	}))
	t.Cleanup(srv.Close)
	b := &testBundle{pool: pool, db: db, srv: srv, secret: testSecret}
	b.follow(t, 1, 2)
	b.createPost(t, 2, "from PostgreSQL")

	first := make(chan response)
	go func() {
		res, err := b.tryDo(req{method: http.MethodGet, path: "/v1/feed", auth: "Bearer " + b.token(t, 1)})
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-truth.entered // the one fallback read allowed is running
	requireError(t, b.get(t, 3, "/v1/feed"), http.StatusServiceUnavailable, "unavailable")
	close(truth.release)
	res := <-first
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	require.Contains(t, string(res.body), `"body":"from PostgreSQL"`)
	require.Contains(t, string(res.body), `"next_cursor":null`)

	reads := func(outcome string) float64 {
		c, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range c {
			if mf.GetName() == "newsfeed_feed_fallback_reads_total" {
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == outcome {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	require.Equal(t, 1.0, reads("served"))
	require.Equal(t, 1.0, reads("refused"))
}
