package outbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/outbox"
)

// gauges gathers reg and returns every gauge by name.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			if g := m.GetGauge(); g != nil {
				out[mf.GetName()] += g.GetValue()
			}
		}
	}
	return out
}

func TestCollector(t *testing.T) {
	t.Parallel()

	t.Run("ExportsTheOutboxGaugesFromTheTable", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		_, err := b.pool.Exec(t.Context(), `
INSERT INTO outbox (event_type, payload, status, created_at) VALUES
    ('post.created', '{}', 'pending', now() - interval '90 seconds'),
    ('post.created', '{}', 'pending', now()),
    ('post.created', '{}', 'publishing', now()),
    ('post.created', '{}', 'published', now()),
    ('post.created', '{}', 'dead', now() - interval '1 hour'),
    ('post.created', '{}', 'done', now() - interval '2 hours')`)
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		reg.MustRegister(outbox.NewCollector(b.db.OutboxStats))

		g := gauges(t, reg)
		require.EqualValues(t, 4, g["newsfeed_outbox_pending"], "pending and in flight: not finished")
		require.EqualValues(t, 2, g["newsfeed_outbox_in_flight"])
		require.EqualValues(t, 1, g["newsfeed_outbox_dead"])
		// The oldest unfinished row, not the dead or the done one.
		require.InDelta(t, 90, g["newsfeed_outbox_oldest_pending_age_seconds"], 30)
	})

	t.Run("ReadsAtMostOnceASecondAndRepeatsTheLastValuesOnError", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		var down atomic.Bool
		stats := func(context.Context) (outbox.Stats, error) {
			calls.Add(1)
			if down.Load() {
				return outbox.Stats{}, errStoreDown
			}
			return outbox.Stats{Pending: 3, InFlight: 2, Dead: 1, OldestPendingAge: 5 * time.Second}, nil
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(outbox.NewCollector(stats))

		want := map[string]float64{
			"newsfeed_outbox_pending":                    5,
			"newsfeed_outbox_in_flight":                  2,
			"newsfeed_outbox_dead":                       1,
			"newsfeed_outbox_oldest_pending_age_seconds": 5,
		}
		require.Equal(t, want, gauges(t, reg))
		require.Equal(t, want, gauges(t, reg))
		require.EqualValues(t, 1, calls.Load(), "two scrapes in a row read the table twice")

		down.Store(true)
		time.Sleep(1100 * time.Millisecond) // past the one-second cache
		require.Equal(t, want, gauges(t, reg), "PostgreSQL down: the last values are repeated")
		require.EqualValues(t, 2, calls.Load())
	})
}
