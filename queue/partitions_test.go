package queue_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/queue"
)

// partitioned returns a queue of n partitions on the test's own stream,
// with its groups, refreshing its partitions every 20ms.
func partitioned(t *testing.T, rdb redis.UniversalClient, prefix string, n int) *queue.Queue {
	t.Helper()
	q, err := queue.NewPartitioned(rdb, queue.Config{
		Stream: prefix + "tickets", Group: group, Partitions: n, Refresh: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, q.EnsureGroup(t.Context()))
	return q
}

// publishTickets publishes events and returns their ticket ids.
func publishTickets(t *testing.T, q *queue.Queue, events []domain.Event) []string {
	t.Helper()
	tickets, errs := q.Publish(t.Context(), events)
	for i, err := range errs {
		require.NoError(t, err, "event %d", i)
	}
	return tickets
}

func partitionOf(t *testing.T, ticket string) int {
	t.Helper()
	p, _, err := queue.ParseTicket(ticket)
	require.NoError(t, err)
	return p
}

// drain reads and acknowledges with consumers until every one of want was
// delivered, and returns how often each event was delivered.
func drain(t *testing.T, q *queue.Queue, consumers int, count int, want int) map[int64]int {
	t.Helper()
	var mu sync.Mutex
	got := map[int64]int{}
	total := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, consumers)
	for c := range consumers {
		wg.Go(func() {
			for ctx.Err() == nil && total() < want {
				tickets, err := q.Read(ctx, fmt.Sprint("consumer-", c), count, 50*time.Millisecond)
				if err != nil {
					errs[c] = err
					return
				}
				if len(tickets) > count {
					errs[c] = fmt.Errorf("read %d tickets, asked for %d", len(tickets), count)
					return
				}
				for _, tk := range tickets {
					if err := q.Ack(ctx, tk.MessageID); err != nil {
						errs[c] = err
						return
					}
					mu.Lock()
					got[tk.ID]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return got
}

// requireEachOnce checks that every event of ids was delivered exactly once.
func requireEachOnce(t *testing.T, ids []int64, got map[int64]int) {
	t.Helper()
	for _, id := range ids {
		require.Equal(t, 1, got[id], "deliveries of event %d", id)
	}
	require.Len(t, got, len(ids), "no other event delivered")
}

func streamLength(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := rdb.XLen(t.Context(), key).Result()
	require.NoError(t, err)
	return n
}

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ n *atomic.Int64 }

func (h roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// eventsIn returns n events, from first on, whose tickets q puts in partition part.
func eventsIn(q *queue.Queue, part int, first int64, n int) []domain.Event {
	var events []domain.Event
	for id := first; len(events) < n; id++ {
		if q.Partition(id) == part {
			events = append(events, makeEvents(id, 1)...)
		}
	}
	return events
}

func TestParseTicket(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]int{
		"1712345678901-0":      0, // every id from before partitions
		"0-1":                  0,
		"3/1712345678901-7":    3,
		"1023/1712345678901-0": 1023,
	} {
		part, entry, err := queue.ParseTicket(id)
		require.NoError(t, err, id)
		require.Equal(t, want, part, id)
		require.True(t, strings.HasSuffix(id, entry) && !strings.Contains(entry, "/"), "entry %q of %q", entry, id)
	}
	for _, id := range []string{"", "x", "17-", "-1", "1-x", "0/1-0", "03/1-0", "1024/1-0", "-1/1-0", "/1-0", "3/", "3/x-1", "3/1-0/1"} {
		_, _, err := queue.ParseTicket(id)
		require.Error(t, err, id)
	}
}

func TestPartitionConfig(t *testing.T) {
	t.Parallel()
	rdb, prefix := backends(t)[0].open(t)
	for _, n := range []int{-1, queue.MaxPartitions + 1} {
		_, err := queue.NewPartitioned(rdb, queue.Config{Stream: prefix + "tickets", Group: group, Partitions: n})
		require.ErrorContains(t, err, "Partitions", "%d partitions", n)
	}
	_, err := queue.NewPartitioned(rdb, queue.Config{Stream: prefix + "{tickets}", Group: group, Partitions: 2})
	require.ErrorContains(t, err, "hash tag")
	for field, cfg := range map[string]queue.Config{
		"Refresh":      {Refresh: -time.Second},
		"WaitReplicas": {WaitReplicas: -1},
		"WaitTimeout":  {WaitTimeout: -time.Second},
	} {
		cfg.Stream, cfg.Group = prefix+"tickets", group
		q, err := queue.NewPartitioned(rdb, cfg)
		require.ErrorContains(t, err, "Config."+field+" is -", "a negative %s is refused, not taken for the default", field)
		require.Nil(t, q)
	}

	q, err := queue.NewPartitioned(rdb, queue.Config{Stream: prefix + "tickets", Group: group})
	require.NoError(t, err)
	require.Equal(t, 1, q.Partitions(), "0 means 1")

	q = partitioned(t, rdb, prefix, 16)
	require.Equal(t, prefix+"tickets", q.Key(0), "partition 0 keeps the queue's key")
	require.Equal(t, prefix+"tickets:{3}", q.Key(3))
	require.Equal(t, prefix+"tickets:dead", q.DeadKey(0), "and its dead letters theirs")
	require.Equal(t, prefix+"tickets:dead:{3}", q.DeadKey(3))
	for p := range 16 {
		require.Equal(t, "stream", rdb.Type(t.Context(), q.Key(p)).Val(), "EnsureGroup made partition %d", p)
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()

	t.Run("OnePartitionIsTheOneStreamAsEver", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 1)
		for _, tk := range publishTickets(t, q, makeEvents(1, 20)) {
			require.NotContains(t, tk, "/", "a plain stream entry id")
		}
		require.EqualValues(t, 20, streamLength(t, rdb, prefix+"tickets"))
		keys, err := rdb.Keys(t.Context(), prefix+"*").Result()
		require.NoError(t, err)
		slices.Sort(keys)
		require.Equal(t, []string{prefix + "tickets", prefix + "tickets:bell"}, keys, "no registry, no other stream")
	})

	t.Run("StableAndSpread", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 8)
		other := partitioned(t, rdb, prefix, 8) // another process, same count
		events := makeEvents(1, 800)
		first := publishTickets(t, q, events)
		again := publishTickets(t, other, events) // every event published again
		perPartition := make([]int, 8)
		for i, e := range events {
			p := partitionOf(t, first[i])
			require.Equal(t, p, partitionOf(t, again[i]), "event %d published again lands where it did", e.ID)
			require.Equal(t, p, q.Partition(e.ID))
			require.Equal(t, p, other.Partition(e.ID))
			perPartition[p]++
		}
		for p, n := range perPartition {
			require.InDelta(t, 100, n, 30, "tickets of partition %d: %v", p, perPartition)
			require.EqualValues(t, 2*n, streamLength(t, rdb, q.Key(p)))
		}
	})
}

func TestPartitionedRead(t *testing.T) {
	t.Parallel()

	t.Run("TwoWorkersEightPartitionsEveryTicketOnce", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, func(t *testing.T, b backend) {
			rdb, prefix := b.open(t)
			q := partitioned(t, rdb, prefix, 8)
			events := makeEvents(1, 400)
			// Published while the workers read, in batches, as dispatchers do.
			go func() {
				for i := 0; i < len(events); i += 25 {
					if _, errs := q.Publish(context.Background(), events[i:i+25]); errs[0] != nil {
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
			got := drain(t, q, 2, 7, len(events))
			requireEachOnce(t, eventIDs(events), got)
			for p := range 8 {
				require.Zero(t, streamLength(t, rdb, q.Key(p)), "partition %d is empty", p)
			}
			requirePending(t, q, 0)
		})
	})

	t.Run("ReadTakesAtMostCountOverAllPartitions", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 8)
		publish(t, q, makeEvents(1, 50))
		require.Len(t, read(t, q, "a", 5), 5)
		require.Len(t, read(t, q, "a", 3), 3)
		require.Len(t, read(t, q, "a", 100), 42)
		require.Empty(t, read(t, q, "a", 100))
		requirePending(t, q, 50)
	})

	t.Run("OneBusyPartitionFillsTheCountInOneRead", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 16)
		events := eventsIn(q, 5, 1, 100)
		publish(t, q, events)
		tickets := read(t, q, "a", 64)
		require.Len(t, tickets, 64, "the shares the empty partitions left go to the busy one")
		for _, tk := range tickets {
			require.Equal(t, 5, partitionOf(t, tk.MessageID))
		}
	})

	t.Run("ASparseQueueIsSearchedInOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 16)
		counted := rdb.(*redis.Client).WithTimeout(time.Minute) // a client of its own, to hook
		var trips atomic.Int64
		counted.AddHook(roundTrips{&trips})
		reader, err := queue.NewPartitioned(counted, queue.Config{Stream: prefix + "tickets", Group: group, Partitions: 16, Refresh: time.Hour})
		require.NoError(t, err)
		for _, part := range []int{13, 2, 9} {
			publish(t, q, eventsIn(q, part, int64(100*part), 1))
			trips.Store(0)
			tickets := read(t, reader, "a", 1)
			require.Len(t, tickets, 1)
			require.Equal(t, part, partitionOf(t, tickets[0].MessageID))
			// The first read of the registry, a look at every partition, a read.
			require.LessOrEqual(t, trips.Load(), int64(3), "round trips to find the ticket of partition %d", part)
		}
	})

	t.Run("ABlockedReadWakesForATicketInAnyPartition", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 8)
		// The reader has a connection of its own, named, to see it block.
		opts, err := redis.ParseURL(testenv.RedisURL())
		require.NoError(t, err)
		name := strings.ReplaceAll(prefix, ":", "-") + "reader"
		opts.ClientName = name
		readerRDB := redis.NewClient(opts)
		t.Cleanup(func() { _ = readerRDB.Close() })
		reader := partitioned(t, readerRDB, prefix, 8)
		for _, part := range []int{0, 3, 7} {
			var tickets []domain.Delivery
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				tickets, err = reader.Read(t.Context(), "a", 10, time.Minute)
			}()
			// The reader blocks on the bell: XREAD, not XREADGROUP.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				clients, err := rdb.ClientList(t.Context()).Result()
				require.NoError(c, err)
				blocked := slices.ContainsFunc(strings.Split(clients, "\n"), func(line string) bool {
					fields := strings.Fields(line)
					return slices.Contains(fields, "name="+name) && slices.Contains(fields, "cmd=xread") &&
						slices.ContainsFunc(fields, func(f string) bool {
							flags, ok := strings.CutPrefix(f, "flags=")
							return ok && strings.Contains(flags, "b")
						})
				})
				require.True(c, blocked, "the reader waits on the bell")
			}, 10*time.Second, 5*time.Millisecond)
			e := eventsIn(q, part, int64(1000*(part+1)), 1)
			start := time.Now()
			publish(t, q, e)
			<-done
			require.NoError(t, err)
			require.Equal(t, []int64{e[0].ID}, ticketIDs(tickets), "partition %d", part)
			require.Less(t, time.Since(start), 5*time.Second, "woken by the bell, not at the end of the wait")
		}
	})

	t.Run("ReadWithoutWaitingWhenEmpty", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 8)
		start := time.Now()
		tickets, err := q.Read(t.Context(), "a", 10, 0)
		require.NoError(t, err)
		require.Empty(t, tickets)
		tickets, err = q.Read(t.Context(), "a", 10, 100*time.Millisecond)
		require.NoError(t, err)
		require.Empty(t, tickets)
		require.Less(t, time.Since(start), 5*time.Second)
	})

	t.Run("APartitionRedisLostIsMadeAgain", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		q := partitioned(t, rdb, prefix, 4)
		require.NoError(t, rdb.Del(t.Context(), q.Key(2)).Err())
		events := eventsIn(q, 2, 1, 3) // the dispatcher writes first: no group
		publish(t, q, events)
		require.Equal(t, eventIDs(events), ticketIDs(read(t, q, "a", 10)))
	})
}

