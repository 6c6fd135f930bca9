package store_test

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/store"
)

// requireSamePost compares posts field by field (times by instant).
func requireSamePost(t *testing.T, want, got domain.Post) {
	t.Helper()
	require.Equal(t, want.ID, got.ID, "id")
	require.Equal(t, want.AuthorID, got.AuthorID, "author_id")
	require.Equal(t, want.Body, got.Body, "body")
	require.True(t, want.CreatedAt.Equal(got.CreatedAt), "created_at: want %v, got %v", want.CreatedAt, got.CreatedAt)
}

func postIDs(posts []domain.Post) []int64 {
	ids := make([]int64, len(posts))
	for i, p := range posts {
		ids[i] = p.ID
	}
	return ids
}

// createPosts creates n posts by author and returns them oldest first.
func createPosts(t *testing.T, db *store.DB, author int64, n int) []domain.Post {
	t.Helper()
	posts := make([]domain.Post, n)
	for i := range posts {
		p, created, err := db.CreatePost(t.Context(), author, "post", "")
		require.NoError(t, err)
		require.True(t, created)
		posts[i] = p
	}
	return posts
}

func TestCreatePost(t *testing.T) {
	t.Parallel()

	t.Run("WritesThePostAndOnePostCreatedEvent", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()

		p, created, err := db.CreatePost(ctx, 42, "Good morning", "")
		require.NoError(t, err)
		require.True(t, created)
		require.Positive(t, p.ID)
		require.Equal(t, int64(42), p.AuthorID)
		require.Equal(t, "Good morning", p.Body)
		require.Equal(t, time.UTC, p.CreatedAt.Location())
		require.False(t, p.CreatedAt.IsZero())

		got, err := db.Post(ctx, p.ID)
		require.NoError(t, err)
		requireSamePost(t, p, got)

		rows := outboxRows(t, bundle.pool)
		require.Len(t, rows, 1)
		require.Equal(t, domain.PostCreated, rows[0].Type)
		require.Equal(t, "pending", rows[0].Status)
		require.Zero(t, rows[0].Attempts)
		require.LessOrEqual(t, rows[0].DueIn, time.Duration(0), "due at once")
		require.Equal(t, domain.PostPayload{PostID: p.ID, AuthorID: 42}, decodeJSON[domain.PostPayload](t, rows[0].Payload))
		// One statement, one transaction: the event carries the post's commit time.
		require.True(t, p.CreatedAt.Equal(rows[0].CreatedAt), "event created_at %v, post created_at %v", rows[0].CreatedAt, p.CreatedAt)
	})

	t.Run("EachPostGetsItsOwnEvent", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		posts := createPosts(t, db, 5, 3)
		posts = append(posts, createPosts(t, db, 6, 2)...)

		rows := outboxRowsOfType(t, bundle.pool, domain.PostCreated)
		require.Len(t, rows, len(posts))
		for i, r := range rows {
			require.Equal(t, domain.PostPayload{PostID: posts[i].ID, AuthorID: posts[i].AuthorID},
				decodeJSON[domain.PostPayload](t, r.Payload))
		}
	})

	t.Run("AFailedCreateWritesNeitherPostNorEvent", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()

		_, _, err := db.CreatePost(ctx, 0, "author ids are positive", "")
		require.Error(t, err)
		_, _, err = db.CreatePost(ctx, 1, "key too long", strings.Repeat("k", 256))
		require.Error(t, err)

		var posts int
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM posts").Scan(&posts))
		require.Zero(t, posts)
		require.Empty(t, outboxRows(t, bundle.pool))
	})

	t.Run("SameKeyBySameAuthorReturnsTheFirstPostAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()

		first, created, err := db.CreatePost(ctx, 1, "first", "key-1")
		require.NoError(t, err)
		require.True(t, created)

		again, created, err := db.CreatePost(ctx, 1, "second body", "key-1")
		require.NoError(t, err)
		require.False(t, created)
		requireSamePost(t, first, again)

		var posts int
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM posts").Scan(&posts))
		require.Equal(t, 1, posts)
		require.Len(t, outboxRows(t, bundle.pool), 1)
	})

	t.Run("SameKeyByAnotherAuthorCreatesANewPost", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()

		a, created, err := db.CreatePost(ctx, 1, "by one", "shared-key")
		require.NoError(t, err)
		require.True(t, created)
		b, created, err := db.CreatePost(ctx, 2, "by two", "shared-key")
		require.NoError(t, err)
		require.True(t, created)
		require.NotEqual(t, a.ID, b.ID)
		require.Equal(t, int64(2), b.AuthorID)
		require.Equal(t, "by two", b.Body)

		rows := outboxRows(t, bundle.pool)
		require.Len(t, rows, 2)
		require.Equal(t, domain.PostPayload{PostID: b.ID, AuthorID: 2}, decodeJSON[domain.PostPayload](t, rows[1].Payload))
	})

	t.Run("AnotherKeyBySameAuthorCreatesANewPost", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		a, _, err := db.CreatePost(t.Context(), 1, "x", "key-a")
		require.NoError(t, err)
		b, created, err := db.CreatePost(t.Context(), 1, "x", "key-b")
		require.NoError(t, err)
		require.True(t, created)
		require.NotEqual(t, a.ID, b.ID)
	})

	t.Run("NoKeyNeverDeduplicates", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		posts := createPosts(t, db, 1, 2)
		require.NotEqual(t, posts[0].ID, posts[1].ID)
		require.Len(t, outboxRows(t, bundle.pool), 2)
	})

	t.Run("SameKeyAfterDeleteReturnsTheDeletedPost", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		first, _, err := db.CreatePost(ctx, 1, "first", "key")
		require.NoError(t, err)
		require.NoError(t, db.DeletePost(ctx, first.ID, 1))

		again, created, err := db.CreatePost(ctx, 1, "retry", "key")
		require.NoError(t, err)
		require.False(t, created)
		requireSamePost(t, first, again)
		require.Len(t, outboxRowsOfType(t, bundle.pool, domain.PostCreated), 1)
	})

	t.Run("ConcurrentRequestsWithOneKeyCreateOnePost", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		const n = 8
		posts := make([]domain.Post, n)
		created := make([]bool, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				posts[i], created[i], errs[i] = db.CreatePost(t.Context(), 9, "once", "race-key")
			})
		}
		close(start)
		wg.Wait()

		creators := 0
		for i := range n {
			require.NoError(t, errs[i])
			requireSamePost(t, posts[0], posts[i])
			if created[i] {
				creators++
			}
		}
		require.Equal(t, 1, creators)
		require.Len(t, outboxRows(t, bundle.pool), 1)
	})
}

