package api_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
)

// The fan-out worker does not run in these tests: a followee's post reaches a
// feed through the follow backfill, or through the rebuild of a feed that
// Redis does not have (never read, or lost).

// readFeed reads every page of user's feed with the given limit and requires
// newest first with no duplicates.
func readFeed(t *testing.T, b *testBundle, user int64, limit int) []int64 {
	t.Helper()
	pages := allPages[apiPost](t, b, user, "/v1/feed?limit="+strconv.Itoa(limit))
	for i, p := range pages {
		if i < len(pages)-1 {
			require.Len(t, p, limit, "only the last page is short")
		}
	}
	ids := postIDs(flatten(pages))
	requireNewestFirst(t, ids)
	return ids
}

func requireNewestFirst(t *testing.T, ids []int64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		require.Greater(t, ids[i-1], ids[i], "newest first by id, no duplicates: %v", ids)
	}
}

// merged returns the ids of the posts of every list, newest first.
func merged(lists ...[]apiPost) []int64 {
	var ids []int64
	for _, l := range lists {
		ids = append(ids, postIDs(l)...)
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func TestFeedEmpty(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.createPosts(t, 2, 2) // somebody else's posts, not followed

	for range 2 { // the first read builds the feed, the second reads it
		res := b.get(t, 1, "/v1/feed")
		require.Equal(t, http.StatusOK, res.status, "body: %s", res.body)
		requireJSON(t, res)
		require.JSONEq(t, `{"items": [], "next_cursor": null}`, string(res.body))
	}
}

func TestFeedAfterFollow(t *testing.T) {
	t.Parallel()

	t.Run("a feed never read is built from PostgreSQL", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 3)
		b.follow(t, 2, 1)

		p := page[apiPost](t, b, 2, "/v1/feed")
		require.Equal(t, newestFirst(posts), postIDs(p.Items))
		require.Nil(t, p.NextCursor)
		for i, item := range p.Items {
			require.Equal(t, posts[len(posts)-1-i], item, "feed items are whole posts")
		}
	})

	t.Run("a feed already read gets the followee's recent posts", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// The feed holds an older post of user 3, so that a read of it
		// cannot find user 1's newer posts in PostgreSQL past its end.
		old := b.createPosts(t, 3, 1)
		b.follow(t, 2, 3)
		require.Equal(t, postIDs(old), readFeed(t, b, 2, 20))
		posts := b.createPosts(t, 1, 3)

		b.follow(t, 2, 1)
		require.Equal(t, merged(old, posts), readFeed(t, b, 2, 20))
		require.Equal(t, merged(old, posts), readFeed(t, b, 2, 1))
	})

	t.Run("posts past the backfill are paged from PostgreSQL", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 60) // backfill is 50
		require.Empty(t, readFeed(t, b, 2, 20))

		b.follow(t, 2, 1)
		require.Equal(t, newestFirst(posts), readFeed(t, b, 2, 100))
		require.Equal(t, newestFirst(posts), readFeed(t, b, 2, 7))
	})

	t.Run("a second followee with many posts leaves no gap", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// User 2 follows 1 and reads: the feed holds 1's posts.
		old := b.createPosts(t, 1, 3)
		b.follow(t, 2, 1)
		require.Equal(t, newestFirst(old), readFeed(t, b, 2, 20))
		// Then follows 3, who has more posts than the backfill, all newer.
		newer := b.createPosts(t, 3, 60)
		b.follow(t, 2, 3)

		require.Equal(t, merged(old, newer), readFeed(t, b, 2, 100),
			"every post of the people the caller follows, none skipped")
	})

	t.Run("several followees are merged newest first", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		var a, c []apiPost
		for i := range 4 { // interleaved ids
			a = append(a, b.createPost(t, 1, "a"+strconv.Itoa(i)))
			c = append(c, b.createPost(t, 3, "c"+strconv.Itoa(i)))
		}
		b.createPosts(t, 4, 2)        // not followed
		own := b.createPosts(t, 2, 2) // the reader's own: in their feed
		b.follow(t, 2, 1)
		b.follow(t, 2, 3)

		require.Equal(t, merged(a, c, own), readFeed(t, b, 2, 3))
	})

	t.Run("following again adds no duplicates", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 4)
		b.follow(t, 2, 1)
		require.Equal(t, newestFirst(posts), readFeed(t, b, 2, 20))
		b.follow(t, 2, 1)
		b.unfollow(t, 2, 1)
		b.follow(t, 2, 1)
		require.Equal(t, newestFirst(posts), readFeed(t, b, 2, 20))
		require.Equal(t, newestFirst(posts), readFeed(t, b, 2, 3))
	})
}

func TestFeedAfterUnfollow(t *testing.T) {
	t.Parallel()

	t.Run("of a feed already read", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		gone := b.createPosts(t, 1, 3)
		kept := b.createPosts(t, 3, 2)
		b.follow(t, 2, 1)
		b.follow(t, 2, 3)
		require.Equal(t, merged(gone, kept), readFeed(t, b, 2, 20))

		b.unfollow(t, 2, 1)
		require.Equal(t, merged(kept), readFeed(t, b, 2, 20))
		require.Equal(t, merged(kept), readFeed(t, b, 2, 1))
	})

	t.Run("of a feed never read", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.createPosts(t, 1, 3)
		kept := b.createPosts(t, 3, 2)
		b.follow(t, 2, 1)
		b.follow(t, 2, 3)
		b.unfollow(t, 2, 1)

		require.Equal(t, merged(kept), readFeed(t, b, 2, 20))
	})

	t.Run("of the only followee", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.createPosts(t, 1, 60) // more than the backfill
		b.follow(t, 2, 1)
		require.Len(t, readFeed(t, b, 2, 100), 60)

		b.unfollow(t, 2, 1)
		res := b.get(t, 2, "/v1/feed")
		require.Equal(t, http.StatusOK, res.status)
		require.JSONEq(t, `{"items": [], "next_cursor": null}`, string(res.body))
	})
}

