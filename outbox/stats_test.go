package outbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
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
		start := time.Now()
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
		// Its 90 s plus at most the time the test took since the insert (and
		// a second of slack between the clocks): no bound on the test's speed.
		age := g["newsfeed_outbox_oldest_pending_age_seconds"]
		require.GreaterOrEqual(t, age, 90.0)
		require.Less(t, age, 91+time.Since(start).Seconds())
	})

	t.Run("ReadsAtMostOncePerTTLAndRepeatsTheLastValuesOnError", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		var down atomic.Bool
		var pending atomic.Int64
		pending.Store(3)
		stats := func(context.Context) (domain.OutboxStats, error) {
			calls.Add(1)
			if down.Load() {
				return domain.OutboxStats{}, errStoreDown
			}
			return domain.OutboxStats{Pending: pending.Load(), InFlight: 2, Dead: 1, OldestPendingAge: 5 * time.Second}, nil
		}
		clock := newFakeClock()
		reg := prometheus.NewRegistry()
		reg.MustRegister(outbox.NewCollector(stats, outbox.WithStatsTTL(10*time.Second), outbox.WithClock(clock.Now)))

		want := map[string]float64{
			"newsfeed_outbox_pending":                    5,
			"newsfeed_outbox_in_flight":                  2,
			"newsfeed_outbox_dead":                       1,
			"newsfeed_outbox_oldest_pending_age_seconds": 5,
		}
		require.Equal(t, want, gauges(t, reg))
		require.EqualValues(t, 1, calls.Load(), "the first scrape reads the table")

		// Within the TTL a scrape repeats what it read, even if the table changed.
		pending.Store(30)
		require.Equal(t, want, gauges(t, reg))
		clock.Advance(10*time.Second - time.Nanosecond)
		require.Equal(t, want, gauges(t, reg))
		require.EqualValues(t, 1, calls.Load(), "scrapes within the TTL read the table once")

		// Past the TTL it reads again.
		clock.Advance(time.Nanosecond)
		want["newsfeed_outbox_pending"] = 32
		require.Equal(t, want, gauges(t, reg))
		require.EqualValues(t, 2, calls.Load())

		// PostgreSQL down: the last values are repeated, and every scrape
		// past the TTL tries again rather than waiting another TTL.
		down.Store(true)
		clock.Advance(10 * time.Second)
		require.Equal(t, want, gauges(t, reg), "PostgreSQL down: the last values are repeated")
		require.EqualValues(t, 3, calls.Load())
		require.Equal(t, want, gauges(t, reg))
		require.EqualValues(t, 4, calls.Load(), "a failed read is not cached")

		// Back up: the next scrape reads fresh values.
		down.Store(false)
		pending.Store(7)
		want["newsfeed_outbox_pending"] = 9
		require.Equal(t, want, gauges(t, reg))
		require.EqualValues(t, 5, calls.Load())
	})

	t.Run("ExportsNothingUntilAReadSucceeds", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		var down atomic.Bool
		down.Store(true)
		stats := func(context.Context) (domain.OutboxStats, error) {
			calls.Add(1)
			if down.Load() {
				return domain.OutboxStats{}, errStoreDown
			}
			return domain.OutboxStats{Pending: 1}, nil
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(outbox.NewCollector(stats, outbox.WithClock(newFakeClock().Now)))
		// Zeros would read as an empty outbox while PostgreSQL is down.
		require.Empty(t, gauges(t, reg))
		require.Empty(t, gauges(t, reg))
		require.EqualValues(t, 2, calls.Load(), "with nothing read yet, every scrape tries")

		down.Store(false)
		require.Equal(t, map[string]float64{
			"newsfeed_outbox_pending":                    1,
			"newsfeed_outbox_in_flight":                  0,
			"newsfeed_outbox_dead":                       0,
			"newsfeed_outbox_oldest_pending_age_seconds": 0,
		}, gauges(t, reg))
	})

	t.Run("DefaultTTLIsOneSecond", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		stats := func(context.Context) (domain.OutboxStats, error) {
			calls.Add(1)
			return domain.OutboxStats{Pending: calls.Load()}, nil
		}
		clock := newFakeClock()
		reg := prometheus.NewRegistry()
		// A TTL that is not positive keeps the default.
		reg.MustRegister(outbox.NewCollector(stats, outbox.WithStatsTTL(0), outbox.WithClock(clock.Now)))
		require.EqualValues(t, 1, gauges(t, reg)["newsfeed_outbox_pending"])
		clock.Advance(outbox.DefaultStatsTTL - time.Nanosecond)
		require.EqualValues(t, 1, gauges(t, reg)["newsfeed_outbox_pending"])
		clock.Advance(time.Nanosecond)
		require.EqualValues(t, 2, gauges(t, reg)["newsfeed_outbox_pending"])
		require.Equal(t, time.Second, outbox.DefaultStatsTTL)
	})
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
