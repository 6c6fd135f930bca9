package store_test

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/store"
)

func requireFollowerCount(t *testing.T, db *store.DB, user, want int64) {
	t.Helper()
	n, err := db.FollowerCount(t.Context(), user)
	require.NoError(t, err)
	require.Equal(t, want, n, "follower count of %d", user)
}

func requireFollowEvents(t *testing.T, pool *pgxpool.Pool, typ string, want ...domain.FollowPayload) {
	t.Helper()
	rows := outboxRowsOfType(t, pool, typ)
	got := make([]domain.FollowPayload, len(rows))
	for i, r := range rows {
		got[i] = decodeJSON[domain.FollowPayload](t, r.Payload)
		require.Equal(t, "pending", r.Status)
	}
	if len(want) == 0 {
		want = []domain.FollowPayload{}
	}
	require.Equal(t, want, got, "%s events", typ)
}

func TestFollow(t *testing.T) {
	t.Parallel()

	t.Run("NewEdgeIsCreatedCountedAndAnnounced", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()

		created, err := db.Follow(ctx, 1, 2)
		require.NoError(t, err)
		require.True(t, created.Changed)

		ok, err := db.IsFollowing(ctx, 1, 2)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = db.IsFollowing(ctx, 2, 1)
		require.NoError(t, err)
		require.False(t, ok, "following is one-way")
		requireFollowerCount(t, db, 2, 1)
		requireFollowerCount(t, db, 1, 0)
		requireFollowEvents(t, bundle.pool, domain.FollowCreated, domain.FollowPayload{FollowerID: 1, FolloweeID: 2})
	})

	t.Run("EveryStateSaysHowManyTheFollowerFollows", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		for i, followee := range []int64{2, 3, 4} {
			ch, err := db.Follow(ctx, 1, followee)
			require.NoError(t, err)
			require.EqualValues(t, i+1, ch.Followees)
		}
		again, err := db.Follow(ctx, 1, 3)
		require.NoError(t, err)
		require.EqualValues(t, 3, again.Followees, "following twice counts once")
		_, err = db.Follow(ctx, 9, 2)
		require.NoError(t, err)
		st, err := db.FollowState(ctx, 1, 2)
		require.NoError(t, err)
		require.EqualValues(t, 3, st.Followees, "another follower's follows do not count")
		gone, err := db.Unfollow(ctx, 1, 2)
		require.NoError(t, err)
		require.EqualValues(t, 2, gone.Followees)
		st, err = db.FollowState(ctx, 1, 2)
		require.NoError(t, err)
		require.Equal(t, domain.EdgeState{Follower: 1, Followee: 2, Version: gone.Version, Followees: 2}, st)
	})

	t.Run("FollowingTwiceChangesNothing", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		_, err := db.Follow(ctx, 1, 2)
		require.NoError(t, err)

		created, err := db.Follow(ctx, 1, 2)
		require.NoError(t, err)
		require.False(t, created.Changed)
		requireFollowerCount(t, db, 2, 1)
		require.Len(t, outboxRows(t, bundle.pool), 1)
	})

	t.Run("UnfollowRemovesUncountsAndAnnounces", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		_, err := db.Follow(ctx, 1, 2)
		require.NoError(t, err)
		_, err = db.Follow(ctx, 3, 2)
		require.NoError(t, err)

		removed, err := db.Unfollow(ctx, 1, 2)
		require.NoError(t, err)
		require.True(t, removed.Changed)

		ok, err := db.IsFollowing(ctx, 1, 2)
		require.NoError(t, err)
		require.False(t, ok)
		requireFollowerCount(t, db, 2, 1)
		requireFollowEvents(t, bundle.pool, domain.FollowDeleted, domain.FollowPayload{FollowerID: 1, FolloweeID: 2})
	})

	t.Run("UnfollowingTwiceOrANonEdgeChangesNothing", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		_, err := db.Follow(ctx, 1, 2)
		require.NoError(t, err)
		_, err = db.Unfollow(ctx, 1, 2)
		require.NoError(t, err)

		removed, err := db.Unfollow(ctx, 1, 2)
		require.NoError(t, err)
		require.False(t, removed.Changed)
		removed, err = db.Unfollow(ctx, 5, 6)
		require.NoError(t, err)
		require.False(t, removed.Changed)

		requireFollowerCount(t, db, 2, 0)
		requireFollowerCount(t, db, 6, 0)
		require.Len(t, outboxRows(t, bundle.pool), 2, "one follow.created and one follow.deleted")
		requireFollowEvents(t, bundle.pool, domain.FollowDeleted, domain.FollowPayload{FollowerID: 1, FolloweeID: 2})
	})

	t.Run("FollowAgainAfterUnfollowIsANewEdge", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		for range 2 {
			created, err := db.Follow(ctx, 1, 2)
			require.NoError(t, err)
			require.True(t, created.Changed)
			requireFollowerCount(t, db, 2, 1)
			removed, err := db.Unfollow(ctx, 1, 2)
			require.NoError(t, err)
			require.True(t, removed.Changed)
			requireFollowerCount(t, db, 2, 0)
		}
		edge := domain.FollowPayload{FollowerID: 1, FolloweeID: 2}
		requireFollowEvents(t, bundle.pool, domain.FollowCreated, edge, edge)
		requireFollowEvents(t, bundle.pool, domain.FollowDeleted, edge, edge)
	})

	t.Run("FollowingYourselfIsRefused", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		created, err := db.Follow(ctx, 4, 4)
		require.ErrorIs(t, err, domain.ErrSelfFollow)
		require.False(t, created.Changed)

		ok, err := db.IsFollowing(ctx, 4, 4)
		require.NoError(t, err)
		require.False(t, ok)
		requireFollowerCount(t, db, 4, 0)
		require.Empty(t, outboxRows(t, bundle.pool))
	})

	t.Run("CountsStayExactUnderConcurrentFollowsAndUnfollows", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		const star = 1000
		const workers = 8
		errs := make([]error, workers)
		changes := make([]int, workers) // edges this worker added minus removed
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				<-start
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for range 40 {
					follower := int64(1 + rng.IntN(10)) // workers contend for the same edges
					var ch domain.EdgeChange
					var err error
					if rng.IntN(2) == 0 {
						ch, err = db.Follow(t.Context(), follower, star)
						if ch.Changed {
							changes[w]++
						}
					} else {
						ch, err = db.Unfollow(t.Context(), follower, star)
						if ch.Changed {
							changes[w]--
						}
					}
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}

		var edges int64
		require.NoError(t, bundle.pool.QueryRow(t.Context(),
			"SELECT count(*) FROM follows WHERE followee_id = $1", star).Scan(&edges))
		var net int64
		for _, c := range changes {
			net += int64(c)
		}
		require.Equal(t, edges, net, "reported changes add up to the edges")
		requireFollowerCount(t, db, star, edges)
		created := len(outboxRowsOfType(t, bundle.pool, domain.FollowCreated))
		deleted := len(outboxRowsOfType(t, bundle.pool, domain.FollowDeleted))
		require.Equal(t, edges, int64(created-deleted), "one event per change")
	})
}

