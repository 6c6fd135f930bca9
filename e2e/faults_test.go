package e2e

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkerKilledMidFanout: a worker is killed with SIGKILL in the middle of
// a 20,000-follower fan-out — done by one ticket, or split into chunks of
// 5,000 that any worker can take — and a new worker finishes it: every
// follower ends with the post exactly once.
func TestWorkerKilledMidFanout(t *testing.T) {
	t.Parallel()
	for name, chunk := range map[string]string{"whole": "100000", "chunked": "5000"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, withEnv(
				"NEWSFEED_FANOUT_PAGE_SIZE=100", // many small pages: a long fan-out to interrupt
				"NEWSFEED_QUEUE_CLAIM_IDLE=1s",
				"NEWSFEED_FANOUT_CHUNK_SIZE="+chunk,
				"NEWSFEED_FANOUT_CELEBRITY_THRESHOLD=1000000", // fanned out, not pulled
			))
			serve := c.start("serve")
			c.start("dispatch")
			w1 := c.start("work")

			const author = 7
			followers := c.seedFollowers(author, 100_000, 20_000)
			c.markFeedsBuilt(followers)

			p := serve.client(author).post("to twenty thousand")
			require.Eventually(t, func() bool { return w1.metric("newsfeed_fanout_entries_total") > 0 },
				30*time.Second, 2*time.Millisecond, "fan-out started")
			w1.kill()
			partial := c.feedsHolding(followers, p.ID)
			t.Logf("worker killed after writing %d of %d feeds", partial, len(followers))
			require.Less(t, partial, len(followers), "the worker died mid fan-out")
			require.Equal(t, "published", c.outboxStatus(1), "the post's fan-out is not finished")

			w2 := c.start("work")
			c.waitOutboxDrained(60 * time.Second)
			require.Equal(t, "done", c.outboxStatus(1))
			require.Equal(t, len(followers), c.feedsHolding(followers, p.ID))
			require.Equal(t, float64(len(followers)-partial), w2.metric("newsfeed_fanout_entries_total"),
				"the new worker wrote exactly the entries the dead one had not")
			for _, f := range followers[:50] { // and through the API, once each
				items := serve.client(f).feed()
				require.Len(t, items, 1)
				require.Equal(t, p.ID, items[0].ID)
			}
			var chunks int
			require.NoError(t, c.pool.QueryRow(context.Background(),
				"SELECT count(*) FROM outbox WHERE parent_id = 1 AND status = 'done'").Scan(&chunks))
			if chunk == "5000" {
				require.Equal(t, 5, chunks, "4 full chunks and the (empty) rest")
			} else {
				require.Zero(t, chunks)
			}
		})
	}
}

// TestDispatcherKilledThreeTimes: the dispatcher is killed with SIGKILL three
// times at random moments while 300 posts are created; every post reaches
// every follower exactly once.
func TestDispatcherKilledThreeTimes(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_LEASE=1s", "NEWSFEED_OUTBOX_BATCH_SIZE=20"))
	serve := c.start("serve")
	c.start("work", "--concurrency", "16")
	dispatcher := c.start("dispatch")

	const authors = 3
	var followers []int64
	for a := int64(1); a <= authors; a++ {
		followers = append(followers, c.seedFollowers(a, 1000*a, 30)...)
	}
	c.markFeedsBuilt(followers)

	const total = 300
	var created atomic.Int32
	byAuthor := make([][]int64, authors+1)
	var mu sync.Mutex
	posting := make(chan struct{})
	go func() {
		defer close(posting)
		parallel(total, 4, func(i int) {
			a := int64(i%authors + 1)
			p := serve.client(a).post("post " + strconv.Itoa(i))
			mu.Lock()
			byAuthor[a] = append(byAuthor[a], p.ID)
			mu.Unlock()
			created.Add(1)
			time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
		})
	}()
	for kill := 1; kill <= 3; kill++ {
		at := int32(kill*total/4 + rand.IntN(total/8))
		for created.Load() < at {
			time.Sleep(time.Millisecond)
		}
		dispatcher.kill()
		t.Logf("dispatcher killed after %d posts", created.Load())
		dispatcher = c.start("dispatch")
	}
	<-posting
	c.waitOutboxDrained(60 * time.Second)

	for a := int64(1); a <= authors; a++ {
		require.Len(t, byAuthor[a], total/authors)
		for _, id := range byAuthor[a] {
			require.Equal(t, 30, c.feedsHolding(followers[(a-1)*30:a*30], id), "post %d", id)
		}
	}
	for _, f := range []int64{1000, 2015, 3029} { // through the API: every post once, nothing else
		items := serve.client(f).feed()
		require.Len(t, items, total/authors)
		seen := map[int64]bool{}
		for _, it := range items {
			require.False(t, seen[it.ID], "post %d twice", it.ID)
			seen[it.ID] = true
		}
	}
}

