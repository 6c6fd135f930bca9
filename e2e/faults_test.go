package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/queue"
	"github.com/stretchr/testify/require"
)

// A kill of a worker lands, for each outbox row it was working on (a post's
// fan-out, or one chunk of it), in one of these windows — told apart after
// the kill from what the dead worker left: the feeds, the row, and the
// stream's pending list.
const (
	notStarted        = iota // no follower's feed holds the post yet
	midPush                  // some but not all of the row's followers' feeds hold the post
	pushedNotFinished        // every feed holds the post; the outbox row is not done
	finishedNotAcked         // the row is done; its ticket is still pending (XPENDING), unacknowledged
	complete                 // done and acknowledged
	numWindows
)

var windowNames = [numWindows]string{"not started", "mid-push", "pushed, not finished", "finished, not acknowledged", "complete"}

// fanoutRow is one outbox row of fan-out work: the post and the followers it covers.
type fanoutRow struct {
	id        int64
	post      int64
	followers []int64
}

// classify tells, for each row, which window the state left by a dead worker
// is in, and returns the count per window and the feed entries written. It
// fails the test on a state no window allows (a row done before every feed
// held its post).
func (c *cluster) classify(rows []fanoutRow) (counts [numWindows]int, written int) {
	c.t.Helper()
	pending := c.pendingOutboxIDs()
	for _, r := range rows {
		held := c.feedsHolding(r.followers, r.post)
		written += held
		status := c.outboxStatus(r.id)
		require.NotEqual(c.t, "dead", status, "outbox row %d", r.id)
		done := status == "done"
		switch {
		case done && held < len(r.followers):
			c.t.Fatalf("outbox row %d is done with %d of %d feeds holding post %d", r.id, held, len(r.followers), r.post)
		case done && pending[r.id]:
			counts[finishedNotAcked]++
		case done:
			counts[complete]++
		case len(r.followers) == 0: // an empty chunk: nothing to tell
		case held == 0:
			counts[notStarted]++
		case held < len(r.followers):
			counts[midPush]++
		default:
			counts[pushedNotFinished]++
		}
	}
	return counts, written
}