// edge is one expected item of a follow listing.
type edge struct {
	user  int64
	since time.Time
}

// pageFollows pages through a listing with limit, cursor from the last item.
func pageFollows(t *testing.T, list func(after *domain.FollowCursor, limit int) ([]domain.Follow, error), limit int) []domain.Follow {
	t.Helper()
	var all []domain.Follow
	var after *domain.FollowCursor
	for page := 0; ; page++ {
		require.Less(t, page, 100, "paging does not end")
		items, err := list(after, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(items), limit)
		all = append(all, items...)
		if len(items) < limit {
			return all
		}
		last := items[len(items)-1]
		after = &domain.FollowCursor{Since: last.Since, UserID: last.UserID}
	}
}

func requireListing(t *testing.T, want []edge, got []domain.Follow) {
	t.Helper()
	gotUsers := make([]int64, len(got))
	for i, f := range got {
		gotUsers[i] = f.UserID
	}
	wantUsers := make([]int64, len(want))
	for i, e := range want {
		wantUsers[i] = e.user
	}
	require.Equal(t, wantUsers, gotUsers, "no gaps, no repeats, newest first")
	for i := range want {
		require.True(t, want[i].since.Equal(got[i].Since), "since of %d: want %v, got %v", want[i].user, want[i].since, got[i].Since)
		require.Equal(t, time.UTC, got[i].Since.Location())
	}
}