func TestPartitionedTakeover(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb, prefix := b.open(t)
		q := partitioned(t, rdb, prefix, 8)
		events := makeEvents(1, 40)
		publish(t, q, events)
		taken := read(t, q, "crashed", 100)
		require.Len(t, taken, 40)

		fresh, err := q.ClaimStale(t.Context(), "b", minIdle, 100)
		require.NoError(t, err)
		require.Empty(t, fresh, "not idle long enough")

		// The crashed reader's tickets look idle for twice minIdle; b
		// claims 15 of them, which makes those 15 fresh again; c gets the
		// other 25 and none of b's, fresh again for an hour at least.
		require.Equal(t, 40, agePartitions(t, rdb, q, 8))
		some, err := q.ClaimStale(t.Context(), "b", minIdle, 15)
		require.NoError(t, err)
		require.Len(t, some, 15, "at most count, over every partition")
		rest, err := q.ClaimStale(t.Context(), "c", minIdle, 100)
		require.NoError(t, err)
		require.Len(t, rest, 25)

		byID := map[int64]domain.Event{}
		for _, e := range events {
			byID[e.ID] = e
		}
		partitions := map[int]bool{}
		for i, tk := range append(some, rest...) {
			requireEvent(t, byID[tk.ID], tk)
			require.Equal(t, int64(2), tk.Deliveries, "ticket %d", i)
			part, entry, err := queue.ParseTicket(tk.MessageID)
			require.NoError(t, err)
			partitions[part] = true
			pending, err := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{
				Stream: q.Key(part), Group: group, Start: entry, End: entry, Count: 1,
			}).Result()
			require.NoError(t, err)
			require.Len(t, pending, 1)
			require.Equal(t, map[bool]string{true: "b", false: "c"}[i < 15], pending[0].Consumer)
		}
		require.Len(t, partitions, 8, "taken over from every partition")
		requirePending(t, q, 40)

		// Touched and acknowledged by the ids the takeover gave.
		for _, tk := range some {
			require.NoError(t, q.Touch(t.Context(), "b", tk.MessageID))
			require.NoError(t, q.Ack(t.Context(), tk.MessageID))
		}
		requirePending(t, q, 25)
	})
}