func TestDeletePost(t *testing.T) {
	t.Parallel()

	t.Run("ByTheAuthorDeletesAndWritesPostDeleted", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		p, _, err := db.CreatePost(ctx, 3, "bye", "")
		require.NoError(t, err)

		require.NoError(t, db.DeletePost(ctx, p.ID, 3))

		_, err = db.Post(ctx, p.ID)
		require.ErrorIs(t, err, domain.ErrNotFound)
		rows := outboxRowsOfType(t, bundle.pool, domain.PostDeleted)
		require.Len(t, rows, 1)
		require.Equal(t, "pending", rows[0].Status)
		require.Equal(t, domain.PostPayload{PostID: p.ID, AuthorID: 3}, decodeJSON[domain.PostPayload](t, rows[0].Payload))
	})

	t.Run("BySomebodyElseIsForbiddenAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		p, _, err := db.CreatePost(ctx, 3, "mine", "")
		require.NoError(t, err)

		require.ErrorIs(t, db.DeletePost(ctx, p.ID, 4), domain.ErrForbidden)

		got, err := db.Post(ctx, p.ID)
		require.NoError(t, err)
		requireSamePost(t, p, got)
		require.Empty(t, outboxRowsOfType(t, bundle.pool, domain.PostDeleted))
	})

	t.Run("MissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		require.ErrorIs(t, db.DeletePost(t.Context(), 12345, 3), domain.ErrNotFound)
		require.Empty(t, outboxRows(t, bundle.pool))
	})

	t.Run("TwiceIsNotFoundAndWritesOneEvent", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		p, _, err := db.CreatePost(ctx, 3, "bye", "")
		require.NoError(t, err)
		require.NoError(t, db.DeletePost(ctx, p.ID, 3))

		require.ErrorIs(t, db.DeletePost(ctx, p.ID, 3), domain.ErrNotFound)
		// Somebody else deleting a deleted post learns nothing more than "not found".
		require.ErrorIs(t, db.DeletePost(ctx, p.ID, 4), domain.ErrNotFound)
		require.Len(t, outboxRowsOfType(t, bundle.pool, domain.PostDeleted), 1)
	})

	t.Run("DeletedPostsLeaveEveryListing", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		posts := createPosts(t, db, 3, 3)
		_, err := db.Follow(ctx, 8, 3)
		require.NoError(t, err)
		require.NoError(t, db.DeletePost(ctx, posts[1].ID, 3))

		want := []int64{posts[2].ID, posts[0].ID}
		byID, err := db.PostsByID(ctx, postIDs(posts))
		require.NoError(t, err)
		got := postIDs(byID)
		slices.Sort(got)
		require.Equal(t, []int64{posts[0].ID, posts[2].ID}, got)

		authored, err := db.AuthorPosts(ctx, 3, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Equal(t, want, postIDs(authored))

		followed, err := db.FolloweePosts(ctx, 8, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Equal(t, want, postIDs(followed))

		ids, err := db.AuthorPostIDsSince(ctx, 3, 0, 10)
		require.NoError(t, err)
		require.Equal(t, want, ids)
	})
}

