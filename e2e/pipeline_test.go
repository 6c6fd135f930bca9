package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAllInOne: `newsfeed all` serves the walk-through of the README, and a
// post of an author with 800 followers reaches every follower's feed, first
// and exactly once.
func TestAllInOne(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	all := c.start("all")

	const author = 1
	followers := c.seedFollowers(author, 1000, 800)
	// Readers have built feeds (they read before), so the fan-out writes them.
	parallel(len(followers), 16, func(i int) { all.client(followers[i]).firstPage(1) })

	john := all.client(author)
	created := time.Now()
	p := john.post("Good morning")

	// Watch the feeds in Redis to time the fan-out, then check each through the API.
	require.Eventually(t, func() bool { return c.feedsHolding(followers, p.ID) == len(followers) },
		30*time.Second, 10*time.Millisecond)
	t.Logf("post reached all %d followers' feeds %s after it was created (fan-out delivery)", len(followers), time.Since(created))

	parallel(len(followers), 16, func(i int) {
		items := all.client(followers[i]).feed()
		require.NotEmpty(t, items)
		require.Equal(t, p.ID, items[0].ID, "the post is first in follower %d's feed", followers[i])
		require.Len(t, items, 1, "exactly once in follower %d's feed", followers[i])
	})
	require.Equal(t, float64(len(followers)), all.metric("newsfeed_fanout_entries_total"))
	require.Equal(t, 0, all.stop(), "exit status after SIGTERM")
}

// TestSeparateRoles: serve, two dispatchers and two workers as separate
// processes deliver every post exactly once to every follower, with the
// queue in one stream and in 8 partitions.
func TestSeparateRoles(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int{1, 8} {
		t.Run(strconv.Itoa(partitions)+" partitions", func(t *testing.T) {
			t.Parallel()
			separateRoles(t, newCluster(t, withEnv("NEWSFEED_QUEUE_PARTITIONS="+strconv.Itoa(partitions))))
		})
	}
}

func separateRoles(t *testing.T, c *cluster) {
	serve := c.start("serve")
	d1, d2 := c.start("dispatch"), c.start("dispatch")
	w1, w2 := c.start("work", "--concurrency", "8"), c.start("work", "--concurrency", "8")

	// 10 authors; author a has followers 1000a .. 1000a+59; readers 50000–50059
	// (ids apart from every seeded follower) follow two authors each through the API.
	const authors, perAuthor = 10, 60
	follows := map[int64][]int64{} // follower -> authors
	for a := int64(1); a <= authors; a++ {
		for _, f := range c.seedFollowers(a, 1000*a, perAuthor) {
			follows[f] = append(follows[f], a)
		}
	}
	for r := int64(50000); r < 50060; r++ {
		cl := serve.client(r)
		for _, a := range []int64{r%authors + 1, (r+3)%authors + 1} {
			cl.follow(a)
			follows[r] = append(follows[r], a)
		}
	}
	readers := make([]int64, 0, len(follows))
	for f := range follows {
		readers = append(readers, f)
	}
	parallel(len(readers), 16, func(i int) { serve.client(readers[i]).firstPage(1) })
	c.waitOutboxDrained(30 * time.Second) // the follow events

	const postsPerAuthor = 20
	byAuthor := map[int64][]int64{}
	ids := make(chan [2]int64, authors*postsPerAuthor)
	parallel(authors*postsPerAuthor, 16, func(i int) {
		a := int64(i%authors + 1)
		p := serve.client(a).post("post " + strconv.Itoa(i))
		ids <- [2]int64{a, p.ID}
	})
	close(ids)
	for x := range ids {
		byAuthor[x[0]] = append(byAuthor[x[0]], x[1])
	}
	c.waitOutboxDrained(60 * time.Second)

	entries := 0
	parallel(len(readers), 16, func(i int) {
		r := readers[i]
		want := map[int64]bool{}
		for _, a := range follows[r] {
			for _, id := range byAuthor[a] {
				want[id] = true
			}
		}
		got := map[int64]int{}
		for _, p := range serve.client(r).feed() {
			got[p.ID]++
		}
		for id := range want {
			require.Equal(t, 1, got[id], "post %d in reader %d's feed", id, r)
		}
		require.Len(t, got, len(want), "reader %d has only their followees' posts", r)
	})
	for _, r := range readers {
		entries += len(follows[r]) * postsPerAuthor
	}
	// Exactly-once writes, counted where they happen: the workers' counters
	// add up to one entry per (post, follower), whatever was redelivered.
	written := w1.metric("newsfeed_fanout_entries_total") + w2.metric("newsfeed_fanout_entries_total")
	require.Equal(t, float64(entries), written)
	require.Positive(t, d1.metric("newsfeed_outbox_published_total")+d2.metric("newsfeed_outbox_published_total"))
	// The tickets spread over every partition (a ticket id names its own: "3/…").
	partitions, err := strconv.Atoi(c.envValue("NEWSFEED_QUEUE_PARTITIONS"))
	require.NoError(t, err)
	var used int
	require.NoError(t, c.pool.QueryRow(t.Context(), `
SELECT count(DISTINCT CASE WHEN ticket LIKE '%/%' THEN split_part(ticket, '/', 1) ELSE '0' END)
FROM outbox WHERE ticket IS NOT NULL`).Scan(&used))
	require.Equal(t, partitions, used, "partitions that carried tickets")

	for _, p := range []*proc{serve, d1, d2, w1, w2} {
		require.Equal(t, 0, p.stop(), "%s exits 0 on SIGTERM", p.role)
	}
}
