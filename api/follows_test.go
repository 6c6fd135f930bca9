package api_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func followersPath(id int64) string { return "/v1/users/" + strconv.FormatInt(id, 10) + "/followers" }
func followingPath(id int64) string { return "/v1/users/" + strconv.FormatInt(id, 10) + "/following" }

func TestFollow(t *testing.T) {
	t.Parallel()

	t.Run("following yourself is 422 and writes nothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.createPost(t, 1, "so I can see myself?")
		before := b.state(t)

		res := b.put(t, 1, "/v1/following/1")
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "body: %s", res.body)
		errorCode(t, res)
		require.Equal(t, before, b.state(t))
		require.Empty(t, page[apiFollow](t, b, 1, followersPath(1)).Items)
		require.Empty(t, page[apiFollow](t, b, 1, followingPath(1)).Items)
	})

	t.Run("is 204 and idempotent", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		start := time.Now()

		b.follow(t, 1, 2)
		b.follow(t, 1, 2)

		followers := page[apiFollow](t, b, 3, followersPath(2))
		require.Len(t, followers.Items, 1)
		require.Equal(t, int64(1), followers.Items[0].UserID)
		since := requireRFC3339UTC(t, followers.Items[0].Since)
		require.WithinDuration(t, start, since, time.Minute)
		require.Nil(t, followers.NextCursor)

		following := page[apiFollow](t, b, 3, followingPath(1))
		require.Len(t, following.Items, 1)
		require.Equal(t, int64(2), following.Items[0].UserID)
		require.Equal(t, followers.Items[0].Since, following.Items[0].Since)

		// Each side sees only its own edges.
		require.Empty(t, page[apiFollow](t, b, 3, followersPath(1)).Items)
		require.Empty(t, page[apiFollow](t, b, 3, followingPath(2)).Items)

		require.Equal(t, 1, b.count(t, "follows", ""))
		require.Equal(t, 1, b.count(t, "outbox", "event_type = 'follow.created'"))
		require.Equal(t, 1, b.count(t, "outbox", ""))
	})

	t.Run("a user with no posts yet can be followed", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.follow(t, 1, 9223372036854775807)
		require.Equal(t, []int64{9223372036854775807}, followIDs(page[apiFollow](t, b, 1, followingPath(1)).Items))
	})
}

func TestUnfollow(t *testing.T) {
	t.Parallel()

	t.Run("without a follow is 204 and writes nothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.unfollow(t, 1, 2)
		b.unfollow(t, 1, 1) // yourself: nothing to undo
		require.Equal(t, state{}, b.state(t))
	})

	t.Run("of yourself keeps your own posts in your feed", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		own := b.createPost(t, 1, "mine")
		require.Equal(t, []int64{own.ID}, readFeed(t, b, 1, 20))
		b.unfollow(t, 1, 1)
		require.Equal(t, []int64{own.ID}, readFeed(t, b, 1, 20), "a home feed holds its reader's own posts")
		next := b.createPost(t, 1, "mine too")
		require.Equal(t, []int64{next.ID, own.ID}, readFeed(t, b, 1, 20))
	})

	t.Run("is 204 and idempotent", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.follow(t, 1, 2)
		b.follow(t, 3, 2)

		b.unfollow(t, 1, 2)
		b.unfollow(t, 1, 2)

		require.Equal(t, []int64{3}, followIDs(page[apiFollow](t, b, 1, followersPath(2)).Items))
		require.Empty(t, page[apiFollow](t, b, 1, followingPath(1)).Items)
		require.Equal(t, 1, b.count(t, "outbox", "event_type = 'follow.deleted'"))
	})

	t.Run("then following again works", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.follow(t, 1, 2)
		b.unfollow(t, 1, 2)
		b.follow(t, 1, 2)
		require.Equal(t, []int64{1}, followIDs(page[apiFollow](t, b, 1, followersPath(2)).Items))
	})
}

func TestFollowListings(t *testing.T) {
	t.Parallel()

	// Users 101..105 follow user 1, in that order; user 1 follows 201..205.
	_, b := setup(t)
	var followers, followees []int64
	for i := int64(1); i <= 5; i++ {
		b.follow(t, 100+i, 1)
		followers = append([]int64{100 + i}, followers...) // newest first
		b.follow(t, 1, 200+i)
		followees = append([]int64{200 + i}, followees...)
	}

	for _, tc := range []struct {
		name string
		path string
		want []int64
	}{
		{"followers", followersPath(1), followers},
		{"following", followingPath(1), followees},
	} {
		t.Run(tc.name+" newest first", func(t *testing.T) {
			t.Parallel()
			p := page[apiFollow](t, b, 7, tc.path)
			require.Equal(t, tc.want, followIDs(p.Items))
			require.Nil(t, p.NextCursor)
			var prev time.Time
			for i, f := range p.Items {
				since := requireRFC3339UTC(t, f.Since)
				if i > 0 {
					require.False(t, since.After(prev), "newest first")
				}
				prev = since
			}
		})

		for _, limit := range []int{1, 2, 3, 4, 5, 6, 100} {
			t.Run(tc.name+" paged by "+strconv.Itoa(limit), func(t *testing.T) {
				t.Parallel()
				pages := allPages[apiFollow](t, b, 7, tc.path+"?limit="+strconv.Itoa(limit))
				require.Len(t, pages, (5+limit-1)/limit, "the last full page has next_cursor null")
				for i, p := range pages {
					if i < len(pages)-1 {
						require.Len(t, p, limit)
					}
				}
				require.Equal(t, tc.want, followIDs(flatten(pages)), "no gaps, no repeats")
			})
		}
	}

	t.Run("paging is stable across new follows", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		for i := int64(1); i <= 5; i++ {
			b.follow(t, 100+i, 1)
		}
		p1 := page[apiFollow](t, b, 7, followersPath(1)+"?limit=2")
		require.Equal(t, []int64{105, 104}, followIDs(p1.Items))
		b.follow(t, 106, 1)
		p2 := page[apiFollow](t, b, 7, followersPath(1)+"?limit=2&cursor="+*p1.NextCursor)
		require.Equal(t, []int64{103, 102}, followIDs(p2.Items))
		b.follow(t, 107, 1)
		p3 := page[apiFollow](t, b, 7, followersPath(1)+"?limit=2&cursor="+*p2.NextCursor)
		require.Equal(t, []int64{101}, followIDs(p3.Items))
		require.Nil(t, p3.NextCursor)
	})

	t.Run("default limit is 20", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		for i := int64(1); i <= 21; i++ {
			b.follow(t, 1, 100+i)
		}
		first := page[apiFollow](t, b, 1, followingPath(1))
		require.Len(t, first.Items, 20)
		require.NotNil(t, first.NextCursor)
		last := page[apiFollow](t, b, 1, followingPath(1)+"?cursor="+*first.NextCursor)
		require.Equal(t, []int64{101}, followIDs(last.Items))
		require.Nil(t, last.NextCursor)
	})

	t.Run("nobody", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{followersPath(999), followingPath(999)} {
			res := b.get(t, 1, path)
			require.Equal(t, http.StatusOK, res.status)
			require.JSONEq(t, `{"items": [], "next_cursor": null}`, string(res.body))
		}
	})
}
