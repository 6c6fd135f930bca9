package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/newsfeed/newsfeed/feed"
	"github.com/stretchr/testify/require"
)

// TestCelebrityMergedAtReadTime: an author with more followers than
// fanout.celebrity_threshold is not fanned out; their posts are merged into
// feeds at read time, and a feed mixing them with normal authors pages
// without gaps or repeats, also across a celebrity post made between two
// page reads.
func TestCelebrityMergedAtReadTime(t *testing.T) {
	t.Parallel()
	c := newCluster(t, withEnv("NEWSFEED_FANOUT_CELEBRITY_THRESHOLD=20"))
	all := c.start("all")

	const star, friend, reader = 1, 2, 500
	c.seedFollowers(star, 1000, 50) // over the threshold
	alan := all.client(reader)
	alan.follow(star)
	alan.follow(friend)
	// The follows' events are handled before anyone posts (their backfill
	// would merge the star's posts into the feed, and the checks below are
	// about fan-out alone) and before Alan's first read: a follow event that
	// meets the feed under rebuild drops it, and fan-out would skip it.
	c.waitOutboxDrained(30 * time.Second)
	require.Empty(t, alan.feed()) // Alan has a feed: pushes reach it

	var want []int64
	for i := range 12 {
		author := []int64{star, friend}[i%3%2] // star, friend, star, star, friend, …
		want = append(want, all.client(author).post("post "+strconv.Itoa(i)).ID)
	}
	c.waitOutboxDrained(30 * time.Second)
	// The star's posts were never fanned out; the friend's were.
	require.Zero(t, c.feedsHolding([]int64{reader}, want[0]), "no fan-out for a celebrity")
	require.Equal(t, 1, c.feedsHolding([]int64{reader}, want[1]))

	// Page by 5; the star posts between the first and the second page.
	var got []int64
	var late post
	path := "/v1/feed?limit=5"
	for page := 0; ; page++ {
		status, body := alan.do("GET", path, nil)
		require.Equal(t, http.StatusOK, status, string(body))
		var p postPage
		require.NoError(t, json.Unmarshal(body, &p))
		for _, it := range p.Items {
			got = append(got, it.ID)
		}
		if page == 0 {
			late = all.client(star).post("between two pages")
			c.waitOutboxDrained(30 * time.Second)
			require.Greater(t, late.ID, want[len(want)-1])
		}
		if p.NextCursor == nil {
			break
		}
		path = "/v1/feed?limit=5&cursor=" + *p.NextCursor
	}
	require.Equal(t, reversed(want), got, "every post once, newest first")
	// The star's posts came from their timeline in Redis, kept by the workers.
	timeline, err := feed.InspectTimeline(context.Background(), c.redis(), c.prefix, int64(star))
	require.NoError(t, err)
	require.True(t, timeline.Complete && timeline.Whole, "complete, whole history")
	require.Len(t, timeline.IDs, 8+1, "8 + 1 posts")

	// A new read holds every post, the late one first; an unfollow hides the
	// star's posts at once and leaves the friend's.
	every := append(append([]int64{}, want...), late.ID)
	require.Equal(t, reversed(every), postIDs(alan.feed()), "the star's posts and the friend's, before the unfollow")
	var friends []int64
	for i, id := range want {
		if i%3%2 == 1 {
			friends = append(friends, id)
		}
	}
	status, body := alan.do("DELETE", "/v1/following/"+strconv.Itoa(star), nil)
	require.Equal(t, http.StatusNoContent, status, string(body))
	require.Equal(t, reversed(friends), postIDs(alan.feed()), "the friend's posts, all of them, and nothing of the star's")
	var count int64
	require.NoError(t, c.pool.QueryRow(context.Background(),
		"SELECT followers FROM follower_counts WHERE user_id = $1", star).Scan(&count))
	require.EqualValues(t, 50, count, "follower counts follow follows and unfollows")
}

func reversed(ids []int64) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[len(ids)-1-i] = id
	}
	return out
}

func postIDs(posts []post) []int64 {
	out := make([]int64, len(posts))
	for i, p := range posts {
		out[i] = p.ID
	}
	return out
}