func TestPost(t *testing.T) {
	t.Parallel()

	t.Run("MissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		_, err := db.Post(t.Context(), 999)
		require.ErrorIs(t, err, domain.ErrNotFound)
	})

	t.Run("PostsByIDSkipsMissingIDs", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		posts := createPosts(t, db, 1, 2)
		got, err := db.PostsByID(t.Context(), []int64{posts[0].ID, 999999, posts[1].ID})
		require.NoError(t, err)
		slices.SortFunc(got, func(a, b domain.Post) int { return int(a.ID - b.ID) })
		require.Len(t, got, 2)
		requireSamePost(t, posts[0], got[0])
		requireSamePost(t, posts[1], got[1])

		none, err := db.PostsByID(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, none)
	})
}

func TestAuthorPosts(t *testing.T) {
	t.Parallel()

	t.Run("PagesNewestFirstWithBefore", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		var mine []domain.Post
		for range 25 { // interleaved with another author's posts
			mine = append(mine, createPosts(t, db, 1, 1)...)
			createPosts(t, db, 2, 1)
		}
		want := postIDs(mine)
		slices.Reverse(want)

		var got []int64
		before := int64(math.MaxInt64)
		for page := 0; ; page++ {
			require.Less(t, page, 10, "paging does not end")
			posts, err := db.AuthorPosts(ctx, 1, before, 10)
			require.NoError(t, err)
			require.LessOrEqual(t, len(posts), 10)
			for _, p := range posts {
				require.Equal(t, int64(1), p.AuthorID)
			}
			got = append(got, postIDs(posts)...)
			if len(posts) < 10 {
				break
			}
			before = posts[len(posts)-1].ID
		}
		require.Equal(t, want, got)
	})

	t.Run("ReturnsFullPosts", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		p, _, err := db.CreatePost(t.Context(), 1, "full body", "")
		require.NoError(t, err)
		posts, err := db.AuthorPosts(t.Context(), 1, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Len(t, posts, 1)
		requireSamePost(t, p, posts[0])
	})

	t.Run("UnknownAuthorHasNoPosts", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		createPosts(t, db, 1, 2)
		posts, err := db.AuthorPosts(t.Context(), 77, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Empty(t, posts)
	})
}

func TestFolloweePosts(t *testing.T) {
	t.Parallel()

	t.Run("ReturnsOwnAndFolloweesLivePostsNewestFirstWithPaging", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		const reader, a, b, stranger = 100, 1, 2, 3
		for _, followee := range []int64{a, b} {
			_, err := db.Follow(ctx, reader, followee)
			require.NoError(t, err)
		}
		_, err := db.Follow(ctx, 101, stranger) // somebody else's edge
		require.NoError(t, err)

		var want []int64
		for i := range 12 {
			pa := createPosts(t, db, a, 1)[0]
			createPosts(t, db, stranger, 1)
			own := createPosts(t, db, reader, 1)[0] // a home feed holds its reader's own posts
			want = append(want, own.ID)
			if i%3 == 0 {
				pb := createPosts(t, db, b, 2)
				want = append(want, pb[0].ID, pb[1].ID)
			}
			if i == 5 {
				require.NoError(t, db.DeletePost(ctx, pa.ID, a))
				continue
			}
			want = append(want, pa.ID)
		}
		slices.Sort(want)
		slices.Reverse(want)
		require.Len(t, want, 31)

		all, err := db.FolloweePosts(ctx, reader, math.MaxInt64, 100)
		require.NoError(t, err)
		require.Equal(t, want, postIDs(all))

		var got []int64
		before := int64(math.MaxInt64)
		for page := 0; ; page++ {
			require.Less(t, page, 10, "paging does not end")
			posts, err := db.FolloweePosts(ctx, reader, before, 4)
			require.NoError(t, err)
			require.LessOrEqual(t, len(posts), 4)
			got = append(got, postIDs(posts)...)
			if len(posts) < 4 {
				break
			}
			before = posts[len(posts)-1].ID
		}
		require.Equal(t, want, got)
	})

	t.Run("LimitAppliesAcrossFollowees", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		for followee := int64(1); followee <= 3; followee++ {
			_, err := db.Follow(ctx, 50, followee)
			require.NoError(t, err)
			createPosts(t, db, followee, 5)
		}
		posts, err := db.FolloweePosts(ctx, 50, math.MaxInt64, 5)
		require.NoError(t, err)
		require.Len(t, posts, 5)
		for _, p := range posts {
			require.Equal(t, int64(3), p.AuthorID, "the newest five are all by the last author")
		}
	})

	t.Run("UnfollowedAuthorsDisappear", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		_, err := db.Follow(ctx, 50, 1)
		require.NoError(t, err)
		_, err = db.Follow(ctx, 50, 2)
		require.NoError(t, err)
		one := createPosts(t, db, 1, 2)
		createPosts(t, db, 2, 2)
		_, err = db.Unfollow(ctx, 50, 2)
		require.NoError(t, err)

		posts, err := db.FolloweePosts(ctx, 50, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{one[1].ID, one[0].ID}, postIDs(posts))
	})

	t.Run("NobodyFollowedIsEmpty", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		createPosts(t, db, 1, 2)
		posts, err := db.FolloweePosts(t.Context(), 50, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Empty(t, posts)
	})
}