func TestFollowListings(t *testing.T) {
	t.Parallel()

	const celebrity, fan = 1000, 2000
	// Other people's edges that no listing below may show.
	noise := func(t *testing.T, db *store.DB) {
		t.Helper()
		for _, e := range [][2]int64{{1, 2}, {3, 1}, {celebrity, 5}, {5, fan}} {
			_, err := db.Follow(t.Context(), e[0], e[1])
			require.NoError(t, err)
		}
	}

	t.Run("FollowersNewestFirstPagedWithoutGapsOrRepeats", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		noise(t, db)
		followers := make([]int64, 25)
		for i := range followers {
			followers[i] = int64(100 + (i*37)%25) // created in an order unrelated to ids
			_, err := db.Follow(t.Context(), followers[i], celebrity)
			require.NoError(t, err)
		}
		all, err := db.Followers(t.Context(), celebrity, nil, 100)
		require.NoError(t, err)
		require.Len(t, all, 25)
		// Newest first: the reverse of the order the edges were made in.
		want := make([]edge, 25)
		for i, f := range followers {
			want[24-i] = edge{user: f, since: sinceOf(all, f)}
		}
		requireListing(t, want, all)

		got := pageFollows(t, func(after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
			return db.Followers(t.Context(), celebrity, after, limit)
		}, 10)
		requireListing(t, want, got)
	})

	t.Run("FollowersWithEqualTimesPageByUserID", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		noise(t, db)
		for f := int64(100); f < 125; f++ {
			_, err := db.Follow(t.Context(), f, celebrity)
			require.NoError(t, err)
		}
		// Five groups of five edges made in the same microsecond, so that
		// page boundaries fall inside groups.
		base := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
		exec(t, bundle.pool, `UPDATE follows SET created_at = $2::timestamptz + (follower_id % 5) * interval '1 second'
WHERE followee_id = $1`, celebrity, base)
		want := expectedListing(100, 125, base)

		got := pageFollows(t, func(after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
			return db.Followers(t.Context(), celebrity, after, limit)
		}, 10)
		requireListing(t, want, got)
		got = pageFollows(t, func(after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
			return db.Followers(t.Context(), celebrity, after, limit)
		}, 3)
		requireListing(t, want, got)
	})

	t.Run("FollowingNewestFirstPagedWithoutGapsOrRepeats", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		noise(t, db)
		followees := make([]int64, 25)
		for i := range followees {
			followees[i] = int64(100 + (i*37)%25)
			_, err := db.Follow(t.Context(), fan, followees[i])
			require.NoError(t, err)
		}
		all, err := db.Following(t.Context(), fan, nil, 100)
		require.NoError(t, err)
		require.Len(t, all, 25)
		want := make([]edge, 25)
		for i, f := range followees {
			want[24-i] = edge{user: f, since: sinceOf(all, f)}
		}
		requireListing(t, want, all)

		got := pageFollows(t, func(after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
			return db.Following(t.Context(), fan, after, limit)
		}, 10)
		requireListing(t, want, got)
	})

	t.Run("FollowingWithEqualTimesPageByUserID", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		noise(t, db)
		for f := int64(100); f < 125; f++ {
			_, err := db.Follow(t.Context(), fan, f)
			require.NoError(t, err)
		}
		base := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
		exec(t, bundle.pool, `UPDATE follows SET created_at = $2::timestamptz + (followee_id % 5) * interval '1 second'
WHERE follower_id = $1`, fan, base)
		want := expectedListing(100, 125, base)

		got := pageFollows(t, func(after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
			return db.Following(t.Context(), fan, after, limit)
		}, 10)
		requireListing(t, want, got)
	})

	t.Run("EmptyListings", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		noise(t, db)
		followers, err := db.Followers(t.Context(), 4242, nil, 10)
		require.NoError(t, err)
		require.Empty(t, followers)
		following, err := db.Following(t.Context(), 4242, nil, 10)
		require.NoError(t, err)
		require.Empty(t, following)
	})
}

func sinceOf(list []domain.Follow, user int64) time.Time {
	for _, f := range list {
		if f.UserID == user {
			return f.Since
		}
	}
	return time.Time{}
}

// expectedListing is the newest-first listing of users [from, to) whose edge
// was made at base + (user % 5) seconds.
func expectedListing(from, to int64, base time.Time) []edge {
	var want []edge
	for u := from; u < to; u++ {
		want = append(want, edge{user: u, since: base.Add(time.Duration(u%5) * time.Second)})
	}
	slices.SortFunc(want, func(a, b edge) int {
		if c := b.since.Compare(a.since); c != 0 {
			return c
		}
		return cmp.Compare(b.user, a.user)
	})
	return want
}

func TestFollowerIDs(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	const author = 7
	var want []int64
	for i := range 25 {
		id := int64(1000 - i*13) // made in descending id order
		want = append(want, id)
		_, err := db.Follow(t.Context(), id, author)
		require.NoError(t, err)
	}
	_, err := db.Follow(t.Context(), 5000, 8) // another author's follower
	require.NoError(t, err)
	slices.Sort(want)

	t.Run("KeysetPagesAscendingWithoutGapsOrRepeats", func(t *testing.T) {
		t.Parallel()
		var got []int64
		after := int64(0)
		for page := 0; ; page++ {
			require.Less(t, page, 10, "paging does not end")
			ids, err := db.FollowerIDs(t.Context(), author, after, 10)
			require.NoError(t, err)
			require.LessOrEqual(t, len(ids), 10)
			got = append(got, ids...)
			if len(ids) < 10 {
				break
			}
			after = ids[len(ids)-1]
		}
		require.Equal(t, want, got)
	})

	t.Run("StartsAfterTheGivenID", func(t *testing.T) {
		t.Parallel()
		ids, err := db.FollowerIDs(t.Context(), author, want[20], 100)
		require.NoError(t, err)
		require.Equal(t, want[21:], ids)
	})

	t.Run("NoFollowersIsEmpty", func(t *testing.T) {
		t.Parallel()
		ids, err := db.FollowerIDs(t.Context(), 9999, 0, 10)
		require.NoError(t, err)
		require.Empty(t, ids)
	})
}