func TestPartitionedDeadLetter(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb, prefix := b.open(t)
		q := partitioned(t, rdb, prefix, 8)
		publish(t, q, makeEvents(1, 40))
		tickets := read(t, q, "a", 100)
		require.Len(t, tickets, 40)
		dead := map[int]int{}
		for _, tk := range tickets {
			require.NoError(t, q.DeadLetter(t.Context(), tk, "poison "+strconv.FormatInt(tk.ID, 10)))
			dead[partitionOf(t, tk.MessageID)]++
		}
		require.Len(t, dead, 8)
		for part, n := range dead {
			require.Zero(t, streamLength(t, rdb, q.Key(part)), "partition %d: acknowledged and deleted", part)
			msgs, err := rdb.XRange(t.Context(), q.DeadKey(part), "-", "+").Result()
			require.NoError(t, err)
			require.Len(t, msgs, n, "partition %d's dead letters are in its own stream", part)
			for _, m := range msgs {
				id, err := strconv.ParseInt(m.Values["id"].(string), 10, 64)
				require.NoError(t, err)
				require.Equal(t, part, q.Partition(id))
				require.Equal(t, "poison "+m.Values["id"].(string), m.Values["cause"])
			}
		}
		requirePending(t, q, 0)
	})
}

func TestPartitionedHolds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		rdb, prefix := b.open(t)
		q := partitioned(t, rdb, prefix, 8)
		events := makeEvents(1, 40)
		tickets := publishTickets(t, q, events)
		held, err := q.Holds(t.Context(), tickets)
		require.NoError(t, err)
		require.Equal(t, slices.Repeat([]bool{true}, 40), held)

		// Acknowledge the first ticket of every partition: those alone are gone.
		delivered := read(t, q, "a", 100)
		acked := map[string]bool{}
		seen := map[int]bool{}
		for _, tk := range delivered {
			if p := partitionOf(t, tk.MessageID); !seen[p] {
				seen[p] = true
				acked[tk.MessageID] = true
				require.NoError(t, q.Ack(t.Context(), tk.MessageID))
			}
		}
		require.Len(t, acked, 8)
		held, err = q.Holds(t.Context(), tickets)
		require.NoError(t, err)
		for i, tk := range tickets {
			require.Equal(t, !acked[tk], held[i], "ticket %s", tk)
		}

		// Entry ids repeat across partitions (each stream numbers its own
		// entries): a ticket is looked up in its own partition only.
		byEntry := map[string][]string{}
		for _, tk := range tickets {
			if !acked[tk] {
				_, entry, err := queue.ParseTicket(tk)
				require.NoError(t, err)
				byEntry[entry] = append(byEntry[entry], tk)
			}
		}
		var twins []string
		for _, tks := range byEntry {
			if len(tks) > 1 {
				twins = tks[:2]
				break
			}
		}
		require.NotEmpty(t, twins, "40 tickets of one pipeline in 8 streams share entry ids")
		require.NoError(t, q.Ack(t.Context(), twins[0]))
		_, entry, err := queue.ParseTicket(twins[0])
		require.NoError(t, err)
		held, err = q.Holds(t.Context(), []string{twins[0], twins[1], "junk", "9999/" + entry, "7/1-0"})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true, false, false, false}, held, "%v", twins)
		inThree := ""
		for _, tk := range tickets {
			if !acked[tk] && tk != twins[0] && partitionOf(t, tk) == 3 {
				inThree = tk
			}
		}

		// A registration Redis lost (a failover) comes back with the check.
		require.NoError(t, rdb.Del(t.Context(), q.RegistryKey()).Err())
		_, err = q.Holds(t.Context(), []string{inThree})
		require.NoError(t, err)
		require.Equal(t, []string{"3"}, rdb.SMembers(t.Context(), q.RegistryKey()).Val())
	})
}