func TestAuthorPostIDsSince(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := t.Context()
	var mine []domain.Post
	for range 6 {
		mine = append(mine, createPosts(t, db, 1, 1)...)
		createPosts(t, db, 2, 1)
	}
	require.NoError(t, db.DeletePost(ctx, mine[3].ID, 1))

	t.Run("ReturnsLivePostsFromSinceInclusiveNewestFirst", func(t *testing.T) {
		t.Parallel()
		ids, err := db.AuthorPostIDsSince(t.Context(), 1, mine[2].ID, 100)
		require.NoError(t, err)
		require.Equal(t, []int64{mine[5].ID, mine[4].ID, mine[2].ID}, ids)
	})

	t.Run("KeepsTheNewestUpToLimit", func(t *testing.T) {
		t.Parallel()
		ids, err := db.AuthorPostIDsSince(t.Context(), 1, 0, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{mine[5].ID, mine[4].ID}, ids)
	})

	t.Run("NothingSinceTheNewestIsEmpty", func(t *testing.T) {
		t.Parallel()
		ids, err := db.AuthorPostIDsSince(t.Context(), 1, mine[5].ID+1, 100)
		require.NoError(t, err)
		require.Empty(t, ids)
	})
}

func TestPostFacts(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := t.Context()
	posts := createPosts(t, db, 4, 2)
	require.NoError(t, db.DeletePost(ctx, posts[1].ID, 4))
	for _, follower := range []int64{5, 6} {
		_, err := db.Follow(ctx, follower, 4)
		require.NoError(t, err)
	}
	before, err := db.WritePosition(ctx)
	require.NoError(t, err)

	t.Run("ALivePost", func(t *testing.T) {
		t.Parallel()
		f, err := db.PostFacts(t.Context(), posts[0].ID)
		require.NoError(t, err)
		require.True(t, f.Found)
		require.False(t, f.Deleted)
		require.Equal(t, int64(4), f.AuthorID)
		require.Equal(t, int64(2), f.Followers, "the author's follower count")
		require.False(t, f.Pulled)
		require.GreaterOrEqual(t, f.WritePosition, before, "the write position, read with the rest")
	})

	t.Run("ADeletedPostIsFoundAndDeleted", func(t *testing.T) {
		t.Parallel()
		f, err := db.PostFacts(t.Context(), posts[1].ID)
		require.NoError(t, err)
		require.True(t, f.Found, "a deleted post still exists: its fan-out must be undone, not skipped")
		require.True(t, f.Deleted)
		require.Equal(t, int64(4), f.AuthorID)
		_, err = db.Post(t.Context(), posts[1].ID)
		require.ErrorIs(t, err, domain.ErrNotFound, "while Post hides it")
	})

	t.Run("AMissingPostIsNotFoundAndNotAnError", func(t *testing.T) {
		t.Parallel()
		f, err := db.PostFacts(t.Context(), posts[1].ID+1000)
		require.NoError(t, err)
		require.False(t, f.Found)
		require.False(t, f.Deleted)
		require.Zero(t, f.AuthorID)
		require.Zero(t, f.Followers)
		require.GreaterOrEqual(t, f.WritePosition, before)
	})
}
