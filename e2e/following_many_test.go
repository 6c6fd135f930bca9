package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/feed"
)

// TestReaderWhoFollowsTenThousand: a reader who follows 10,000 authors —
// over fanout.following_threshold's default of 2,000 — costs the fan-out
// nothing (Redis keeps no feed for them, and no push counts an entry for
// them) and reads their exact feed, from PostgreSQL, page after page; a
// reader who follows a few of the same authors is fanned out to as ever.
func TestReaderWhoFollowsTenThousand(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	all := c.start("all")
	ctx := context.Background()

	const many, few, stranger = 50_000, 50_001, 60_000
	const authors = 10_000
	rows := make([][]any, authors)
	for i := range authors {
		rows[i] = []any{int64(many), int64(i + 1)}
	}
	_, err := c.pool.CopyFrom(ctx, pgx.Identifier{"follows"}, []string{"follower_id", "followee_id"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
	_, err = c.pool.Exec(ctx, `INSERT INTO follower_counts (user_id, followers)
		SELECT g, 1 FROM generate_series(1, $1::bigint) g
		ON CONFLICT (user_id) DO UPDATE SET followers = follower_counts.followers + 1`, authors)
	require.NoError(t, err)
	reader, other := all.client(many), all.client(few)
	for a := 1; a <= 5; a++ {
		other.follow(int64(a))
	}
	c.waitOutboxDrained(30 * time.Second)
	require.Empty(t, reader.feed())
	require.Empty(t, other.feed()) // a feed in Redis: pushes reach it

	// Posts by 40 of the 10,000 (the first 5 of them followed by the other
	// reader too), by somebody neither follows, and by the reader.
	var want, others []int64
	for i := range 40 {
		author := int64(1 + i*9973%authors)
		if i < 10 {
			author = int64(1 + i%5)
		}
		id := all.client(author).post("post " + strconv.Itoa(i)).ID
		want = append(want, id)
		if author <= 5 {
			others = append(others, id)
		}
	}
	all.client(stranger).post("nobody follows me")
	want = append(want, reader.post("my own").ID)
	c.waitOutboxDrained(60 * time.Second)

	// None of a feed's keys, nor the following hash beside it.
	keys := append(feed.StorageKeys(c.prefix, many), c.prefix+"follows:{"+strconv.Itoa(many)+"}")
	kept, err := c.redis().Exists(ctx, keys...).Result()
	require.NoError(t, err)
	require.Zero(t, kept, "Redis keeps no feed for a reader who follows 10,000")
	for _, id := range want {
		require.Zero(t, c.feedsHolding([]int64{many}, id), "post %d pushed to them", id)
	}
	require.Equal(t, float64(len(others)), all.metric("newsfeed_fanout_entries_total"),
		"the fan-out wrote the other reader's entries and none of theirs")
	require.Equal(t, reversed(others), postIDs(other.feed()))

	// Their feed, exact, page by page.
	start := time.Now()
	var got []int64
	path := "/v1/feed?limit=7"
	for {
		status, body := reader.do("GET", path, nil)
		require.Equal(t, http.StatusOK, status, string(body))
		var p postPage
		require.NoError(t, json.Unmarshal(body, &p))
		got = append(got, postIDs(p.Items)...)
		if p.NextCursor == nil {
			break
		}
		path = "/v1/feed?limit=7&cursor=" + *p.NextCursor
	}
	t.Logf("%d pages of their feed read in %s", (len(got)+6)/7, time.Since(start))
	require.Equal(t, reversed(want), got, "every post of theirs and of the people they follow, once, newest first")

	// A post made now is in their next read.
	late := all.client(authors).post("just now").ID
	require.Equal(t, late, reader.firstPage(1)[0].ID)
}