func TestPartitionedPending(t *testing.T) {
	t.Parallel()
	rdb, prefix := backends(t)[0].open(t)
	q := partitioned(t, rdb, prefix, 8)
	requirePending(t, q, 0)
	publish(t, q, makeEvents(1, 30))
	requirePending(t, q, 0)
	tickets := read(t, q, "a", 20)
	requirePending(t, q, 20)
	require.NoError(t, q.Ack(t.Context(), tickets[0].MessageID))
	requirePending(t, q, 19)
	// The partitions another count registered count too.
	big := partitioned(t, rdb, prefix, 32)
	events := eventsIn(big, 20, 1000, 3)
	publish(t, big, events)
	require.Len(t, read(t, big, "a", 100), 13)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := q.Pending(t.Context())
		require.NoError(c, err)
		require.EqualValues(c, 32, n)
	}, 5*time.Second, 10*time.Millisecond)
}

// TestChangingThePartitionCount: tickets waiting in partitions that a new,
// smaller count drops are all delivered, with the new count's own, exactly
// once; so are the tickets of a larger count's dispatcher still running; and
// once empty, the dropped partitions are retired and their streams deleted.
func TestChangingThePartitionCount(t *testing.T) {
	t.Parallel()

	t.Run("Shrink", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, func(t *testing.T, b backend) {
			rdb, prefix := b.open(t)
			old := partitioned(t, rdb, prefix, 16)
			waiting := makeEvents(1, 320)
			publish(t, old, waiting)
			// Some were in progress when the old workers stopped.
			require.Len(t, read(t, old, "old-worker", 20), 20)

			q := partitioned(t, rdb, prefix, 4)
			newer := makeEvents(1000, 80)
			publish(t, q, newer)
			// A dispatcher of the old count still runs for a while.
			stragglers := eventsIn(old, 11, 5000, 10)
			publish(t, old, stragglers)

			got := drain(t, q, 2, 16, len(waiting)+len(newer)+len(stragglers)-20)
			stale, err := q.ClaimStale(t.Context(), "new-worker", 0, 100)
			require.NoError(t, err)
			require.Len(t, stale, 20, "the old workers' tickets are taken over from the dropped partitions")
			for _, tk := range stale {
				require.NoError(t, q.Ack(t.Context(), tk.MessageID))
				got[tk.ID]++
			}
			requireEachOnce(t, append(append(eventIDs(waiting), eventIDs(newer)...), eventIDs(stragglers)...), got)

			// Empty now: the dropped partitions are retired.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				_, err := q.Read(t.Context(), "new-worker", 10, 0)
				require.NoError(c, err)
				for _, m := range rdb.SMembers(t.Context(), q.RegistryKey()).Val() {
					p, err := strconv.Atoi(m)
					require.NoError(c, err)
					require.Less(c, p, 4, "partition %d is still registered", p)
				}
			}, 10*time.Second, 30*time.Millisecond)
			for p := 4; p < 16; p++ {
				require.Zero(t, rdb.Exists(t.Context(), q.Key(p)).Val(), "partition %d deleted", p)
			}
			for p := range 4 {
				require.NotZero(t, rdb.Exists(t.Context(), q.Key(p)).Val(), "partition %d stays", p)
			}
			// A dispatcher of the old count writes again: read again.
			late := eventsIn(old, 9, 9000, 2)
			publish(t, old, late)
			requireEachOnce(t, eventIDs(late), drain(t, q, 1, 10, 2))
		})
	})

	t.Run("Grow", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, func(t *testing.T, b backend) {
			rdb, prefix := b.open(t)
			// Tickets of before partitions, in the one stream.
			one := queue.New(rdb, prefix+"tickets", group)
			require.NoError(t, one.EnsureGroup(t.Context()))
			before := makeEvents(1, 50)
			tickets := publishTickets(t, one, before)
			q := partitioned(t, rdb, prefix, 8)
			held, err := q.Holds(t.Context(), tickets)
			require.NoError(t, err)
			require.Equal(t, slices.Repeat([]bool{true}, 50), held, "an id without a partition is partition 0's")
			after := makeEvents(100, 50)
			publish(t, q, after)
			requireEachOnce(t, append(eventIDs(before), eventIDs(after)...), drain(t, q, 2, 8, 100))
		})
	})

	t.Run("WorkersOfTheNewCountFirst", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := backends(t)[0].open(t)
		// Workers of 2 partitions, dispatchers still of 1, then of 6.
		q := partitioned(t, rdb, prefix, 2)
		one := queue.New(rdb, prefix+"tickets", group)
		six := partitioned(t, rdb, prefix, 6)
		events := makeEvents(1, 60)
		publish(t, one, events[:30])
		publish(t, six, events[30:])
		requireEachOnce(t, eventIDs(events), drain(t, q, 2, 5, 60))
	})
}

