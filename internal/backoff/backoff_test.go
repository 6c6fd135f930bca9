package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/backoff"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	const samples = 500

	t.Run("StaysWithinJitterOfBaseTimesAttemptToTheFourth", func(t *testing.T) {
		t.Parallel()
		b := backoff.Schedule{Base: time.Second, Max: time.Hour}
		for attempt := 1; attempt <= 12; attempt++ {
			a := float64(attempt)
			want := min(float64(time.Second)*a*a*a*a, float64(time.Hour))
			for range samples {
				got := float64(b.Delay(attempt))
				require.GreaterOrEqual(t, got, 0.75*want, "attempt %d", attempt)
				require.LessOrEqual(t, got, 1.25*want, "attempt %d", attempt)
			}
		}
	})

	t.Run("GrowsWithAttempt", func(t *testing.T) {
		t.Parallel()
		// Up to attempt 7 the jitter bands do not overlap: every delay of
		// attempt a+1 is longer than every delay of attempt a.
		b := backoff.Schedule{Base: time.Millisecond, Max: 1000 * time.Hour}
		prevMax := time.Duration(0)
		for attempt := 1; attempt <= 7; attempt++ {
			lo, hi := time.Duration(1<<62), time.Duration(0)
			for range samples {
				d := b.Delay(attempt)
				lo, hi = min(lo, d), max(hi, d)
			}
			require.Greater(t, lo, prevMax, "attempt %d", attempt)
			prevMax = hi
		}
		// Beyond, the bands overlap, but the average still grows until Max.
		prevMean := 0.0
		for attempt := 7; attempt <= 30; attempt++ {
			sum := 0.0
			for range samples {
				sum += float64(b.Delay(attempt))
			}
			mean := sum / samples
			require.Greater(t, mean, prevMean, "attempt %d", attempt)
			prevMean = mean
		}
	})

	t.Run("NeverExceedsMaxPlusJitter", func(t *testing.T) {
		t.Parallel()
		b := backoff.Schedule{Base: time.Second, Max: 10 * time.Minute}
		attempts := []int{1, 2, 5, 10, 100, 1000, 1 << 20, 1 << 30, int(^uint(0) >> 1)}
		for _, attempt := range attempts {
			for range samples {
				d := b.Delay(attempt)
				require.Positive(t, d, "attempt %d", attempt)
				require.LessOrEqual(t, d, b.Max+b.Max/4, "attempt %d", attempt)
			}
		}
	})

	t.Run("AttemptBelowOneCountsAsOne", func(t *testing.T) {
		t.Parallel()
		b := backoff.Schedule{Base: time.Second, Max: time.Hour}
		for _, attempt := range []int{0, -1, -100} {
			for range samples {
				d := b.Delay(attempt)
				require.GreaterOrEqual(t, d, 750*time.Millisecond, "attempt %d", attempt)
				require.LessOrEqual(t, d, 1250*time.Millisecond, "attempt %d", attempt)
			}
		}
	})

	t.Run("DefaultIsOneSecondSixteenEightyOne", func(t *testing.T) {
		t.Parallel()
		for attempt, want := range map[int]time.Duration{1: time.Second, 2: 16 * time.Second, 3: 81 * time.Second, 100: time.Hour} {
			d := backoff.DefaultSchedule.Delay(attempt)
			require.GreaterOrEqual(t, d, want*3/4, "attempt %d", attempt)
			require.LessOrEqual(t, d, want*5/4, "attempt %d", attempt)
		}
	})
}

func TestDoublingResets(t *testing.T) {
	d := backoff.Doubling{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		got = append(got, d.Next())
	}
	require.Equal(t, []time.Duration{10e6, 20e6, 40e6, 50e6, 50e6}, got)
	d.Reset()
	require.Equal(t, 10*time.Millisecond, d.Next())

	var zero backoff.Doubling
	require.Equal(t, 100*time.Millisecond, zero.Next())
	for range 10 {
		zero.Next()
	}
	require.Equal(t, 5*time.Second, zero.Next())
}

func TestSleepEndsWithItsContext(t *testing.T) {
	require.True(t, backoff.Sleep(t.Context(), time.Millisecond))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.False(t, backoff.Sleep(ctx, time.Hour))
}

func TestRetry(t *testing.T) {
	t.Parallel()
	down := errors.New("not up yet")

	t.Run("TriesAgainUntilTheAttemptSucceeds", func(t *testing.T) {
		t.Parallel()
		calls := 0
		err := backoff.Retry(t.Context(), time.Minute, func(context.Context) error {
			calls++
			if calls < 3 {
				return down
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, calls)
	})

	t.Run("WithoutAWaitTriesOnceAndReturnsTheError", func(t *testing.T) {
		t.Parallel()
		calls := 0
		err := backoff.Retry(t.Context(), 0, func(context.Context) error { calls++; return down })
		require.ErrorIs(t, err, down)
		require.Equal(t, 1, calls)
	})

	t.Run("GivesUpBeforeAWaitThatWouldEndPastTheDeadline", func(t *testing.T) {
		t.Parallel()
		// The waits are 100ms, 200ms, …: after the first failure 100ms fits
		// in 250ms, after the second 200ms more does not.
		calls := 0
		start := time.Now()
		err := backoff.Retry(t.Context(), 250*time.Millisecond, func(context.Context) error { calls++; return down })
		require.ErrorIs(t, err, down)
		require.Equal(t, 2, calls)
		// Sleeping the 200ms would have taken it to 300ms at least.
		require.Less(t, time.Since(start), 300*time.Millisecond, "it did not sleep past its deadline")
	})

	t.Run("APermanentErrorEndsItAtOnceUnmarked", func(t *testing.T) {
		t.Parallel()
		calls := 0
		err := backoff.Retry(t.Context(), time.Hour, func(context.Context) error { calls++; return backoff.Permanent(down) })
		require.Equal(t, down, err)
		require.Equal(t, 1, calls)
		require.NoError(t, backoff.Permanent(nil))
	})

	t.Run("StopsWhenTheContextEnds", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		calls := 0
		err := backoff.Retry(ctx, time.Hour, func(ctx context.Context) error {
			calls++
			cancel() // the caller gives up during the first attempt
			return ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, calls)
	})

	t.Run("GivesTheAttemptItsContext", func(t *testing.T) {
		t.Parallel()
		type key struct{}
		ctx := context.WithValue(t.Context(), key{}, "mine")
		require.NoError(t, backoff.Retry(ctx, 0, func(ctx context.Context) error {
			require.Equal(t, "mine", ctx.Value(key{}))
			return nil
		}))
	})
}
