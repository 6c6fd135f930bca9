package store_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// TestUnreachableDatabase: when PostgreSQL cannot answer, every call
// returns an error that names what failed, and never an answer a caller
// would act on (not found, forbidden, not following, nothing to do).
func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	pool.Close()
	db := store.New(pool, nil)

	// Each call returns its error; the name is what the error must say.
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"follow", func(ctx context.Context) error {
			created, err := db.Follow(ctx, 1, 2)
			require.False(t, created.Changed)
			return err
		}},
		{"unfollow", func(ctx context.Context) error {
			removed, err := db.Unfollow(ctx, 1, 2)
			require.False(t, removed.Changed)
			return err
		}},
		{"follow state", func(ctx context.Context) error {
			_, err := db.FollowState(ctx, 1, 2)
			return err
		}},
		{"list follows", func(ctx context.Context) error {
			f, err := db.Followers(ctx, 1, nil, 10)
			require.Nil(t, f)
			return err
		}},
		{"list follows", func(ctx context.Context) error {
			f, err := db.Following(ctx, 1, &domain.FollowCursor{Since: time.Now(), UserID: 5}, 10)
			require.Nil(t, f)
			return err
		}},
		{"follower ids", func(ctx context.Context) error {
			ids, err := db.FollowerIDs(ctx, 1, 0, 10)
			require.Nil(t, ids)
			return err
		}},
		{"follower count", func(ctx context.Context) error {
			_, err := db.FollowerCount(ctx, 1)
			return err
		}},
		{"follower count", func(ctx context.Context) error {
			_, _, err := db.Reach(ctx, 1)
			return err
		}},
		{"mark pulled", func(ctx context.Context) error { return db.MarkPulled(ctx, 1) }},
		{"followees", func(ctx context.Context) error {
			ids, _, err := db.Followees(ctx, 1)
			require.Nil(t, ids)
			return err
		}},
		{"followees of users", func(ctx context.Context) error {
			m, err := db.FolloweesOf(ctx, []int64{1})
			require.Nil(t, m)
			return err
		}},
		{"pulled authors", func(ctx context.Context) error {
			ids, err := db.PulledAuthors(ctx)
			require.Nil(t, ids)
			return err
		}},
		{"author post ids", func(ctx context.Context) error {
			ids, err := db.AuthorPostIDsBetween(ctx, 1, 0, 10, 10)
			require.Nil(t, ids)
			return err
		}},
		{"create post", func(ctx context.Context) error {
			_, created, err := db.CreatePost(ctx, 1, "x", "")
			require.False(t, created)
			return err
		}},
		{"create post", func(ctx context.Context) error {
			_, created, err := db.CreatePost(ctx, 1, "x", "some-key")
			require.False(t, created)
			return err
		}},
		{"get post 7", func(ctx context.Context) error {
			_, err := db.Post(ctx, 7)
			return err
		}},
		{"post 7 facts", func(ctx context.Context) error {
			f, err := db.PostFacts(ctx, 7)
			require.False(t, f.Found)
			return err
		}},
		{"get posts by id", func(ctx context.Context) error {
			_, err := db.PostsByID(ctx, []int64{7})
			return err
		}},
		{"delete post 7", func(ctx context.Context) error { return db.DeletePost(ctx, 7, 1) }},
		{"author posts", func(ctx context.Context) error {
			_, err := db.AuthorPosts(ctx, 1, 0, 10)
			return err
		}},
		{"followee posts", func(ctx context.Context) error {
			_, err := db.FolloweePosts(ctx, 1, math.MaxInt64, 10)
			return err
		}},
		{"author post ids", func(ctx context.Context) error {
			_, err := db.AuthorPostIDsSince(ctx, 1, 0, 10)
			return err
		}},
		{"claim outbox batch", func(ctx context.Context) error {
			_, err := db.Claim(ctx, 10, time.Minute)
			return err
		}},
		{"mark outbox rows published", func(ctx context.Context) error {
			return db.MarkPublished(ctx, []int64{1}, []string{"1-0"}, time.Minute)
		}},
		{"extend outbox row 1", func(ctx context.Context) error { return db.Extend(ctx, 1, time.Minute) }},
		{"fail outbox row 1", func(ctx context.Context) error {
			dead, err := db.Fail(ctx, 1, 3, time.Minute, "x")
			require.False(t, dead)
			return err
		}},
		{"bury outbox row 1", func(ctx context.Context) error { return db.Bury(ctx, 1, "x") }},
		{"retry dead outbox rows", func(ctx context.Context) error {
			n, err := db.RetryDead(ctx, 0)
			require.Zero(t, n)
			return err
		}},
		{"delete finished outbox rows", func(ctx context.Context) error {
			n, err := db.DeleteFinished(ctx, time.Hour, 10)
			require.Zero(t, n)
			return err
		}},
		{"outbox stats", func(ctx context.Context) error {
			s, err := db.OutboxStats(ctx)
			require.Equal(t, domain.OutboxStats{}, s)
			return err
		}},
		{"chunk boundaries", func(ctx context.Context) error {
			_, err := db.ChunkBoundaries(ctx, 1, 10)
			return err
		}},
		{"split fan-out of outbox row 1", func(ctx context.Context) error {
			_, err := db.SplitFanout(ctx, 1, []domain.ChunkPayload{{PostID: 1, AuthorID: 1}})
			return err
		}},
		{"", func(ctx context.Context) error { return db.Ping(ctx) }},
	}
	for _, c := range calls {
		err := c.call(t.Context())
		require.Error(t, err, c.name)
		require.ErrorContains(t, err, c.name)
		require.False(t, errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrForbidden),
			"%s: a failure is not an answer: %v", c.name, err)
	}
}

// TestCancelledContext: a caller that gave up gets an error saying so.
func TestCancelledContext(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	createPosts(t, db, 1, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := db.Post(ctx, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, domain.ErrNotFound)
	f, err := db.PostFacts(ctx, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, f.Found)
	require.ErrorIs(t, db.DeletePost(ctx, 1, 1), context.Canceled)
	_, err = db.FollowerIDRange(ctx, 1, 0, math.MaxInt64, 10)
	require.ErrorIs(t, err, context.Canceled)

	// Nothing was changed.
	p, err := db.Post(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), p.AuthorID)
}

// TestQueriesThatFailWhileTheirRowsStream: an error that PostgreSQL raises
// while it sends the rows (here: a negative LIMIT) reaches the caller as an
// error, not as a short or empty page.
func TestQueriesThatFailWhileTheirRowsStream(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := t.Context()
	requireFollows(t, db, 1, 2)
	createPosts(t, db, 2, 2)

	cases := []struct {
		name string
		call func() (int, error)
	}{
		{"list follows", func() (int, error) { f, err := db.Followers(ctx, 2, nil, -1); return len(f), err }},
		{"follower ids", func() (int, error) { ids, err := db.FollowerIDs(ctx, 2, 0, -1); return len(ids), err }},
		{"read posts", func() (int, error) { p, err := db.AuthorPosts(ctx, 2, 0, -1); return len(p), err }},
		{"read posts", func() (int, error) { p, err := db.FolloweePosts(ctx, 1, math.MaxInt64, -1); return len(p), err }},
		{"author post ids", func() (int, error) { ids, err := db.AuthorPostIDsSince(ctx, 2, 0, -1); return len(ids), err }},
	}
	for _, c := range cases {
		n, err := c.call()
		require.ErrorContains(t, err, c.name)
		require.ErrorContains(t, err, "LIMIT must not be negative")
		require.Zero(t, n)
	}
}
