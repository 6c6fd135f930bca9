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

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/store"
)

// The cleaner lives in Dispatcher.Run on a ticker of one minute that the
// Config does not expose, so TestCleaner starts the dispatcher of every case
// at once, then waits (a little over a minute, once) for the state the
// cleaner leaves in each.
const cleanerWait = 3 * time.Minute

// cleanerStore is the real store with a log of the calls the dispatcher
// makes, and DeleteFinished replaceable.
type cleanerStore struct {
	*store.DB
	mu    sync.Mutex
	calls []string // "claim" (consecutive claims logged once) or "delete n"
	// deleteFinished, when set, runs instead of the real DeleteFinished.
	deleteFinished func(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

func (s *cleanerStore) Claim(ctx context.Context, limit int, lease time.Duration) ([]domain.Event, error) {
	s.mu.Lock()
	if len(s.calls) == 0 || s.calls[len(s.calls)-1] != "claim" {
		s.calls = append(s.calls, "claim")
	}
	s.mu.Unlock()
	return s.DB.Claim(ctx, limit, lease)
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

// runCleanerDispatcher runs d until the returned stop is called or the test
// ends; stop waits for Run to return.
func runCleanerDispatcher(t *testing.T, d *outbox.Dispatcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestCleaner(t *testing.T) {
	t.Parallel()
	// Every case starts its dispatcher now; the subtests wait in turn.
	cases := []struct {
		name  string
		start func(t *testing.T) (check func(t *testing.T))
	}{
		{"DeletesEveryRowFinishedBeforeRetentionInBatchesOfOnePass", startCleanerBatches},
		{"AFailedCleanupIsLoggedAndDispatchingGoesOn", startCleanerFailure},
		{"ACleanupCutShortByShutdownIsNotAFailure", startCleanerShutdown},
	}
	checks := make([]func(t *testing.T), len(cases))
	for i, c := range cases {
		checks[i] = c.start(t)
	}
	for i, c := range cases {
		t.Run(c.name, checks[i])
	}
}

func startCleanerBatches(t *testing.T) func(t *testing.T) {
	b := newBundle(t)
	const old = 2345 // more than two batches of 1000
	_, err := b.pool.Exec(t.Context(), `
INSERT INTO outbox (event_type, payload, status, created_at, finished_at)
SELECT 'post.created', '{}', 'done', now() - interval '3 hours', now() - interval '2 hours'
FROM generate_series(1, $1)`, old)
	require.NoError(t, err)
	// Kept: finished within the retention, and rows not finished at all.
	_, err = b.pool.Exec(t.Context(), `
INSERT INTO outbox (event_type, payload, status, created_at, finished_at) VALUES
    ('post.created', '{}', 'done', now() - interval '3 hours', now() - interval '10 minutes'),
    ('post.created', '{}', 'done', now() - interval '3 hours', now() - interval '50 minutes'),
    ('post.created', '{}', 'dead', now() - interval '3 hours', now() - interval '2 hours')`)
	require.NoError(t, err)
	pending := b.insertEvents(t, 2)

	st := &cleanerStore{DB: b.db}
	d := outbox.NewDispatcher(st, b.queue, outbox.Config{
		PollInterval:   10 * time.Millisecond,
		RedeliverAfter: time.Hour,
		Retention:      time.Hour,
		Metrics:        outbox.NewMetrics(b.reg),
	})
	stop := runCleanerDispatcher(t, d)

	return func(t *testing.T) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.EqualValues(c, old, counter(t, b.reg, "newsfeed_outbox_cleaned_total"))
		}, cleanerWait, 100*time.Millisecond)
		stop()

		require.Equal(t, map[string]int{"done": 2, "dead": 1, "published": len(pending)}, b.statusCounts(t),
			"only rows finished before the retention are deleted")
		// One pass deleted them all, batch after batch, with no dispatch
		// round in between; the pass ended with the batch under the limit.
		calls := st.log()
		require.Equal(t, "claim", calls[0], "the dispatcher polls before the first cleanup")
		first := -1
		for i, c := range calls {
			if c != "claim" {
				first = i
				break
			}
		}
		require.NotEqual(t, -1, first, "calls: %v", calls)
		require.Equal(t, []string{"delete 1000", "delete 1000", "delete 345"}, calls[first:min(first+3, len(calls))],
			"calls: %v", calls)
		require.EqualValues(t, old, counter(t, b.reg, "newsfeed_outbox_cleaned_total"))
	}
}

func startCleanerFailure(t *testing.T) func(t *testing.T) {
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
	d := outbox.NewDispatcher(st, b.queue, outbox.Config{
		PollInterval:   10 * time.Millisecond,
		RedeliverAfter: time.Hour,
		Retention:      90 * time.Minute,
		Metrics:        outbox.NewMetrics(b.reg),
		Logger:         zap.New(core),
	})
	runCleanerDispatcher(t, d)

	return func(t *testing.T) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.Equal(c, 1, logs.FilterMessage("outbox cleanup failed").Len())
		}, cleanerWait, 100*time.Millisecond)
		var logged error
		for _, f := range logs.FilterMessage("outbox cleanup failed").All()[0].Context {
			if err, ok := f.Interface.(error); ok && f.Key == "error" {
				logged = err
			}
		}
		require.ErrorIs(t, logged, errStoreDown, "the warning carries the cause")
		mu.Lock()
		require.Equal(t, []time.Duration{90 * time.Minute}, asked, "one attempt per pass, with the configured retention")
		mu.Unlock()
		require.Zero(t, counter(t, b.reg, "newsfeed_outbox_cleaned_total"))

		// The dispatcher still publishes what is written afterwards.
		ids := b.insertEvents(t, 3)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, id := range ids {
				require.Equal(c, "published", b.row(c, id).Status)
			}
		}, 10*time.Second, 10*time.Millisecond)
	}
}

func startCleanerShutdown(t *testing.T) func(t *testing.T) {
	b := newBundle(t)
	entered := make(chan struct{})
	st := &cleanerStore{DB: b.db, deleteFinished: func(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
		close(entered)
		<-ctx.Done() // a long DELETE, interrupted by the shutdown
		return 0, fmt.Errorf("delete finished outbox rows: %w", ctx.Err())
	}}
	core, logs := observer.New(zap.DebugLevel)
	d := outbox.NewDispatcher(st, b.queue, outbox.Config{
		PollInterval: 10 * time.Millisecond,
		Metrics:      outbox.NewMetrics(b.reg),
		Logger:       zap.New(core),
	})
	stop := runCleanerDispatcher(t, d)

	return func(t *testing.T) {
		select {
		case <-entered:
		case <-time.After(cleanerWait):
			t.Fatal("the cleaner never ran")
		}
		stop() // Run returns, without an error
		require.Zero(t, logs.FilterMessage("outbox cleanup failed").Len(), "logs: %v", logs.All())
		deletes := 0
		for _, c := range st.log() {
			if c != "claim" {
				deletes++
			}
		}
		require.Equal(t, 1, deletes, "no second batch after the context ended: %v", st.log())
	}
}
