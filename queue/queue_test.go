package queue_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/queue"
)

const group = "workers"

type testBundle struct {
	rdb    *redis.Client
	prefix string
	stream string
}

// setup returns a queue with its group on a stream of the test's own.
func setup(t *testing.T) (*queue.Queue, *testBundle) {
	t.Helper()
	rdb, prefix := testenv.NewRedis(t)
	stream := prefix + "tickets"
	q := queue.New(rdb, stream, group)
	require.NoError(t, q.EnsureGroup(t.Context()))
	return q, &testBundle{rdb: rdb, prefix: prefix, stream: stream}
}

// base has nanoseconds that a ticket cannot carry: it keeps microseconds.
var base = time.Date(2026, 11, 30, 8, 0, 0, 123456789, time.UTC)

// makeEvents returns n events with ids from first.
func makeEvents(first int64, n int) []domain.Event {
	events := make([]domain.Event, n)
	for i := range events {
		id := first + int64(i)
		events[i] = domain.Event{
			ID:        id,
			Type:      domain.PostCreated,
			Payload:   json.RawMessage(fmt.Sprintf(`{"post_id":%d,"author_id":7}`, 1000+id)),
			Attempt:   1 + i%3,
			CreatedAt: base.Add(time.Duration(id) * time.Second),
		}
	}
	return events
}

func publish(t *testing.T, q *queue.Queue, events []domain.Event) {
	t.Helper()
	tickets, errs := q.Publish(t.Context(), events)
	require.Len(t, errs, len(events))
	require.Len(t, tickets, len(events))
	for i, err := range errs {
		require.NoError(t, err, "event %d", i)
	}
}

// read reads up to count tickets without waiting long.
func read(t *testing.T, q *queue.Queue, consumer string, count int) []domain.Delivery {
	t.Helper()
	tickets, err := q.Read(t.Context(), consumer, count, 10*time.Millisecond)
	require.NoError(t, err)
	return tickets
}

func requireEvent(t *testing.T, want domain.Event, got domain.Delivery) {
	t.Helper()
	require.Equal(t, want.ID, got.ID, "id")
	require.Equal(t, want.Type, got.Type, "type")
	require.Equal(t, want.Attempt, got.Attempt, "attempt")
	require.JSONEq(t, string(want.Payload), string(got.Payload), "payload")
	require.Equal(t, want.TraceContext, got.TraceContext, "trace context")
	wantAt := want.CreatedAt.Truncate(time.Microsecond)
	require.True(t, wantAt.Equal(got.CreatedAt), "created_at: want %v, got %v", wantAt, got.CreatedAt)
}

func ticketIDs(tickets []domain.Delivery) []int64 {
	ids := make([]int64, len(tickets))
	for i, tk := range tickets {
		ids[i] = tk.ID
	}
	return ids
}

func eventIDs(events []domain.Event) []int64 {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// pendingOf returns the group's pending entries by message id.
func pendingOf(t *testing.T, b *testBundle) map[string]redis.XPendingExt {
	t.Helper()
	list, err := b.rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{
		Stream: b.stream, Group: group, Start: "-", End: "+", Count: 1000,
	}).Result()
	require.NoError(t, err)
	out := make(map[string]redis.XPendingExt, len(list))
	for _, p := range list {
		out[p.ID] = p
	}
	return out
}

func streamLen(t *testing.T, b *testBundle, key string) int64 {
	t.Helper()
	n, err := b.rdb.XLen(t.Context(), key).Result()
	require.NoError(t, err)
	return n
}

func requirePending(t *testing.T, q *queue.Queue, want int64) {
	t.Helper()
	n, err := q.Pending(t.Context())
	require.NoError(t, err)
	require.Equal(t, want, n, "pending tickets")
}

// blockingReader returns a queue on the test's stream whose reads go through
// a Redis connection of their own, named, and a function that waits until
// Redis shows that connection blocked in XREADGROUP (CLIENT LIST: flag b).
func blockingReader(t *testing.T, b *testBundle) (*queue.Queue, func()) {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	name := strings.ReplaceAll(b.prefix, ":", "-") + "reader"
	opts.ClientName = name
	reader := redis.NewClient(opts)
	t.Cleanup(func() { _ = reader.Close() })
	waitBlocked := func() {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			clients, err := b.rdb.ClientList(t.Context()).Result()
			require.NoError(c, err)
			blocked := slices.ContainsFunc(strings.Split(clients, "\n"), func(line string) bool {
				fields := strings.Fields(line)
				return slices.Contains(fields, "name="+name) && slices.Contains(fields, "cmd=xreadgroup") &&
					slices.ContainsFunc(fields, func(f string) bool {
						flags, ok := strings.CutPrefix(f, "flags=")
						return ok && strings.Contains(flags, "b")
					})
			})
			require.True(c, blocked, "the reader blocks in XREADGROUP")
		}, 10*time.Second, 5*time.Millisecond)
	}
	return queue.New(reader, b.stream, group), waitBlocked
}

