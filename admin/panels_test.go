package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/admin"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/newsfeed/newsfeed/store"
)

func TestQueuePanel(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := t.Context()
	require.NoError(t, b.queue.EnsureGroup(ctx))

	var panel admin.QueuePanel
	call(t, c, "GET", "/admin/api/queue", token).decode(t, &panel)
	require.Len(t, panel.Partitions, 1)
	p := panel.Partitions[0]
	require.Equal(t, b.queue.Key(0), p.Stream)
	require.True(t, p.GroupExists)
	require.Zero(t, p.Pending)
	require.Nil(t, p.OldestPendingID)
	require.NotNil(t, p.Consumers, "an empty list, not null")

	events := make([]domain.Event, 3)
	for i := range events {
		events[i] = domain.Event{ID: int64(i + 1), Type: domain.PostCreated, Payload: json.RawMessage(`{"post_id":1,"author_id":2}`), CreatedAt: time.Now()}
	}
	_, errs := b.queue.Publish(ctx, events)
	for _, err := range errs {
		require.NoError(t, err)
	}
	held, err := b.queue.Read(ctx, "worker-a", 2, time.Second)
	require.NoError(t, err)
	require.Len(t, held, 2)

	call(t, c, "GET", "/admin/api/queue", token).decode(t, &panel)
	p = panel.Partitions[0]
	require.EqualValues(t, 3, panel.Length)
	require.EqualValues(t, 2, panel.Pending)
	require.EqualValues(t, 3, p.Length)
	require.EqualValues(t, 2, p.Pending)
	require.Equal(t, []admin.Consumer{{Name: "worker-a", Pending: 2}}, p.Consumers)
	_, entry, err := queue.ParseTicket(held[0].MessageID)
	require.NoError(t, err)
	require.Equal(t, entry, *p.OldestPendingID)
	require.NotNil(t, p.OldestPendingAgeSeconds)
	require.Less(t, *p.OldestPendingAgeSeconds, 3600.0)
}

// TestDependenciesDown: with PostgreSQL and Redis unreachable, the panels
// that read them answer 503 naming the dependency, and the others answer.
func TestDependenciesDown(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/newsfeed?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := admin.New(admin.Config{Token: token, Outbox: store.New(pool, nil), Queue: queue.New(rdb, "nf:tickets", "fanout"),
		Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)

	for target, dependency := range map[string]string{
		"GET /admin/api/outbox":               "PostgreSQL",
		"GET /admin/api/outbox/dead":          "PostgreSQL",
		"POST /admin/api/outbox/dead/1/retry": "PostgreSQL",
		"GET /admin/api/queue":                "Redis",
	} {
		var method, path string
		_, err := fmt.Sscan(target, &method, &path)
		require.NoError(t, err)
		res := call(t, c, method, path, token)
		require.Equal(t, http.StatusServiceUnavailable, res.status, target)
		code, message := res.errorCode(t)
		require.Equal(t, "unavailable", code, target)
		require.Contains(t, message, dependency+" is unavailable: ", target)
	}
	for _, path := range []string{"/admin", "/admin/api/overview", "/admin/api/config", "/admin/api/metrics"} {
		require.Equal(t, http.StatusOK, call(t, c, "GET", path, token).status, path)
	}
}

// TestMetricsPanel: Run samples the process's registry, and the panel
// serves the samples, a delivery among them.
func TestMetricsPanel(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	delivery := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "newsfeed_delivery_seconds", Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
	})
	entries := prometheus.NewCounter(prometheus.CounterOpts{Name: "newsfeed_fanout_entries_total"})
	reg.MustRegister(delivery, entries)
	c, _ := setup(t, func(cfg *admin.Config) { cfg.Gatherer, cfg.SampleEvery = reg, 20*time.Millisecond })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	var m admin.Samples
	require.Eventually(t, func() bool {
		delivery.Observe(0.05)
		entries.Add(10)
		call(t, c, "GET", "/admin/api/metrics", token).decode(t, &m)
		for _, s := range m.Samples {
			if s.Deliveries > 0 && s.FanoutEntriesPerSecond > 0 && s.DeliveryP99Seconds != nil {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	require.InDelta(t, 0.02, m.SampleEverySeconds, 1e-9)
	for _, s := range m.Samples {
		if s.DeliveryP50Seconds != nil {
			require.InDelta(t, 0.05, *s.DeliveryP50Seconds, 0.03, "in the bucket of 0.04–0.08")
		}
	}
}
