package fanout_test

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/queue"
)

// scrape gathers reg and returns the samples by metric name (a gauge's value
// or a counter's); a name absent from the scrape is absent from the map.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err, "a scrape must not fail as a whole")
	out := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			if g := m.GetGauge(); g != nil {
				out[mf.GetName()] = g.GetValue()
			} else if c := m.GetCounter(); c != nil {
				out[mf.GetName()] = c.GetValue()
			}
		}
	}
	return out
}

func TestQueuePendingGauge(t *testing.T) {
	t.Parallel()

	t.Run("FailedReadKeepsTheLastValueAndCountsTheError", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := testenv.NewRedis(t)
		q := queue.New(rdb, prefix+"tickets", "fanout")
		require.NoError(t, q.EnsureGroup(t.Context()))
		reg := prometheus.NewRegistry()
		reg.MustRegister(fanout.NewPendingCollector(q.Pending))

		// Two tickets delivered to a worker and not acknowledged.
		require.NoError(t, rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: q.Stream(), Values: []any{"id", 1}}).Err())
		require.NoError(t, rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: q.Stream(), Values: []any{"id", 2}}).Err())
		_, err := rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{
			Group: "fanout", Consumer: "w", Streams: []string{q.Stream(), ">"}, Count: 10, Block: -1,
		}).Result()
		require.NoError(t, err)
		got := scrape(t, reg)
		require.Equal(t, 2.0, got["newsfeed_queue_pending"])
		require.Equal(t, 0.0, got["newsfeed_queue_pending_errors_total"])

		// Redis fails the read (the key is no stream now): the gauge keeps
		// what it last knew, and the failure is counted.
		require.NoError(t, rdb.Del(t.Context(), q.Stream()).Err())
		require.NoError(t, rdb.Set(t.Context(), q.Stream(), "not a stream", 0).Err())
		_, err = q.Pending(t.Context())
		require.Error(t, err)
		got = scrape(t, reg)
		require.Equal(t, 2.0, got["newsfeed_queue_pending"], "a failed read reported %v", got["newsfeed_queue_pending"])
		require.Equal(t, 1.0, got["newsfeed_queue_pending_errors_total"])
		got = scrape(t, reg)
		require.Equal(t, 2.0, got["newsfeed_queue_pending"])
		require.Equal(t, 2.0, got["newsfeed_queue_pending_errors_total"])

		// Redis answers again.
		require.NoError(t, rdb.Del(t.Context(), q.Stream()).Err())
		require.NoError(t, q.EnsureGroup(t.Context()))
		got = scrape(t, reg)
		require.Equal(t, 0.0, got["newsfeed_queue_pending"])
		require.Equal(t, 2.0, got["newsfeed_queue_pending_errors_total"])
	})

	t.Run("UnknownBeforeTheFirstGoodReadIsNaNNotZero", func(t *testing.T) {
		t.Parallel()
		// Redis is unreachable from the start: nothing was ever read.
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		q := queue.New(rdb, "nftest:unreachable:tickets", "fanout")
		reg := prometheus.NewRegistry()
		reg.MustRegister(fanout.NewPendingCollector(q.Pending))

		got := scrape(t, reg)
		v, ok := got["newsfeed_queue_pending"]
		require.True(t, ok, "the gauge is exported")
		require.True(t, math.IsNaN(v), "an unknown count reads %v", v)
		require.Equal(t, 1.0, got["newsfeed_queue_pending_errors_total"])
	})
}
