package fanout_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/outbox"
	"github.com/newsfeed/newsfeed/queue"
)

// partitionedBundle is setup with a queue of n partitions: the bundle's
// queue, dispatcher and new workers use it.
func partitionedBundle(t *testing.T, n int) *testBundle {
	t.Helper()
	_, b := setup(t, fanout.Config{}, feed.Config{})
	q, err := queue.NewPartitioned(b.rdb, queue.Config{Stream: b.prefix + "tickets", Group: "fanout", Partitions: n})
	require.NoError(t, err)
	require.NoError(t, q.EnsureGroup(t.Context()))
	b.queue = q
	b.disp = newDispatcher(t, b.db, q, outbox.Config{RedeliverAfter: time.Hour})
	return b
}

// requirePartitionsEmpty checks that every partition's tickets were acknowledged and deleted.
func (b *testBundle) requirePartitionsEmpty(t *testing.T) {
	t.Helper()
	require.Zero(t, b.pending(t), "tickets delivered and not acknowledged")
	for p := range b.queue.Partitions() {
		require.Zero(t, b.xlen(t, b.queue.Key(p)), "tickets left in partition %d", p)
	}
}

// ticketPartitions returns how many of the outbox rows' last tickets each partition had.
func (b *testBundle) ticketPartitions(t *testing.T) map[int]int {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT ticket FROM outbox WHERE ticket IS NOT NULL`)
	require.NoError(t, err)
	defer rows.Close()
	parts := map[int]int{}
	for rows.Next() {
		var ticket string
		require.NoError(t, rows.Scan(&ticket))
		p, _, err := queue.ParseTicket(ticket)
		require.NoError(t, err)
		parts[p]++
	}
	require.NoError(t, rows.Err())
	return parts
}

// TestPartitionedQueue: workers read every partition of the queue, take over
// a dead worker's tickets in any of them, and dead-letter each ticket in its
// own partition.
func TestPartitionedQueue(t *testing.T) {
	t.Parallel()

	t.Run("TwoWorkersDeliverEveryPostOnce", func(t *testing.T) {
		t.Parallel()
		b := partitionedBundle(t, 8)
		authors := []int64{1, 2, 3, 4}
		followers := map[int64][]int64{}
		for _, a := range authors {
			followers[a] = userRange(1000*a, 1000*a+29)
			b.follow(t, a, followers[a])
			b.buildFeeds(t, followers[a])
		}
		posts := map[int64][]int64{}
		for i := range 60 {
			a := authors[i%len(authors)]
			posts[a] = append(posts[a], b.post(t, a))
		}
		b.dispatch(t) // every ticket waits before a worker starts
		run(t, b.newWorker(t, b.feeds, fanout.Config{Concurrency: 4}))
		run(t, b.newWorker(t, b.feeds, fanout.Config{Concurrency: 4}))
		b.deliver(t)

		for _, a := range authors {
			for _, u := range followers[a] {
				require.Equal(t, posts[a], b.feedPosts(t, u), "follower %d of %d", u, a)
			}
		}
		require.EqualValues(t, 60, b.tickets(t, domain.PostCreated, "done"))
		require.EqualValues(t, 60*30, b.metric(t, "newsfeed_fanout_entries_total"))
		parts := b.ticketPartitions(t)
		require.Len(t, parts, 8, "tickets in every partition: %v", parts)
		b.requirePartitionsEmpty(t)
	})

	t.Run("ADeadWorkersTicketsAreTakenOverInEveryPartition", func(t *testing.T) {
		t.Parallel()
		b := partitionedBundle(t, 8)
		const author = int64(1)
		followers := userRange(2, 11)
		b.follow(t, author, followers)
		b.buildFeeds(t, followers)
		var posts []int64
		for range 24 {
			posts = append(posts, b.post(t, author))
		}
		b.dispatch(t)
		taken, err := b.queue.Read(t.Context(), "dead-worker", 100, 10*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, taken, 24, "a worker takes every ticket and dies")
		parts := map[int]bool{}
		for _, tk := range taken {
			p, _, err := queue.ParseTicket(tk.MessageID)
			require.NoError(t, err)
			parts[p] = true
		}
		require.Greater(t, len(parts), 4, "the dead worker held tickets of several partitions: %v", parts)

		// The dead worker's tickets look stale; the new worker's own never
		// do: each ticket is taken over once, however slow the machine.
		require.Equal(t, 24, b.ageTickets(t))
		run(t, b.newWorker(t, b.feeds, fanout.Config{ClaimIdle: takeoverIdle}))
		b.deliver(t)
		for _, u := range followers {
			require.Equal(t, posts, b.feedPosts(t, u), "follower %d", u)
		}
		require.EqualValues(t, 24, b.tickets(t, domain.PostCreated, "done"))
		b.requirePartitionsEmpty(t)
	})

	t.Run("PoisonIsDeadLetteredInItsPartition", func(t *testing.T) {
		t.Parallel()
		b := partitionedBundle(t, 8)
		// Events of an unknown type, in several partitions.
		var poison []domain.Event
		for range 6 {
			var id int64
			require.NoError(t, b.pool.QueryRow(t.Context(),
				`INSERT INTO outbox (event_type, payload) VALUES ('post.liked', '{"post_id": 1}') RETURNING id`).Scan(&id))
			poison = append(poison, domain.Event{ID: id, Type: "post.liked", Payload: []byte(`{"post_id": 1}`), Attempt: 1, CreatedAt: time.Now()})
		}
		parts := map[int]bool{}
		for _, e := range poison {
			parts[b.queue.Partition(e.ID)] = true
		}
		require.Greater(t, len(parts), 2)
		b.publish(t, poison...)
		run(t, b.newWorker(t, b.feeds, fanout.Config{}))
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 6, b.metric(t, "newsfeed_fanout_tickets_total", "outcome", "dead"))
			require.Zero(c, b.pending(c))
		})
		for _, e := range poison {
			p := b.queue.Partition(e.ID)
			msgs, err := b.rdb.XRange(t.Context(), b.queue.DeadKey(p), "-", "+").Result()
			require.NoError(t, err)
			found := false
			for _, m := range msgs {
				found = found || m.Values["id"] == strconv.FormatInt(e.ID, 10)
			}
			require.True(t, found, "event %d dead-lettered in partition %d's stream %s", e.ID, p, b.queue.DeadKey(p))
		}
		for _, e := range poison {
			require.Equal(t, "dead", b.row(t, e.ID).Status)
		}
		b.requirePartitionsEmpty(t)
	})
}