// TestWorkerKilledAtRandomPoints: a worker is killed with SIGKILL at a random
// point (seeded) of a fan-out — many posts at once, each one ticket, or one
// post split into 40 chunks that run side by side — and a new worker finishes
// the work: every follower ends with every post exactly once. Each kill is
// placed from the state the dead worker left, and the test goes on until
// kills have landed in every window: mid-push, between the last push and the
// outbox finish, and between the finish and the acknowledgement.
func TestWorkerKilledAtRandomPoints(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name             string
		chunkSize        int
		followers, posts int // per kill
		partitions       int
	}{
		{name: "whole", chunkSize: 100_000, followers: 300, posts: 24, partitions: 1},
		{name: "chunked", chunkSize: 150, followers: 6000, posts: 1, partitions: 1},
		// The tickets spread over partitions: the dead worker's are taken
		// over from each.
		{name: "whole, 8 partitions", chunkSize: 100_000, followers: 300, posts: 24, partitions: 8},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			rng := testRand(t)
			c := newCluster(t, withEnv(
				"NEWSFEED_FANOUT_PAGE_SIZE=50", // several pages per row: a push to interrupt
				"NEWSFEED_FANOUT_CHUNK_SIZE="+strconv.Itoa(v.chunkSize),
				"NEWSFEED_FANOUT_CELEBRITY_THRESHOLD=1000000", // fanned out, not pulled
				"NEWSFEED_QUEUE_CLAIM_IDLE=1h",                // no ticket of a live worker's looks stale (ageHeldTickets)
				"NEWSFEED_OUTBOX_REDELIVER_AFTER=10m",         // and never published twice: one ticket per row
				"NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=0",
				"NEWSFEED_QUEUE_PARTITIONS="+strconv.Itoa(v.partitions),
			))
			serve := c.start("serve")
			c.start("dispatch")
			const author = 7
			followers := c.seedFollowers(author, 100_000, v.followers)
			c.markFeedsBuilt(followers)
			john := serve.client(author)

			const minKills, maxKills = 3, 12
			var hits [numWindows]int
			var all []int64
			everyWindowHit := func() bool { return hits[midPush] > 0 && hits[pushedNotFinished] > 0 && hits[finishedNotAcked] > 0 }
			for kill := 0; kill < minKills || (kill < maxKills && !everyWindowHit()); kill++ {
				// The posts wait in the queue while no worker runs, so the
				// worker takes them (or the post's chunks) all at once.
				ids := make([]int64, v.posts)
				parallel(v.posts, 4, func(i int) { ids[i] = john.post(fmt.Sprintf("kill %d post %d", kill, i)).ID })
				all = append(all, ids...)
				require.Eventually(t, func() bool {
					var waiting int
					require.NoError(t, c.pool.QueryRow(context.Background(),
						"SELECT count(*) FROM outbox WHERE status IN ('pending', 'publishing')").Scan(&waiting))
					return waiting == 0
				}, 30*time.Second, 10*time.Millisecond, "the posts' tickets are in the queue")

				// The kill point, watched tightly: as soon as a random
				// follower's feed holds a random one of the posts, or the last
				// follower of a random row (near the end of its push), or a
				// random row is done (near its acknowledgement).
				total := v.posts * v.followers
				atPost := ids[rng.IntN(len(ids))]
				rowSize := min(v.chunkSize, v.followers)
				atRow := rng.IntN(v.followers / rowSize) // its chunk_no - 1 when chunked
				var point string
				var reached func() bool
				switch rng.IntN(3) {
				case 0, 1:
					atFollower := followers[rng.IntN(len(followers))]
					if rng.IntN(2) == 0 {
						atFollower = followers[(atRow+1)*rowSize-1]
					}
					point = fmt.Sprintf("follower %d held post %d", atFollower, atPost)
					rdb, follower, post := c.redis(), atFollower, atPost
					reached = func() bool {
						stored, err := feed.Inspect(context.Background(), rdb, c.prefix, follower)
						require.NoError(t, err)
						return stored.Has(post)
					}
				default:
					point = fmt.Sprintf("row %d of post %d was done", atRow+1, atPost)
					query := "SELECT count(*) FROM outbox WHERE event_type = 'post.created' AND status = 'done' AND (payload->>'post_id')::bigint = $1 AND $2 >= 0"
					if v.chunkSize < v.followers {
						query = "SELECT count(*) FROM outbox WHERE event_type = 'fanout.chunk' AND status = 'done' AND (payload->>'post_id')::bigint = $1 AND chunk_no = $2 + 1"
					}
					reached = func() bool {
						var done int
						require.NoError(t, c.pool.QueryRow(context.Background(), query, atPost, atRow).Scan(&done))
						return done > 0
					}
				}
				victim := c.startNamed("work")
				deadline := time.Now().Add(60 * time.Second)
				for !reached() {
					require.True(t, time.Now().Before(deadline), "%s within 60s", point)
				}
				victim.kill()
				c.waitDisconnected(victim)

				var rows []fanoutRow
				if v.chunkSize >= v.followers {
					for _, id := range ids {
						row := c.queryInts("SELECT id FROM outbox WHERE event_type = 'post.created' AND (payload->>'post_id')::bigint = $1", id)
						require.Len(t, row, 1)
						rows = append(rows, fanoutRow{id: row[0], post: id, followers: followers})
					}
				} else {
					rows = c.chunkRows(ids[0], followers)
					require.Len(t, rows, v.followers/v.chunkSize+1, "the post split into its chunks (and the empty rest)")
				}
				counts, written := c.classify(rows)
				for w := range numWindows {
					hits[w] += counts[w]
				}
				var parts []string
				for w, n := range counts {
					if n > 0 {
						parts = append(parts, fmt.Sprintf("%s %d", windowNames[w], n))
					}
				}
				t.Logf("kill %d once %s: %d of %d entries written; rows: %s", kill, point, written, total, strings.Join(parts, ", "))

				// The dead worker's tickets look stale at once: the new
				// worker takes them over as it starts, and nothing else.
				c.ageHeldTickets(v.partitions, 2*time.Hour)
				w := c.start("work")
				c.waitOutboxDrained(60 * time.Second)
				for _, id := range ids {
					require.Equal(t, len(followers), c.feedsHolding(followers, id), "post %d", id)
				}
				require.Equal(t, float64(total-written), w.metric("newsfeed_fanout_entries_total"),
					"the new worker wrote exactly the entries the dead one had not")
				require.Equal(t, 0, w.stop())
			}
			t.Logf("rows per window over the kills: mid-push %d, pushed not finished %d, finished not acknowledged %d",
				hits[midPush], hits[pushedNotFinished], hits[finishedNotAcked])
			require.True(t, everyWindowHit(), "within %d kills, kills landed in every window: %v", maxKills, hits)

			// Through the API, once each, newest first.
			slices.Sort(all)
			for _, f := range []int64{followers[0], followers[len(followers)/2], followers[len(followers)-1]} {
				require.Equal(t, reversed(all), postIDs(serve.client(f).feed()), "follower %d", f)
			}
			if v.chunkSize < v.followers {
				var open int
				require.NoError(t, c.pool.QueryRow(context.Background(),
					"SELECT count(*) FROM outbox WHERE status <> 'done'").Scan(&open))
				require.Zero(t, open, "every chunk and every parent is done")
			}
		})
	}
}

