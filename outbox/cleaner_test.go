package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/store"
)

// cleanerStore is the real store with a log of the DeleteFinished calls the
// cleaner makes, and DeleteFinished replaceable.
type cleanerStore struct {
	*store.DB
	mu    sync.Mutex
	calls []string // "delete n", one per call
	// deleteFinished, when set, runs instead of the real DeleteFinished.
	deleteFinished func(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

func (s *cleanerStore) DeleteFinished(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	var err error
	if s.deleteFinished != nil {
		n, err = s.deleteFinished(ctx, olderThan, limit)
	} else {
		n, err = s.DB.DeleteFinished(ctx, olderThan, limit)
	}
	s.mu.Lock()
	s.calls = append(s.calls, fmt.Sprintf("delete %d", n))
	s.mu.Unlock()
	return n, err
}

func (s *cleanerStore) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func newCleaner(t *testing.T, st outbox.CleanerStore, cfg outbox.CleanerConfig) *outbox.Cleaner {
	t.Helper()
	c, err := outbox.NewCleaner(st, cfg)
	require.NoError(t, err)
	return c
}

// runCleaner runs c until the returned stop is called or the test ends;
// stop waits for Run to return and requires that it returns nil, promptly.
func runCleaner(t *testing.T, c *outbox.Cleaner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("Cleaner.Run did not return within 10s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// insertFinished writes n done rows finished two hours ago, and rows the
// cleaner of a one-hour retention must keep: done within the retention, and
// dead. It returns how many it wrote of the second kind, by status.
func (b *testBundle) insertFinished(t *testing.T, n int) map[string]int {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `
INSERT INTO outbox (event_type, payload, status, created_at, finished_at)
SELECT 'post.created', '{}', 'done', now() - interval '3 hours', now() - interval '2 hours'
FROM generate_series(1, $1)`, n)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `
INSERT INTO outbox (event_type, payload, status, created_at, finished_at) VALUES
    ('post.created', '{}', 'done', now() - interval '3 hours', now() - interval '10 minutes'),
    ('post.created', '{}', 'done', now() - interval '3 hours', now() - interval '50 minutes'),
    ('post.created', '{}', 'dead', now() - interval '3 hours', now() - interval '2 hours')`)
	require.NoError(t, err)
	return map[string]int{"done": 2, "dead": 1}
}

func TestCleaner(t *testing.T) {
	t.Parallel()

	t.Run("DeletesEveryRowFinishedBeforeRetentionInBatchesOfOnePass", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		const old = 2345 // more than two batches of 1000
		kept := b.insertFinished(t, old)
		pending := b.insertEvents(t, 2)
		kept["published"] = len(pending)

		// Beside a dispatcher, as in the dispatch role, sharing its metrics.
		metrics := outbox.NewMetrics(b.reg)
		runDispatcher(t, b.dispatcher(t, b.queue, outbox.Config{
			PollInterval: 10 * time.Millisecond, RedeliverAfter: time.Hour, Metrics: metrics,
		}))
		st := &cleanerStore{DB: b.db}
		stop := runCleaner(t, newCleaner(t, st, outbox.CleanerConfig{
			Retention: time.Hour,
			Interval:  20 * time.Millisecond,
			Metrics:   metrics,
		}))
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, old, counter(t, b.reg, "newsfeed_outbox_cleaned_total"))
			require.Equal(c, kept, b.statusCounts(c), "only rows finished before the retention are deleted")
		})
		stop()

		// One pass deleted them all, batch after batch; the pass ended with
		// the batch under the limit, and later passes found nothing.
		calls := st.log()
		require.GreaterOrEqual(t, len(calls), 3, "calls: %v", calls)
		require.Equal(t, []string{"delete 1000", "delete 1000", "delete 345"}, calls[:3], "calls: %v", calls)
		for _, c := range calls[3:] {
			require.Equal(t, "delete 0", c, "calls: %v", calls)
		}
		require.EqualValues(t, old, counter(t, b.reg, "newsfeed_outbox_cleaned_total"))
	})

	t.Run("CleanOnceIsOnePass", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		kept := b.insertFinished(t, 25)
		st := &cleanerStore{DB: b.db}
		c := newCleaner(t, st, outbox.CleanerConfig{Retention: time.Hour, BatchSize: 10})
		n, err := c.CleanOnce(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, 25, n)
		require.Equal(t, []string{"delete 10", "delete 10", "delete 5"}, st.log())
		require.Equal(t, kept, b.statusCounts(t))
	})

	t.Run("TheFirstPassWaitsOneInterval", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		b.insertFinished(t, 3)
		st := &cleanerStore{DB: b.db}
		stop := runCleaner(t, newCleaner(t, st, outbox.CleanerConfig{Retention: time.Hour, Interval: time.Hour}))
		time.Sleep(200 * time.Millisecond)
		stop()
		require.Empty(t, st.log())
	})

	t.Run("AFailedCleanupIsLoggedAndTheNextPassTriesAgain", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		var mu sync.Mutex
		var asked []time.Duration
		st := &cleanerStore{DB: b.db, deleteFinished: func(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
			mu.Lock()
			asked = append(asked, olderThan)
			mu.Unlock()
			return 0, fmt.Errorf("delete finished outbox rows: %w", errStoreDown)
		}}
		core, logs := observer.New(zap.WarnLevel)
		metrics := outbox.NewMetrics(b.reg)
		runDispatcher(t, b.dispatcher(t, b.queue, outbox.Config{
			PollInterval: 10 * time.Millisecond, RedeliverAfter: time.Hour, Metrics: metrics,
		}))
		stop := runCleaner(t, newCleaner(t, st, outbox.CleanerConfig{
			Retention: 90 * time.Minute,
			Interval:  20 * time.Millisecond,
			Metrics:   metrics,
			Logger:    zap.New(core),
		}))

		eventually(t, func(c *assert.CollectT) {
			require.GreaterOrEqual(c, logs.FilterMessage("outbox cleanup failed").Len(), 2)
		}, "a failed pass does not stop the cleaner")
		// The dispatcher, beside it, still publishes.
		ids := b.insertEvents(t, 3)
		eventually(t, func(c *assert.CollectT) {
			for _, id := range ids {
				require.Equal(c, "published", b.row(c, id).Status)
			}
		})
		stop()

		failed := logs.FilterMessage("outbox cleanup failed").All()
		var logged error
		for _, f := range failed[0].Context {
			if err, ok := f.Interface.(error); ok && f.Key == "error" {
				logged = err
			}
		}
		require.ErrorIs(t, logged, errStoreDown, "the warning carries the cause")
		mu.Lock()
		// One attempt per pass (and perhaps one more that the stop cut short).
		require.Contains(t, []int{len(failed), len(failed) + 1}, len(asked), "one attempt per pass")
		for _, d := range asked {
			require.Equal(t, 90*time.Minute, d, "the configured retention")
		}
		mu.Unlock()
		require.Zero(t, counter(t, b.reg, "newsfeed_outbox_cleaned_total"))
	})

	t.Run("ACleanupCutShortByShutdownIsNotAFailure", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		entered := make(chan struct{})
		st := &cleanerStore{DB: b.db, deleteFinished: func(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
			close(entered)
			<-ctx.Done() // a long DELETE, interrupted by the shutdown
			return 0, fmt.Errorf("delete finished outbox rows: %w", ctx.Err())
		}}
		core, logs := observer.New(zap.DebugLevel)
		stop := runCleaner(t, newCleaner(t, st, outbox.CleanerConfig{
			Interval: 20 * time.Millisecond,
			Timeout:  time.Hour,
			Logger:   zap.New(core),
		}))
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the cleaner never ran")
		}
		stop() // Run returns, without an error
		require.Zero(t, logs.FilterMessage("outbox cleanup failed").Len(), "logs: %v", logs.All())
		require.Equal(t, []string{"delete 0"}, st.log(), "no second batch after the context ended")
	})

	t.Run("EachPassIsBoundedByTimeout", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		const old = 30
		kept := b.insertFinished(t, old)
		const timeout = 200 * time.Millisecond
		var mu sync.Mutex
		hung := 0
		var hungFor time.Duration
		st := &cleanerStore{DB: b.db}
		st.deleteFinished = func(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
			mu.Lock()
			first := hung == 0
			hung++
			mu.Unlock()
			if first { // a DELETE that hangs (a lock it waits for, say)
				start := time.Now()
				<-ctx.Done()
				mu.Lock()
				hungFor = time.Since(start)
				mu.Unlock()
				return 0, fmt.Errorf("delete finished outbox rows: %w", ctx.Err())
			}
			return b.db.DeleteFinished(ctx, olderThan, limit)
		}
		core, logs := observer.New(zap.WarnLevel)
		stop := runCleaner(t, newCleaner(t, st, outbox.CleanerConfig{
			Retention: time.Hour,
			Interval:  20 * time.Millisecond,
			Timeout:   timeout,
			Metrics:   outbox.NewMetrics(b.reg),
			Logger:    zap.New(core),
		}))
		// The next pass deletes what the hung one could not.
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, old, counter(t, b.reg, "newsfeed_outbox_cleaned_total"))
		})
		stop()
		require.Equal(t, kept, b.statusCounts(t))

		mu.Lock()
		require.GreaterOrEqual(t, hungFor, timeout)
		require.Less(t, hungFor, 5*time.Second, "the hung pass ended at its timeout")
		mu.Unlock()
		failed := logs.FilterMessage("outbox cleanup failed").All()
		require.Len(t, failed, 1, "the pass cut by its timeout is a failure, logged")
		var logged error
		for _, f := range failed[0].Context {
			if err, ok := f.Interface.(error); ok && f.Key == "error" {
				logged = err
			}
		}
		require.ErrorIs(t, logged, context.DeadlineExceeded)
	})

	t.Run("CleanOnceReturnsAtItsTimeout", func(t *testing.T) {
		t.Parallel()
		st := &cleanerStore{deleteFinished: func(ctx context.Context, _ time.Duration, _ int) (int64, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}}
		c := newCleaner(t, st, outbox.CleanerConfig{Timeout: 100 * time.Millisecond})
		start := time.Now()
		_, err := c.CleanOnce(t.Context())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 5*time.Second)
	})
}