func TestPublishAndRead(t *testing.T) {
	t.Parallel()

	t.Run("RoundTripsEveryEventField", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		events := makeEvents(1, 3)
		events[1].Type = domain.FollowCreated
		events[1].Payload = json.RawMessage(`{"follower_id":5,"followee_id":6}`)
		events[2].Type = domain.PostDeleted
		events[2].Attempt = 9
		events[2].TraceContext = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		publish(t, q, events)
		require.Equal(t, int64(3), streamLen(t, b, b.stream))

		tickets := read(t, q, "a", 10)
		require.Len(t, tickets, 3)
		for i, tk := range tickets {
			requireEvent(t, events[i], tk)
			require.Equal(t, int64(1), tk.Deliveries)
			require.NotEmpty(t, tk.MessageID)
		}
		require.Equal(t, 123456000, tickets[0].CreatedAt.Nanosecond(), "microseconds survive, nanoseconds do not")
	})

	t.Run("ReadReturnsNothingWhenEmpty", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		tickets, err := q.Read(t.Context(), "a", 10, 10*time.Millisecond)
		require.NoError(t, err)
		require.Empty(t, tickets)
	})

	t.Run("ReadTakesAtMostCount", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		publish(t, q, makeEvents(1, 5))
		require.Equal(t, []int64{1, 2}, ticketIDs(read(t, q, "a", 2)))
		require.Equal(t, []int64{3, 4, 5}, ticketIDs(read(t, q, "a", 10)))
		require.Empty(t, read(t, q, "a", 10), "each ticket is delivered once")
	})

	t.Run("ABlockedReadGetsATicketPublishedMeanwhile", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		reader, waitBlocked := blockingReader(t, b)
		var tickets []domain.Delivery
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			tickets, err = reader.Read(t.Context(), "a", 10, time.Minute)
		}()
		waitBlocked()
		publish(t, q, makeEvents(1, 1))
		<-done
		require.NoError(t, err)
		require.Equal(t, []int64{1}, ticketIDs(tickets))
	})

	t.Run("PublishReportsAnErrorPerEvent", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		key := b.prefix + "not-a-stream"
		require.NoError(t, b.rdb.Set(t.Context(), key, "x", 0).Err())
		q := queue.New(b.rdb, key, group)

		_, errs := q.Publish(t.Context(), makeEvents(1, 2))
		require.Len(t, errs, 2)
		for _, err := range errs {
			require.Error(t, err)
		}
	})

	t.Run("MalformedTicketDecodesToZeroEvent", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		require.NoError(t, b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.stream, Values: []any{"junk", "1"}}).Err())
		tickets := read(t, q, "a", 10)
		require.Len(t, tickets, 1)
		require.Zero(t, tickets[0].ID)
		require.Empty(t, tickets[0].Type)
		require.Empty(t, tickets[0].Payload)
	})

	t.Run("EnsureGroupIsIdempotent", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		publish(t, q, makeEvents(1, 1))
		require.NoError(t, q.EnsureGroup(t.Context()))
		require.Equal(t, []int64{1}, ticketIDs(read(t, q, "a", 10)), "the group kept its place")
		require.NoError(t, q.EnsureGroup(t.Context()))
		require.Empty(t, read(t, q, "a", 10))
	})

	t.Run("AGroupMadeAfterTheStreamSeesEveryTicket", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		q := queue.New(b.rdb, b.prefix+"fresh", group)
		events := makeEvents(1, 3)
		publish(t, q, events) // the dispatcher writes first: no group yet
		tickets := read(t, q, "a", 10)
		require.Equal(t, eventIDs(events), ticketIDs(tickets))
	})
}