// ageHeldTickets makes every ticket that a worker holds, in every partition
// of the cluster's queue, look idle for idle (testenv.AgePending): a worker
// of a shorter queue.claim_idle takes them over when it starts, while its
// own tickets stay far from stale however slow the machine is (one that
// took over its own ticket mid-fan-out would push the post twice at once,
// and a first delivery's push, which appends without looking, could count
// entries the other had written).
func (c *cluster) ageHeldTickets(partitions int, idle time.Duration) {
	c.t.Helper()
	rdb := c.redis()
	q, err := queue.NewPartitioned(rdb, queue.Config{Stream: c.prefix + "tickets", Group: "fanout", Partitions: partitions})
	require.NoError(c.t, err)
	for p := range partitions {
		testenv.AgePending(c.t, rdb, q.Key(p), "fanout", idle)
	}
}

// chunkRows returns the fan-out chunks of a post with the followers each
// covers (followers ascending).
func (c *cluster) chunkRows(postID int64, followers []int64) []fanoutRow {
	c.t.Helper()
	rows, err := c.pool.Query(context.Background(), `
SELECT id, (payload->>'after')::bigint, COALESCE((payload->>'until')::bigint, 0) FROM outbox
WHERE event_type = 'fanout.chunk' AND (payload->>'post_id')::bigint = $1 ORDER BY chunk_no`, postID)
	require.NoError(c.t, err)
	defer rows.Close()
	var out []fanoutRow
	for rows.Next() {
		var id, after, until int64
		require.NoError(c.t, rows.Scan(&id, &after, &until))
		r := fanoutRow{id: id, post: postID}
		for _, f := range followers {
			if f > after && (until == 0 || f <= until) {
				r.followers = append(r.followers, f)
			}
		}
		out = append(out, r)
	}
	require.NoError(c.t, rows.Err())
	return out
}

