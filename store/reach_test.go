package store_test

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/store"
)

func requireReach(t *testing.T, db *store.DB, user, followers int64, pulled bool) {
	t.Helper()
	n, p, err := db.Reach(t.Context(), user)
	require.NoError(t, err)
	require.Equal(t, followers, n, "followers of %d", user)
	require.Equal(t, pulled, p, "pulled of %d", user)
}

func requireFollows(t *testing.T, db *store.DB, follower int64, followees ...int64) {
	t.Helper()
	for _, f := range followees {
		created, err := db.Follow(t.Context(), follower, f)
		require.NoError(t, err)
		require.True(t, created.Changed)
	}
}

func TestReach(t *testing.T) {
	t.Parallel()

	t.Run("AnUnknownUserHasNoFollowersAndWasNeverPulled", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		requireReach(t, db, 77, 0, false)
	})

	t.Run("CountsFollowersAndStaysPulledOnceMarked", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		for f := int64(1); f <= 3; f++ {
			requireFollows(t, db, f, 50)
		}
		requireReach(t, db, 50, 3, false)

		require.NoError(t, db.MarkPulled(ctx, 50))
		requireReach(t, db, 50, 3, true)
		require.NoError(t, db.MarkPulled(ctx, 50), "marking twice is not an error")
		requireReach(t, db, 50, 3, true)

		// A former celebrity: fewer followers never clear the mark.
		for f := int64(1); f <= 3; f++ {
			_, err := db.Unfollow(ctx, f, 50)
			require.NoError(t, err)
		}
		requireReach(t, db, 50, 0, true)
		requireFollows(t, db, 9, 50)
		requireReach(t, db, 50, 1, true)
		requireReach(t, db, 9, 0, false)
	})

	t.Run("MarkingAUserWithoutFollowersKeepsTheirCountRight", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		require.NoError(t, db.MarkPulled(t.Context(), 60))
		requireReach(t, db, 60, 0, true)
		requireFollows(t, db, 1, 60)
		requireFollows(t, db, 2, 60)
		requireReach(t, db, 60, 2, true)
		requireFollowerCount(t, db, 60, 2)
	})
}

// What a feed's read side asks PostgreSQL for: whom a reader follows (the
// following hash of a rebuild, many readers at once for seeding), the authors
// ever pulled, and a followee's posts in a range of ids (an unfollow's clean-up).
func TestFeedSources(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := t.Context()
	const reader, other, loner = 1, 2, 999
	requireFollows(t, db, reader, 100, 200, 300)
	requireFollows(t, db, other, 200)
	require.NoError(t, db.MarkPulled(ctx, 200))
	require.NoError(t, db.MarkPulled(ctx, 600)) // pulled, followed by nobody here

	t.Run("Followees", func(t *testing.T) {
		t.Parallel()
		ids, _, err := db.Followees(ctx, reader)
		require.NoError(t, err)
		slices.Sort(ids)
		require.Equal(t, []int64{100, 200, 300}, ids)
		ids, _, err = db.Followees(ctx, loner)
		require.NoError(t, err)
		require.Empty(t, ids)
	})

	t.Run("FolloweesOfManyReaders", func(t *testing.T) {
		t.Parallel()
		m, err := db.FolloweesOf(ctx, []int64{reader, other, loner})
		require.NoError(t, err)
		slices.Sort(m[reader])
		require.Equal(t, []int64{100, 200, 300}, m[reader])
		require.Equal(t, []int64{200}, m[other])
		require.Contains(t, m, int64(loner))
		require.Empty(t, m[loner])
	})

	t.Run("PulledAuthorsWhetherFollowedOrNot", func(t *testing.T) {
		t.Parallel()
		ids, err := db.PulledAuthors(ctx)
		require.NoError(t, err)
		slices.Sort(ids)
		require.Equal(t, []int64{200, 600}, ids)
	})

	t.Run("AuthorPostIDsBetween", func(t *testing.T) {
		t.Parallel()
		var mine []int64
		for range 6 {
			p, _, err := db.CreatePost(ctx, 700, "x", "")
			require.NoError(t, err)
			mine = append(mine, p.ID)
		}
		_, _, err := db.CreatePost(ctx, 701, "someone else's", "")
		require.NoError(t, err)
		require.NoError(t, db.DeletePost(ctx, mine[3], 700))
		ids, err := db.AuthorPostIDsBetween(ctx, 700, mine[1], mine[5], 10)
		require.NoError(t, err)
		require.Equal(t, []int64{mine[4], mine[3], mine[2], mine[1]}, ids,
			"since included, before excluded, deleted ones too (a feed may still hold them), newest first")
		ids, err = db.AuthorPostIDsBetween(ctx, 700, 0, math.MaxInt64, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{mine[5], mine[4]}, ids, "at most limit")
	})
}