func TestFeedAfterDelete(t *testing.T) {
	t.Parallel()

	t.Run("a deleted post leaves the next read", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 5)
		b.follow(t, 2, 1)
		b.follow(t, 3, 1)
		require.Equal(t, newestFirst(posts), readFeed(t, b, 2, 20)) // built and cached

		require.Equal(t, http.StatusNoContent, b.del(t, 1, postPath(posts[2].ID)).status)
		require.Equal(t, http.StatusNoContent, b.del(t, 1, postPath(posts[4].ID)).status) // the newest

		want := []int64{posts[3].ID, posts[1].ID, posts[0].ID}
		require.Equal(t, want, readFeed(t, b, 2, 20))
		for _, limit := range []int{1, 2, 3} {
			require.Equal(t, want, readFeed(t, b, 2, limit), "limit %d", limit)
		}
		require.Equal(t, want, readFeed(t, b, 3, 2), "a feed built after the delete")
	})

	t.Run("a post deleted between page reads", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 5)
		b.follow(t, 2, 1)

		p1 := page[apiPost](t, b, 2, "/v1/feed?limit=2")
		require.Equal(t, newestFirst(posts)[:2], postIDs(p1.Items))
		require.Equal(t, http.StatusNoContent, b.del(t, 1, postPath(posts[2].ID)).status)
		p2 := page[apiPost](t, b, 2, "/v1/feed?limit=2&cursor="+*p1.NextCursor)
		require.Equal(t, []int64{posts[1].ID, posts[0].ID}, postIDs(p2.Items))
	})
}

func TestFeedPaging(t *testing.T) {
	t.Parallel()

	t.Run("limit 2 over 5 posts, with new posts between reads", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 5)
		b.follow(t, 2, 1)
		want := newestFirst(posts)
		// What the fan-out worker would do with a new post of user 1.
		fanOut := func(p apiPost) {
			t.Helper()
			n, err := pushCount(b.feeds.Push(context.Background(), domain.Entry{PostID: p.ID, AuthorID: 1}, []int64{2}, 0, true))
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}

		p1 := page[apiPost](t, b, 2, "/v1/feed?limit=2")
		require.Equal(t, want[:2], postIDs(p1.Items))
		require.NotNil(t, p1.NextCursor)
		new1 := b.createPost(t, 1, "while paging 1")
		fanOut(new1)
		p2 := page[apiPost](t, b, 2, "/v1/feed?limit=2&cursor="+*p1.NextCursor)
		require.Equal(t, want[2:4], postIDs(p2.Items))
		require.NotNil(t, p2.NextCursor)
		new2 := b.createPost(t, 1, "while paging 2")
		fanOut(new2)
		p3 := page[apiPost](t, b, 2, "/v1/feed?limit=2&cursor="+*p2.NextCursor)
		require.Equal(t, want[4:], postIDs(p3.Items))
		require.Nil(t, p3.NextCursor)

		// A new first page starts with them.
		require.Equal(t, append([]int64{new2.ID, new1.ID}, want...), readFeed(t, b, 2, 2))
	})

	t.Run("a cursor survives the feed being lost and rebuilt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 5)
		b.follow(t, 2, 1)
		want := newestFirst(posts)

		p1 := page[apiPost](t, b, 2, "/v1/feed?limit=2")
		require.Equal(t, want[:2], postIDs(p1.Items))
		b.createPost(t, 1, "while paging") // the rebuild will see it
		require.NoError(t, b.feeds.Drop(context.Background(), 2))
		p2 := page[apiPost](t, b, 2, "/v1/feed?limit=2&cursor="+*p1.NextCursor)
		require.Equal(t, want[2:4], postIDs(p2.Items))
		p3 := page[apiPost](t, b, 2, "/v1/feed?limit=2&cursor="+*p2.NextCursor)
		require.Equal(t, want[4:], postIDs(p3.Items))
		require.Nil(t, p3.NextCursor)
	})

	t.Run("an exact last page has next_cursor null", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 4)
		b.follow(t, 2, 1)
		pages := allPages[apiPost](t, b, 2, "/v1/feed?limit=2")
		require.Len(t, pages, 2)
		require.Equal(t, newestFirst(posts), postIDs(flatten(pages)))
	})

	t.Run("default limit is 20", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		posts := b.createPosts(t, 1, 21)
		b.follow(t, 2, 1)
		first := page[apiPost](t, b, 2, "/v1/feed")
		require.Equal(t, newestFirst(posts)[:20], postIDs(first.Items))
		require.NotNil(t, first.NextCursor)
		last := page[apiPost](t, b, 2, "/v1/feed?cursor="+*first.NextCursor)
		require.Equal(t, []int64{posts[0].ID}, postIDs(last.Items))
		require.Nil(t, last.NextCursor)
	})

	t.Run("paging goes on past feed.max_len", func(t *testing.T) {
		t.Parallel()
		_, b := setupWith(t, setupOpts{feedMaxLen: 5})
		a := b.createPosts(t, 1, 8)
		c := b.createPosts(t, 3, 6)
		b.follow(t, 2, 1)
		b.follow(t, 2, 3)

		want := merged(a, c)
		for _, limit := range []int{1, 3, 5, 6, 100} {
			require.Equal(t, want, readFeed(t, b, 2, limit), "limit %d", limit)
		}
	})
}