// TestDispatcherKilledMidClaim: the dispatcher is killed with SIGKILL at
// random points (seeded) of bursts of posts, some of them while it holds a
// claim (rows 'publishing'), until a kill left claimed rows behind and
// another dispatcher took them over when the lease ran out (attempts 2).
// Every post reaches every follower exactly once.
func TestDispatcherKilledMidClaim(t *testing.T) {
	t.Parallel()
	rng := testRand(t)
	c := newCluster(t, withEnv("NEWSFEED_OUTBOX_LEASE=1s", "NEWSFEED_OUTBOX_BATCH_SIZE=20", "NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=0"))
	serve := c.start("serve")
	c.start("work", "--concurrency", "16")
	dispatcher := c.startNamed("dispatch")
	ctx := context.Background()

	const authors, perAuthor, burst = 3, 30, 45
	var followers []int64
	for a := int64(1); a <= authors; a++ {
		followers = append(followers, c.seedFollowers(a, 1000*a, perAuthor)...)
	}
	c.markFeedsBuilt(followers)

	// Posters take one post each from tokens: the test releases a burst
	// before each kill, so that the kill lands while posts come in.
	tokens := make(chan int, 20*burst)
	var created atomic.Int32
	byAuthor := make([][]int64, authors+1)
	var mu sync.Mutex
	var posters sync.WaitGroup
	for range 4 {
		posters.Go(func() {
			for i := range tokens {
				a := int64(i%authors + 1)
				p := serve.client(a).post("post " + strconv.Itoa(i))
				mu.Lock()
				byAuthor[a] = append(byAuthor[a], p.ID)
				mu.Unlock()
				created.Add(1)
			}
		})
	}

	interrupted := map[int64]bool{} // rows a kill left claimed
	released, takenOver := 0, false
	// A kill often lands after the claim's tickets went out, and workers then
	// finish the rows before any lease runs out: no takeover to see. Under
	// load (and on a Redis Cluster, where a publication takes two round
	// trips) that is most kills, so the test tries up to maxKills times.
	const minKills, maxKills = 3, 30
	kills := 0
	for ; kills < minKills || (kills < maxKills && !takenOver); kills++ {
		for range burst {
			tokens <- released
			released++
		}
		// A random point of the burst: after some posts, and then at once or
		// at the next claim seen in progress.
		after := int32(released - burst + 1 + rng.IntN(burst/2))
		targeted := rng.IntN(3) > 0
		require.Eventually(t, func() bool { return created.Load() >= after }, 30*time.Second, time.Millisecond)
		if targeted {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				var claimed bool
				require.NoError(t, c.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM outbox WHERE status = 'publishing')").Scan(&claimed))
				if claimed {
					break
				}
			}
		}
		dispatcher.kill()
		c.waitDisconnected(dispatcher)
		left := c.queryInts("SELECT id FROM outbox WHERE status = 'publishing' ORDER BY id")
		t.Logf("kill %d (targeted %v) after %d posts: %d claimed rows left %v", kills+1, targeted, created.Load(), len(left), left)
		for _, id := range left {
			interrupted[id] = true
		}
		dispatcher = c.startNamed("dispatch")
		if len(left) == 0 {
			continue
		}
		// The lease runs out and the new dispatcher claims the rows again
		// (unless a worker finished one whose ticket went out before the kill).
		require.Eventually(t, func() bool {
			var still int
			require.NoError(t, c.pool.QueryRow(ctx,
				"SELECT count(*) FROM outbox WHERE id = ANY($1) AND status = 'publishing' AND attempts < 2", left).Scan(&still))
			return still == 0
		}, 30*time.Second, 10*time.Millisecond)
		takenOver = len(c.queryInts("SELECT id FROM outbox WHERE id = ANY($1) AND attempts >= 2", left)) > 0
	}
	close(tokens)
	posters.Wait()
	require.True(t, takenOver, "within %d kills, one left a claim that another dispatcher took over", maxKills)
	c.waitOutboxDrained(60 * time.Second)
	for _, id := range c.queryInts("SELECT id FROM outbox WHERE attempts >= 2") {
		require.True(t, interrupted[id], "row %d was claimed twice without a kill interrupting its claim", id)
	}

	for a := int64(1); a <= authors; a++ {
		require.Len(t, byAuthor[a], released/authors)
		for _, id := range byAuthor[a] {
			require.Equal(t, perAuthor, c.feedsHolding(followers[(a-1)*perAuthor:a*perAuthor], id), "post %d", id)
		}
	}
	for _, f := range []int64{1000, 2015, 3029} { // through the API: every post once, nothing else
		items := serve.client(f).feed()
		require.Len(t, items, released/authors)
		seen := map[int64]bool{}
		for _, it := range items {
			require.False(t, seen[it.ID], "post %d twice", it.ID)
			seen[it.ID] = true
		}
	}
}