// TestPartitionsOnTheCluster: the partitions of a queue spread over the
// cluster's shards, and a read of every partition works with its slots on
// several nodes.
func TestPartitionsOnTheCluster(t *testing.T) {
	t.Parallel()
	requireCluster(t)
	rdb, prefix := openCluster(t)
	cluster := rdb.(*redis.ClusterClient)
	q := partitioned(t, rdb, prefix, 16)

	shards, err := cluster.ClusterShards(t.Context()).Result()
	require.NoError(t, err)
	owner := func(slot int64) string {
		for _, s := range shards {
			for _, r := range s.Slots {
				if slot >= r.Start && slot <= r.End {
					for _, n := range s.Nodes {
						if n.Role == "master" {
							return n.ID
						}
					}
				}
			}
		}
		return ""
	}
	byShard := map[string][]int{}
	slots := map[int64]bool{}
	for p := range 16 {
		slot, err := cluster.ClusterKeySlot(t.Context(), q.Key(p)).Result()
		require.NoError(t, err)
		slots[slot] = true
		dead, err := cluster.ClusterKeySlot(t.Context(), q.DeadKey(p)).Result()
		require.NoError(t, err)
		if p > 0 {
			require.Equal(t, slot, dead, "partition %d and its dead letters share a slot", p)
		}
		byShard[owner(slot)] = append(byShard[owner(slot)], p)
	}
	require.Len(t, slots, 16, "a slot per partition")
	require.GreaterOrEqual(t, len(byShard), min(3, len(shards)), "partitions on every shard: %v", byShard)
	t.Logf("partitions by shard: %v", byShard)

	events := makeEvents(1, 480)
	tickets := publishTickets(t, q, events)
	written := map[string]int{}
	for _, tk := range tickets {
		part := partitionOf(t, tk)
		slot, _ := cluster.ClusterKeySlot(t.Context(), q.Key(part)).Result()
		written[owner(slot)]++
	}
	require.Len(t, written, len(byShard), "tickets written to every shard: %v", written)
	t.Logf("tickets by shard: %v", written)
	requireEachOnce(t, eventIDs(events), drain(t, q, 2, 10, len(events)))
}

