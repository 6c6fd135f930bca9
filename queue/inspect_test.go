package queue_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/queue"
)

// TestInspect: every partition shows its stream's length, its pending list
// by consumer with the oldest pending ticket, and its dead letters; a
// stream whose group is missing says so, and a stream that does not exist
// yet reads as empty.
func TestInspect(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb, prefix := b.open(t)
		q := partitioned(t, rdb, prefix, 3)
		byPart := func() map[int]domain.QueuePartition {
			t.Helper()
			parts, err := q.Inspect(t.Context())
			require.NoError(t, err)
			m := map[int]domain.QueuePartition{}
			for _, p := range parts {
				m[p.Partition] = p
			}
			require.Len(t, m, len(parts), "each partition once")
			return m
		}

		empty := byPart()
		require.Len(t, empty, 3)
		for part, p := range empty {
			require.Equal(t, q.Key(part), p.Stream)
			require.Zero(t, p.Length)
			require.Zero(t, p.Pending)
			require.Empty(t, p.OldestPendingID)
			require.Empty(t, p.Consumers)
			require.False(t, p.NoGroup)
		}

		// Every event of partition 1: three tickets, two delivered to "a"
		// and one to "b", one of a's dead-lettered.
		events := eventsIn(q, 1, 1, 4)
		tickets := publishTickets(t, q, events)
		held := append(read(t, q, "a", 2), read(t, q, "b", 1)...)
		require.Len(t, held, 3)
		require.NoError(t, q.DeadLetter(t.Context(), held[0], "poison"))

		parts := byPart()
		p := parts[1]
		require.EqualValues(t, 3, p.Length, "four published, one dead-lettered (and deleted)")
		require.EqualValues(t, 2, p.Pending)
		require.Equal(t, []domain.ConsumerPending{{Name: "a", Pending: 1}, {Name: "b", Pending: 1}}, p.Consumers)
		_, oldest, err := queue.ParseTicket(held[1].MessageID)
		require.NoError(t, err)
		require.Equal(t, oldest, p.OldestPendingID)
		require.EqualValues(t, 1, p.DeadLetters)
		_, first, err := queue.ParseTicket(tickets[0])
		require.NoError(t, err)
		require.True(t, strings.Compare(first, oldest) <= 0)
		for _, other := range []int{0, 2} {
			require.Zero(t, parts[other].Length)
			require.Zero(t, parts[other].Pending)
		}

		// Redis lost the group of partition 2 (and its stream).
		require.NoError(t, rdb.Del(t.Context(), q.Key(2)).Err())
		require.True(t, byPart()[2].NoGroup)
		require.NoError(t, rdb.XGroupCreateMkStream(t.Context(), q.Key(2), "other-group", "0").Err())
		require.True(t, byPart()[2].NoGroup, "a stream with another group only")
	})
}

// TestInspectRedisDown: an unreachable Redis is an error, never an empty queue.
func TestInspectRedisDown(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	_, err := queue.New(rdb, "nf:tickets", group).Inspect(t.Context())
	require.Error(t, err)
}