func TestConsumers(t *testing.T) {
	t.Parallel()

	t.Run("TwoConsumersGetDisjointTickets", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		events := makeEvents(1, 20)
		publish(t, q, events)

		a := read(t, q, "a", 7)
		c := read(t, q, "b", 100)
		require.Len(t, a, 7)
		require.Len(t, c, 13)
		got := append(ticketIDs(a), ticketIDs(c)...)
		slices.Sort(got)
		require.Equal(t, eventIDs(events), got)

		pending := pendingOf(t, b)
		for _, tk := range a {
			require.Equal(t, "a", pending[tk.MessageID].Consumer)
		}
		for _, tk := range c {
			require.Equal(t, "b", pending[tk.MessageID].Consumer)
		}
	})

	t.Run("ConcurrentConsumersShareTheTickets", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		events := makeEvents(1, 200)
		publish(t, q, events)

		got := make([][]int64, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for c := range 2 {
			wg.Go(func() {
				for {
					tickets, err := q.Read(t.Context(), fmt.Sprint("consumer-", c), 7, 10*time.Millisecond)
					if err != nil {
						errs[c] = err
						return
					}
					if len(tickets) == 0 {
						return
					}
					got[c] = append(got[c], ticketIDs(tickets)...)
				}
			})
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		all := append(slices.Clone(got[0]), got[1]...)
		slices.Sort(all)
		require.Equal(t, eventIDs(events), all, "every ticket delivered to exactly one consumer")
	})
}

func TestAck(t *testing.T) {
	t.Parallel()

	t.Run("RemovesTheTicketFromPendingAndTheStream", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		publish(t, q, makeEvents(1, 3))
		tickets := read(t, q, "a", 10)
		require.Len(t, tickets, 3)
		requirePending(t, q, 3)

		require.NoError(t, q.Ack(t.Context(), tickets[1].MessageID))
		requirePending(t, q, 2)
		require.Equal(t, int64(2), streamLen(t, b, b.stream))
		pending := pendingOf(t, b)
		require.NotContains(t, pending, tickets[1].MessageID)
		require.Contains(t, pending, tickets[0].MessageID)
		require.Contains(t, pending, tickets[2].MessageID)
		msgs, err := b.rdb.XRange(t.Context(), b.stream, tickets[1].MessageID, tickets[1].MessageID).Result()
		require.NoError(t, err)
		require.Empty(t, msgs)

		for _, tk := range []domain.Delivery{tickets[0], tickets[2]} {
			require.NoError(t, q.Ack(t.Context(), tk.MessageID))
		}
		requirePending(t, q, 0)
		require.Zero(t, streamLen(t, b, b.stream))
	})

	t.Run("TwiceIsHarmless", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		publish(t, q, makeEvents(1, 2))
		tickets := read(t, q, "a", 10)
		require.NoError(t, q.Ack(t.Context(), tickets[0].MessageID))
		require.NoError(t, q.Ack(t.Context(), tickets[0].MessageID))
		requirePending(t, q, 1)
		require.Equal(t, int64(1), streamLen(t, b, b.stream))
	})
}

// The take-over tests set the tickets' idle times instead of waiting for
// them: claims take tickets idle for minIdle, and age makes the tickets a
// test means to be stale look idle for twice that. A ticket the test leaves
// alone would take an hour to go stale, so a slow machine changes nothing.
const minIdle = time.Hour

// age makes every ticket that a consumer holds in q's one stream look idle
// for 2*minIdle, and returns how many it aged.
func age(t *testing.T, b *testBundle) int {
	t.Helper()
	return testenv.AgePending(t, b.rdb, b.stream, group, 2*minIdle)
}

// agePartitions is age over the first n partitions of q.
func agePartitions(t *testing.T, rdb redis.UniversalClient, q *queue.Queue, n int) int {
	t.Helper()
	aged := 0
	for p := range n {
		aged += testenv.AgePending(t, rdb, q.Key(p), group, 2*minIdle)
	}
	return aged
}