// TestServeKilledDuringBurst: serve is killed with SIGKILL at random points
// (seeded) of bursts of posts by clients that retry with their
// Idempotency-Key until they get 201 or 200, until a kill came between a
// post's commit and its answer (the retry got 200 and the first post).
// Every acknowledged post is delivered to every follower exactly once, and
// no post exists twice.
func TestServeKilledDuringBurst(t *testing.T) {
	t.Parallel()
	rng := testRand(t)
	c := newCluster(t, withEnv("NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=0"))
	serve := c.start("serve")
	c.start("dispatch")
	c.start("work")
	ctx := context.Background()

	const authors, perAuthor, burst, minKills, maxKills = 2, 40, 60, 3, 8
	var followers []int64
	for a := int64(1); a <= authors; a++ {
		followers = append(followers, c.seedFollowers(a, 1000*a, perAuthor)...)
	}
	c.markFeedsBuilt(followers)

	var addr atomic.Value
	addr.Store(serve.httpAddr)
	tokensOf := make([]string, authors+1)
	for a := int64(1); a <= authors; a++ {
		tokensOf[a] = serve.client(a).token
	}
	tokens := make(chan int, (maxKills+1)*burst)
	var acked, failed, repeats atomic.Int32
	ids := map[int]int64{} // post number -> acknowledged id
	var mu sync.Mutex
	var posters sync.WaitGroup
	for range 8 {
		posters.Go(func() {
			for i := range tokens {
				a := i%authors + 1
				key := "burst-" + strconv.Itoa(i)
				deadline := time.Now().Add(60 * time.Second)
				for {
					cl := &client{t: t, base: "http://" + addr.Load().(string), token: tokensOf[a], http: &http.Client{Timeout: 10 * time.Second}}
					status, id, ok := cl.tryPostStatus("burst post "+strconv.Itoa(i), key)
					if ok {
						mu.Lock()
						ids[i] = id
						mu.Unlock()
						acked.Add(1)
						if status == http.StatusOK {
							repeats.Add(1)
						}
						break
					}
					failed.Add(1)
					if time.Now().After(deadline) {
						t.Errorf("post %d not accepted within 60s", i)
						return
					}
					time.Sleep(10 * time.Millisecond) // the client's back-off
				}
			}
		})
	}

	released := 0
	for kill := 1; kill <= minKills || (kill <= maxKills && repeats.Load() == 0); kill++ {
		for range burst {
			tokens <- released
			released++
		}
		after := int32(released - burst + 1 + rng.IntN(burst/2))
		require.Eventually(t, func() bool { return acked.Load() >= after }, 60*time.Second, time.Millisecond)
		serve.kill()
		t.Logf("serve killed after %d of %d posts acknowledged (%d repeats answered so far)", acked.Load(), released, repeats.Load())
		serve = c.start("serve")
		addr.Store(serve.httpAddr)
	}
	for range burst {
		tokens <- released
		released++
	}
	close(tokens)
	posters.Wait()
	t.Logf("%d posts, %d failed attempts retried, %d retries answered 200 with the first post", released, failed.Load(), repeats.Load())
	require.Positive(t, failed.Load(), "the kills cut requests")
	require.Positive(t, repeats.Load(), "within %d kills, one came between a commit and its answer", maxKills)
	c.waitOutboxDrained(60 * time.Second)

	// No post exists twice, and each is the one its client was given.
	rows, err := c.pool.Query(ctx, "SELECT id, author_id, body FROM posts")
	require.NoError(t, err)
	defer rows.Close() // also when a check below fails: the pool closes only with its connections back
	byBody := map[string]int64{}
	for rows.Next() {
		var id, author int64
		var body string
		require.NoError(t, rows.Scan(&id, &author, &body))
		_, twice := byBody[body]
		require.False(t, twice, "%q exists twice", body)
		byBody[body] = id
	}
	require.NoError(t, rows.Err())
	require.Len(t, byBody, released, "one post per acknowledged request, nothing else")
	require.Len(t, ids, released)
	for i, id := range ids {
		require.Equal(t, byBody["burst post "+strconv.Itoa(i)], id, "post %d", i)
		a := i%authors + 1
		require.Equal(t, perAuthor, c.feedsHolding(followers[(a-1)*perAuthor:a*perAuthor], id), "post %d", id)
	}
	for _, f := range []int64{1000, 1039, 2000, 2039} { // through the API: every post of the author once, nothing else
		want := map[int64]bool{}
		for i, id := range ids {
			if int64(i%authors+1) == f/1000 {
				want[id] = true
			}
		}
		got := map[int64]bool{}
		for _, it := range serve.client(f).feed() {
			require.False(t, got[it.ID], "post %d twice in follower %d's feed", it.ID, f)
			got[it.ID] = true
		}
		require.Equal(t, want, got, "follower %d", f)
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
	var created atomic.Int32
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for created.Load() < 10 { // once a third of them are in
			time.Sleep(time.Millisecond)
		}
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			t.Errorf("FLUSHDB: %v", err)
		}
	}()
	for i := range 30 {
		racing = append(racing, john.post("racing "+strconv.Itoa(i)).ID)
		created.Add(1)
		time.Sleep(2 * time.Millisecond) // the posts keep coming, spread out
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

// TestSIGTERMWhileBusy: each role gets SIGTERM while busy — the worker in
// the middle of fan-outs, the dispatcher while it publishes a burst, serve
// while clients post — exits 0, is started again, and nothing is lost or
// doubled.
func TestSIGTERMWhileBusy(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_FANOUT_PAGE_SIZE=200", "NEWSFEED_SHUTDOWN_TIMEOUT=5s",
		"NEWSFEED_RATELIMIT_POSTS_PER_MINUTE=0"))
	serve := c.start("serve")
	dispatcher := c.start("dispatch")
	worker := c.start("work")
	ctx := context.Background()

	const author, burst = 3, 15
	followers := c.seedFollowers(author, 10_000, 5_000)
	c.markFeedsBuilt(followers)

	// Clients that retry with their Idempotency-Key through restarts of
	// serve; they post a burst each time the test releases one.
	var addr atomic.Value
	addr.Store(serve.httpAddr)
	token := serve.client(author).token
	tokens := make(chan int, 4*burst)
	var ids []int64
	var acked atomic.Int32
	var mu sync.Mutex
	var posters sync.WaitGroup
	for range 3 {
		posters.Go(func() {
			for i := range tokens {
				key := "post-" + strconv.Itoa(i)
				for attempt := 0; ; attempt++ {
					cl := &client{t: t, base: "http://" + addr.Load().(string), token: token, http: &http.Client{Timeout: 10 * time.Second}}
					if id, ok := cl.tryPost("busy "+strconv.Itoa(i), key); ok {
						mu.Lock()
						ids = append(ids, id)
						mu.Unlock()
						acked.Add(1)
						break
					}
					if attempt == 200 {
						t.Errorf("post %d never accepted", i)
						return
					}
					time.Sleep(50 * time.Millisecond) // the client's back-off
				}
			}
		})
	}
	released := 0
	release := func() {
		for range burst {
			tokens <- released
			released++
		}
	}
	openPosts := func() int {
		var open int
		require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM outbox
			WHERE event_type = 'post.created' AND status IN ('pending', 'publishing', 'published')`).Scan(&open))
		return open
	}

	// The worker: once it has written entries and fan-outs are unfinished.
	release()
	require.Eventually(t, func() bool {
		return worker.metric("newsfeed_fanout_entries_total") > 0 && openPosts() > 0
	}, 60*time.Second, 5*time.Millisecond, "the worker is in the middle of fan-outs")
	require.Equal(t, 0, worker.stop(), "work exits 0 on SIGTERM mid fan-out")
	worker = c.start("work")

	// The dispatcher: once it has published some of a new burst.
	published := dispatcher.metric("newsfeed_outbox_published_total")
	release()
	require.Eventually(t, func() bool { return dispatcher.metric("newsfeed_outbox_published_total") > published },
		60*time.Second, 5*time.Millisecond, "the dispatcher publishes the burst")
	t.Logf("dispatcher stopped with %d of %d posts acknowledged", acked.Load(), released)
	require.Equal(t, 0, dispatcher.stop(), "dispatch exits 0 on SIGTERM")
	dispatcher = c.start("dispatch")

	// serve: once clients got answers to a new burst.
	before := acked.Load()
	release()
	require.Eventually(t, func() bool { return acked.Load() > before }, 60*time.Second, time.Millisecond,
		"serve answers the burst")
	t.Logf("serve stopped with %d of %d posts acknowledged", acked.Load(), released)
	require.Equal(t, 0, serve.stop(), "serve exits 0 on SIGTERM")
	serve = c.start("serve")
	addr.Store(serve.httpAddr)
	release()
	close(tokens)
	posters.Wait()

	c.waitOutboxDrained(120 * time.Second)
	require.Len(t, ids, released)
	var posts int
	require.NoError(t, c.pool.QueryRow(ctx, "SELECT count(*) FROM posts").Scan(&posts))
	require.Equal(t, released, posts, "retries with an Idempotency-Key created nothing twice")
	for _, id := range ids {
		require.Equal(t, len(followers), c.feedsHolding(followers, id), "post %d", id)
	}
	for _, p := range []*proc{serve, dispatcher, worker} {
		require.Equal(t, 0, p.stop())
	}
}