func TestSomePartitionsFailing(t *testing.T) {
	t.Parallel()
	rdb, prefix := backends(t)[0].open(t)
	q := partitioned(t, rdb, prefix, 4)
	events := append(eventsIn(q, 1, 1, 3), eventsIn(q, 3, 100, 3)...)
	publish(t, q, events)
	// Partition 2 is broken (not a stream): the others are read all the same.
	require.NoError(t, rdb.Del(t.Context(), q.Key(2)).Err())
	require.NoError(t, rdb.Set(t.Context(), q.Key(2), "x", 0).Err())
	tickets, err := q.Read(t.Context(), "a", 10, 0)
	require.Error(t, err)
	require.ElementsMatch(t, eventIDs(events), ticketIDs(tickets), "the tickets taken come with the error")

	// A ticket that cannot be registered fails: the dispatcher publishes it again.
	require.NoError(t, rdb.Set(t.Context(), q.RegistryKey(), "x", 0).Err())
	ids, errs := q.Publish(t.Context(), append(eventsIn(q, 0, 1000, 1), eventsIn(q, 1, 1000, 1)...))
	require.NoError(t, errs[0], "partition 0 needs no registration")
	require.NotEmpty(t, ids[0])
	require.Error(t, errs[1])
	require.Empty(t, ids[1])
}