// TestRedisFlushed: Redis loses everything while the roles run. Feeds come
// back on read, new posts keep flowing, and tickets lost with the stream are
// published again from the outbox and delivered.
func TestRedisFlushed(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withOwnRedisDB(), withEnv("NEWSFEED_OUTBOX_REDELIVER_AFTER=2s"))
	serve := c.start("serve")
	dispatcher := c.start("dispatch")
	worker := c.start("work")
	rdb := c.redis()
	ctx := context.Background()

	const author = 1
	followers := c.seedFollowers(author, 1000, 40)
	parallel(len(followers), 8, func(i int) { serve.client(followers[i]).firstPage(1) })
	john := serve.client(author)
	var before []int64
	for i := range 20 {
		before = append(before, john.post("before "+strconv.Itoa(i)).ID)
	}
	c.waitOutboxDrained(30 * time.Second)

	// Redis loses everything while every role runs and posts keep coming.
	var racing []int64
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		time.Sleep(30 * time.Millisecond)
		require.NoError(t, rdb.FlushDB(ctx).Err())
	}()
	for i := range 30 {
		racing = append(racing, john.post("racing "+strconv.Itoa(i)).ID)
		time.Sleep(2 * time.Millisecond)
	}
	<-flushed
	c.waitOutboxDrained(60 * time.Second)

	// Tickets published and waiting in the stream when Redis loses it (no
	// worker reads them first) are published again from the outbox.
	require.Equal(t, 0, worker.stop())
	var during []int64
	for i := range 10 {
		during = append(during, john.post("during "+strconv.Itoa(i)).ID)
	}
	require.Eventually(t, func() bool { return rdb.XLen(ctx, c.prefix+"tickets").Val() == 10 },
		30*time.Second, 10*time.Millisecond, "the tickets wait in the stream")
	require.NoError(t, rdb.FlushDB(ctx).Err())
	worker = c.start("work")

	var after []int64
	for i := range 10 {
		after = append(after, john.post("after "+strconv.Itoa(i)).ID)
	}
	c.waitOutboxDrained(60 * time.Second)
	for _, id := range during {
		var attempts int
		require.NoError(t, c.pool.QueryRow(ctx,
			"SELECT attempts FROM outbox WHERE payload->>'post_id' = $1", strconv.FormatInt(id, 10)).Scan(&attempts))
		require.GreaterOrEqual(t, attempts, 2, "post %d's lost ticket was published again", id)
	}

	want := append(append(append(append([]int64{}, before...), racing...), during...), after...)
	parallel(len(followers), 8, func(i int) {
		got := serve.client(followers[i]).feed()
		ids := map[int64]int{}
		for _, p := range got {
			ids[p.ID]++
		}
		for _, id := range want {
			require.Equal(t, 1, ids[id], "post %d in follower %d's feed", id, followers[i])
		}
		require.Len(t, got, len(want))
	})
	// New posts keep flowing into the rebuilt feeds through the fan-out.
	last := john.post("last")
	require.Eventually(t, func() bool { return c.feedsHolding(followers, last.ID) == len(followers) },
		30*time.Second, 20*time.Millisecond)
	for _, p := range []*proc{serve, dispatcher, worker} {
		require.Equal(t, 0, p.stop())
	}
}

// TestSIGTERMWhileBusy: each role gets SIGTERM while busy, exits 0, is
// started again, and nothing is lost or doubled.
func TestSIGTERMWhileBusy(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_FANOUT_PAGE_SIZE=200", "NEWSFEED_SHUTDOWN_TIMEOUT=5s"))
	serve := c.start("serve")
	dispatcher := c.start("dispatch")
	worker := c.start("work")

	const author = 3
	followers := c.seedFollowers(author, 10_000, 5_000)
	c.markFeedsBuilt(followers)

	// A client that retries with its Idempotency-Key through restarts of serve.
	var addr atomic.Value
	addr.Store(serve.httpAddr)
	token := serve.client(author).token
	var ids []int64
	var mu sync.Mutex
	posting := make(chan struct{})
	go func() {
		defer close(posting)
		parallel(60, 3, func(i int) {
			key := "post-" + strconv.Itoa(i)
			for attempt := 0; ; attempt++ {
				cl := &client{t: t, base: "http://" + addr.Load().(string), token: token, http: &http.Client{Timeout: 10 * time.Second}}
				id, ok := cl.tryPost("busy "+strconv.Itoa(i), key)
				if ok {
					mu.Lock()
					ids = append(ids, id)
					mu.Unlock()
					return
				}
				require.Less(t, attempt, 200, "post %d never accepted", i)
				time.Sleep(50 * time.Millisecond)
			}
		})
	}()

	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 0, worker.stop(), "work exits 0 on SIGTERM mid fan-out")
	worker = c.start("work")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 0, dispatcher.stop(), "dispatch exits 0 on SIGTERM")
	dispatcher = c.start("dispatch")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 0, serve.stop(), "serve exits 0 on SIGTERM")
	serve = c.start("serve")
	addr.Store(serve.httpAddr)
	<-posting

	c.waitOutboxDrained(120 * time.Second)
	require.Len(t, ids, 60)
	var posts int
	require.NoError(t, c.pool.QueryRow(context.Background(), "SELECT count(*) FROM posts").Scan(&posts))
	require.Equal(t, 60, posts, "retries with an Idempotency-Key created nothing twice")
	for _, id := range ids {
		require.Equal(t, len(followers), c.feedsHolding(followers, id), "post %d", id)
	}
	for _, p := range []*proc{serve, dispatcher, worker} {
		require.Equal(t, 0, p.stop())
	}
}
