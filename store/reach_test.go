package store_test

import (
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
		require.True(t, created)
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

func TestCelebrityFollowees(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := t.Context()
	const reader, other = 1, 2
	const big, atThreshold, small, formerStar, strangerStar = 100, 200, 300, 400, 500
	// Followers: big 5, atThreshold 4, small 1, formerStar 1 (pulled before),
	// strangerStar 4 (the reader does not follow them).
	requireFollows(t, db, reader, big, atThreshold, small, formerStar)
	requireFollows(t, db, other, big, atThreshold, strangerStar)
	for f := int64(10); f < 12; f++ {
		requireFollows(t, db, f, big, atThreshold, strangerStar)
	}
	requireFollows(t, db, 12, big, strangerStar)
	require.NoError(t, db.MarkPulled(ctx, formerStar))
	require.NoError(t, db.MarkPulled(ctx, 600)) // pulled, but followed by nobody here

	celebrities := func(t *testing.T, follower, threshold int64) []int64 {
		t.Helper()
		ids, err := db.CelebrityFollowees(ctx, follower, threshold)
		require.NoError(t, err)
		slices.Sort(ids)
		return ids
	}

	t.Run("FolloweesWithMoreFollowersThanTheThresholdOrEverPulled", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []int64{big, formerStar}, celebrities(t, reader, 4))
	})

	t.Run("TheThresholdMovesTheLine", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []int64{big, atThreshold, formerStar}, celebrities(t, reader, 3))
		require.Equal(t, []int64{big, atThreshold, small, formerStar}, celebrities(t, reader, 0))
		require.Equal(t, []int64{formerStar}, celebrities(t, reader, 5), "a pulled author stays, whatever the threshold")
	})

	t.Run("OnlyTheFollowersOwnFollowees", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []int64{big}, celebrities(t, other, 4))
		require.Equal(t, []int64{big, atThreshold, strangerStar}, celebrities(t, other, 3))
		require.Empty(t, celebrities(t, 999, 0), "somebody who follows nobody")
	})
}