func TestClaimStale(t *testing.T) {
	t.Parallel()

	t.Run("TakesOverTicketsIdleLongerThanMinIdle", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		events := makeEvents(1, 2)
		publish(t, q, events)
		require.Len(t, read(t, q, "crashed", 10), 2)

		fresh, err := q.ClaimStale(t.Context(), "b", minIdle, 10)
		require.NoError(t, err)
		require.Empty(t, fresh, "not idle long enough")

		require.Equal(t, 2, age(t, b))
		taken, err := q.ClaimStale(t.Context(), "b", minIdle, 10)
		require.NoError(t, err)
		require.Len(t, taken, 2)
		for i, tk := range taken {
			requireEvent(t, events[i], tk)
			require.Equal(t, int64(2), tk.Deliveries)
		}
		pending := pendingOf(t, b)
		for _, tk := range taken {
			require.Equal(t, "b", pending[tk.MessageID].Consumer)
			require.Equal(t, int64(2), pending[tk.MessageID].RetryCount)
		}
		requirePending(t, q, 2)
		fresh, err = q.ClaimStale(t.Context(), "c", minIdle, 10)
		require.NoError(t, err)
		require.Empty(t, fresh, "a claim makes the tickets fresh again")

		// Taken over again, it counts a third delivery.
		require.Equal(t, 2, age(t, b))
		taken, err = q.ClaimStale(t.Context(), "c", minIdle, 1)
		require.NoError(t, err)
		require.Len(t, taken, 1, "at most count")
		require.Equal(t, int64(3), taken[0].Deliveries)
	})

	t.Run("NoGroupNoStreamNoTickets", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		q := queue.New(b.rdb, b.prefix+"missing", group)
		tickets, err := q.ClaimStale(t.Context(), "b", time.Millisecond, 10)
		require.NoError(t, err)
		require.Empty(t, tickets)
	})
}

// TestTouch: a touch starts a ticket's idle time again, without counting a
// delivery, so that a claim of the stale tickets passes the touched one over.
func TestTouch(t *testing.T) {
	t.Parallel()
	q, b := setup(t)
	publish(t, q, makeEvents(1, 2))
	tickets := read(t, q, "a", 10)
	require.Len(t, tickets, 2)
	touched, untouched := tickets[0].MessageID, tickets[1].MessageID
	require.Equal(t, 2, age(t, b))
	require.NoError(t, q.Touch(t.Context(), "a", touched))

	pending := pendingOf(t, b)
	for _, id := range []string{touched, untouched} {
		require.Equal(t, "a", pending[id].Consumer)
		require.Equal(t, int64(1), pending[id].RetryCount, "a touch is not a delivery")
	}
	require.Less(t, pending[touched].Idle, minIdle, "the touch started the ticket's idle time again")
	require.GreaterOrEqual(t, pending[untouched].Idle, 2*minIdle)

	taken, err := q.ClaimStale(t.Context(), "b", minIdle, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{tickets[1].ID}, ticketIDs(taken), "only the untouched ticket is taken over")
	owners := pendingOf(t, b)
	require.Equal(t, "b", owners[untouched].Consumer)
	require.Equal(t, "a", owners[touched].Consumer, "the touched ticket stays")
}

func TestPending(t *testing.T) {
	t.Parallel()

	t.Run("CountsDeliveredUnacknowledgedTickets", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		requirePending(t, q, 0)
		publish(t, q, makeEvents(1, 5))
		requirePending(t, q, 0) // published, not delivered
		tickets := read(t, q, "a", 2)
		read(t, q, "b", 1)
		requirePending(t, q, 3)
		require.NoError(t, q.Ack(t.Context(), tickets[0].MessageID))
		requirePending(t, q, 2)
	})

	t.Run("ZeroWithoutAStream", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		requirePending(t, queue.New(b.rdb, b.prefix+"missing", group), 0)
	})
}