func TestFollowCursors(t *testing.T) {
	t.Parallel()
	const star = 1000

	// starWithFollowers makes followers 100..119 follow the star, one second
	// apart (100 the oldest), and returns the store.
	starWithFollowers := func(t *testing.T) (*store.DB, *testBundle, time.Time) {
		t.Helper()
		db, bundle := setup(t)
		for f := int64(100); f < 120; f++ {
			requireFollows(t, db, f, star)
		}
		base := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
		exec(t, bundle.pool, `UPDATE follows SET created_at = $2::timestamptz + (follower_id - 100) * interval '1 second'
WHERE followee_id = $1`, star, base)
		return db, bundle, base
	}
	users := func(from, to int64) []int64 { // from down to to, inclusive
		var ids []int64
		for u := from; u >= to; u-- {
			ids = append(ids, u)
		}
		return ids
	}

	t.Run("ACursorStaysValidAfterItsEdgeIsGone", func(t *testing.T) {
		t.Parallel()
		db, _, _ := starWithFollowers(t)
		ctx := t.Context()
		page, err := db.Followers(ctx, star, nil, 5)
		require.NoError(t, err)
		require.Equal(t, users(119, 115), followUsers(page))
		last := page[len(page)-1]

		// The follower the cursor names unfollows, and another one before it.
		_, err = db.Unfollow(ctx, last.UserID, star)
		require.NoError(t, err)
		_, err = db.Unfollow(ctx, 113, star)
		require.NoError(t, err)

		next, err := db.Followers(ctx, star, &domain.FollowCursor{Since: last.Since, UserID: last.UserID}, 5)
		require.NoError(t, err)
		require.Equal(t, []int64{114, 112, 111, 110, 109}, followUsers(next))
	})

	t.Run("NewFollowsDoNotShiftLaterPages", func(t *testing.T) {
		t.Parallel()
		db, _, _ := starWithFollowers(t)
		ctx := t.Context()
		page, err := db.Followers(ctx, star, nil, 5)
		require.NoError(t, err)
		last := page[len(page)-1]

		requireFollows(t, db, 500, star) // newer than every edge: on a fresh first page only
		next, err := db.Followers(ctx, star, &domain.FollowCursor{Since: last.Since, UserID: last.UserID}, 5)
		require.NoError(t, err)
		require.Equal(t, users(114, 110), followUsers(next))
		fresh, err := db.Followers(ctx, star, nil, 1)
		require.NoError(t, err)
		require.Equal(t, []int64{500}, followUsers(fresh))
	})

	t.Run("EdgesAMicrosecondApartPageInOrder", func(t *testing.T) {
		t.Parallel()
		db, bundle, base := starWithFollowers(t)
		ctx := t.Context()
		// 200's edge is a microsecond newer than 110's, with a larger id.
		requireFollows(t, db, 200, star)
		exec(t, bundle.pool, `UPDATE follows SET created_at = $2::timestamptz + interval '10 seconds' + interval '1 microsecond'
WHERE followee_id = $1 AND follower_id = 200`, star, base)

		all := pageFollows(t, func(after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
			return db.Followers(ctx, star, after, limit)
		}, 1)
		want := append(append(users(119, 111), 200), users(110, 100)...)
		require.Equal(t, want, followUsers(all))
	})

	t.Run("FollowingPagesTheSameWay", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		for f := int64(100); f < 112; f++ {
			requireFollows(t, db, 7, f)
		}
		base := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
		exec(t, bundle.pool, `UPDATE follows SET created_at = $2::timestamptz + (followee_id / 3) * interval '1 second'
WHERE follower_id = $1`, 7, base)
		page, err := db.Following(ctx, 7, nil, 4)
		require.NoError(t, err)
		require.Equal(t, []int64{111, 110, 109, 108}, followUsers(page))
		last := page[len(page)-1]
		_, err = db.Unfollow(ctx, 7, 108)
		require.NoError(t, err)
		next, err := db.Following(ctx, 7, &domain.FollowCursor{Since: last.Since, UserID: last.UserID}, 100)
		require.NoError(t, err)
		require.Equal(t, users(107, 100), followUsers(next))
	})
}
