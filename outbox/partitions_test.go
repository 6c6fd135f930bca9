package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/queue"
)

// tickets returns the outbox rows' tickets by row id.
func (b *testBundle) tickets(t *testing.T) map[int64]string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT id, ticket FROM outbox WHERE ticket IS NOT NULL`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var ticket string
		require.NoError(t, rows.Scan(&id, &ticket))
		out[id] = ticket
	}
	require.NoError(t, rows.Err())
	return out
}

// TestStillQueuedPerPartition: the dispatcher's check that a due row's ticket
// still waits looks in the ticket's own partition, so a row is published
// again exactly when its ticket is gone, whatever the partition count is now.
func TestStillQueuedPerPartition(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	partitioned := func(n int) *queue.Queue {
		q, err := queue.NewPartitioned(b.rdb, queue.Config{Stream: b.prefix + "tickets", Group: "fanout", Partitions: n})
		require.NoError(t, err)
		require.NoError(t, q.EnsureGroup(t.Context()))
		return q
	}
	q8 := partitioned(8)
	d := b.dispatcher(t, q8, outbox.Config{RedeliverAfter: time.Hour})
	ids := b.insertEvents(t, 40)
	n, err := d.DispatchOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 40, n)
	first := b.tickets(t)
	require.Len(t, first, 40)
	byPartition := map[int][]int64{}
	for id, tk := range first {
		p, _, err := queue.ParseTicket(tk)
		require.NoError(t, err)
		byPartition[p] = append(byPartition[p], id)
	}
	require.Len(t, byPartition, 8, "the rows' tickets are in every partition")

	// Workers took and finished partition 3's tickets but died before the
	// outbox heard; the others wait.
	tickets, err := q8.Read(t.Context(), "w", 100, 0)
	require.NoError(t, err)
	require.Len(t, tickets, 40)
	for _, tk := range tickets {
		if p, _, _ := queue.ParseTicket(tk.MessageID); p == 3 {
			require.NoError(t, q8.Ack(t.Context(), tk.MessageID))
		}
	}

	// Due again, with the count now 4: only partition 3's rows are published again.
	d4 := b.dispatcher(t, partitioned(4), outbox.Config{RedeliverAfter: time.Hour, Metrics: outbox.NewMetrics(nil)})
	b.requireDueAtDeadline(t, d4, ids...)
	again := b.tickets(t)
	for _, id := range ids {
		r := b.row(t, id)
		require.Equal(t, "published", r.Status, "row %d", id)
		require.Equal(t, 2, r.Attempts, "row %d", id)
	}
	republished := map[int64]bool{}
	for id, tk := range again {
		if tk != first[id] {
			republished[id] = true
			p, _, err := queue.ParseTicket(tk)
			require.NoError(t, err)
			require.Less(t, p, 4, "row %d published again into the new count", id)
		}
	}
	require.Len(t, republished, len(byPartition[3]))
	for _, id := range byPartition[3] {
		require.True(t, republished[id], "row %d, whose ticket was gone, was published again", id)
	}
}