func TestRedisLoss(t *testing.T) {
	t.Parallel()

	t.Run("ReadRecreatesTheGroupAfterTheStreamIsDeleted", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		publish(t, q, makeEvents(1, 2))
		require.Len(t, read(t, q, "a", 1), 1)
		require.NoError(t, b.rdb.Del(t.Context(), b.stream).Err())

		requirePending(t, q, 0)
		stale, err := q.ClaimStale(t.Context(), "b", 0, 10)
		require.NoError(t, err)
		require.Empty(t, stale)
		tickets, err := q.Read(t.Context(), "a", 10, 10*time.Millisecond)
		require.NoError(t, err)
		require.Nil(t, tickets)

		events := makeEvents(3, 1)
		publish(t, q, events)
		tickets = read(t, q, "a", 10)
		require.Len(t, tickets, 1)
		requireEvent(t, events[0], tickets[0])
		require.Equal(t, int64(1), tickets[0].Deliveries)
		requirePending(t, q, 1)
	})

	t.Run("ABlockedReadSurvivesTheStreamBeingDeleted", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		q, waitBlocked := blockingReader(t, b)

		var tickets []domain.Delivery
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			tickets, err = q.Read(t.Context(), "a", 10, 2*time.Second)
		}()
		waitBlocked()
		require.NoError(t, b.rdb.Del(t.Context(), b.stream).Err())
		<-done

		require.NoError(t, err, "no tickets came: no tickets and no error")
		require.Empty(t, tickets)
		// Whatever the blocked read answered, the next one works.
		publish(t, q, makeEvents(1, 1))
		require.Equal(t, []int64{1}, ticketIDs(read(t, q, "a", 10)))
	})
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	q, b := setup(t)
	events := makeEvents(1, 2)
	publish(t, q, events)
	tickets := read(t, q, "a", 10)
	require.Len(t, tickets, 2)

	require.NoError(t, q.DeadLetter(t.Context(), tickets[0], "poison: bad payload"))

	dead, err := b.rdb.XRange(t.Context(), b.stream+":dead", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dead, 1)
	v := dead[0].Values
	require.Equal(t, "1", v["id"])
	require.Equal(t, domain.PostCreated, v["type"])
	require.Equal(t, fmt.Sprint(events[0].Attempt), v["attempt"])
	require.Equal(t, fmt.Sprint(events[0].CreatedAt.UnixMicro()), v["created"])
	require.JSONEq(t, string(events[0].Payload), v["payload"].(string))
	require.Equal(t, "poison: bad payload", v["cause"])
	require.Equal(t, "1", v["deliveries"])

	// Acknowledged and gone from the work stream; the other ticket is untouched.
	require.NotContains(t, pendingOf(t, b), tickets[0].MessageID)
	requirePending(t, q, 1)
	require.Equal(t, int64(1), streamLen(t, b, b.stream))
}

// With WaitReplicas, a ticket that no replica of its partition's primary
// has is not reported written: on the Redis Cluster, with the replica of
// one partition's primary stopped (SIGSTOP: alive, silent), the batch's
// tickets for that primary go to partitions on the other primaries after
// the timeout, and every ticket is written. (Were every primary's replica
// behind, they would fail, and the dispatcher would publish them again
// without counting a failure: outbox/TestDispatchOnce.)
func TestPublishWaitsForReplicas(t *testing.T) {
	testenv.SkipWithoutRedisCluster(t)
	testenv.HoldReplicas(t)
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	cc := rdb.(*redis.ClusterClient)
	q, err := queue.NewPartitioned(rdb, queue.Config{
		Stream: prefix + "tickets", Group: group, Partitions: 16,
		WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, q.EnsureGroup(t.Context()))
	tickets, errs := q.Publish(t.Context(), makeEvents(1, 32))
	for i := range tickets {
		require.NoError(t, errs[i], "every primary has a replica that answers")
	}

	primaryOf := func(key string) string {
		node, err := cc.MasterForKey(t.Context(), key)
		require.NoError(t, err)
		return node.Options().Addr
	}
	primary, err := cc.MasterForKey(t.Context(), q.Key(1))
	require.NoError(t, err)
	stopped := primary.Options().Addr
	resume := testenv.StopReplicaOf(t, primary)
	events := makeEvents(101, 32)
	tickets, errs = q.Publish(t.Context(), events)
	moved := 0
	for i, e := range events {
		require.NoError(t, errs[i], "event %d", e.ID)
		part, _, err := queue.ParseTicket(tickets[i])
		require.NoError(t, err)
		require.NotEqual(t, stopped, primaryOf(q.Key(part)), "event %d: its ticket is on the primary whose replica is stopped", e.ID)
		if part != q.Partition(e.ID) {
			moved++
		}
	}
	require.Positive(t, moved, "some tickets were routed to the stopped replica's primary, and moved")
	resume()
	var queued int64
	for part := range 16 {
		n, err := rdb.XLen(t.Context(), q.Key(part)).Result()
		require.NoError(t, err)
		queued += n
	}
	require.Equal(t, int64(64+moved), queued, "the first copies of the moved tickets are in their streams too")
	got := read(t, q, "a", 200)
	seen := map[int64]int{}
	for _, tk := range got {
		seen[tk.ID]++
	}
	for _, e := range events {
		require.GreaterOrEqual(t, seen[e.ID], 1, "event %d is read", e.ID)
	}
}
