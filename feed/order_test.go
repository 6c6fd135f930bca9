package feed

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Pushes held back go oldest post first, whatever order they came in, and
// no more than the slots run at once.
func TestPushOrderOldestFirst(t *testing.T) {
	t.Parallel()
	o := newPushOrder(1)
	ctx := context.Background()
	require.NoError(t, o.acquire(ctx, 100)) // holds the only slot
	var (
		mu  sync.Mutex
		ran []int64
		wg  sync.WaitGroup
	)
	for _, id := range []int64{7, 3, 9, 5} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, o.acquire(ctx, id))
			mu.Lock()
			ran = append(ran, id)
			mu.Unlock()
			o.release()
		}()
	}
	require.Eventually(t, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.waiting) == 4
	}, 5*time.Second, time.Millisecond)
	o.release()
	wg.Wait()
	require.Equal(t, []int64{3, 5, 7, 9}, ran)
	require.Equal(t, 1, o.free, "the slot is free again")
}

// A push that gives up while it waits does not keep a slot.
func TestPushOrderCancelledWaiter(t *testing.T) {
	t.Parallel()
	o := newPushOrder(1)
	require.NoError(t, o.acquire(context.Background(), 1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- o.acquire(ctx, 2) }()
	require.Eventually(t, func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.waiting) == 1
	}, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	o.release()
	require.Equal(t, 1, o.free)
	require.NoError(t, o.acquire(context.Background(), 3), "the slot went back, not to the one that left")
}
