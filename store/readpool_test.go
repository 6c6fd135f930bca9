package store_test

import (
	"math"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// followUsers returns the user ids of a follow listing.
func followUsers(list []domain.Follow) []int64 {
	ids := make([]int64, len(list))
	for i, f := range list {
		ids[i] = f.UserID
	}
	return ids
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// TestReadPool gives the store a read pool on another database than the
// primary, holding other rows (as a replica that lags far behind would), and
// shows which database answers each call: database.read_url.
func TestReadPool(t *testing.T) {
	t.Parallel()
	primaryPool, readPool := testenv.NewPool(t), testenv.NewPool(t)
	db := store.New(primaryPool, readPool)
	onPrimary, onRead := store.New(primaryPool, nil), store.New(readPool, nil)
	ctx := t.Context()
	const author, reader = 10, 20

	// The primary: followers 101, 102 of the author, the reader follows 11
	// and the author; posts "primary".
	for _, e := range [][2]int64{{101, author}, {102, author}, {reader, author}, {reader, 11}} {
		_, err := onPrimary.Follow(ctx, e[0], e[1])
		require.NoError(t, err)
	}
	primaryPosts := createPostsWithBody(t, onPrimary, author, "primary", 3)
	// The read database: other followers and followees, and other posts
	// (with the same ids as the primary's: both sequences start at 1).
	for _, e := range [][2]int64{{201, author}, {reader, 12}} {
		_, err := onRead.Follow(ctx, e[0], e[1])
		require.NoError(t, err)
	}
	readPosts := createPostsWithBody(t, onRead, author, "read", 2)
	require.Equal(t, primaryPosts[0].ID, readPosts[0].ID)

	t.Run("ListingsReadTheReadPool", func(t *testing.T) {
		followers, err := db.Followers(ctx, author, nil, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{201}, followUsers(followers))

		following, err := db.Following(ctx, reader, nil, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{12}, followUsers(following))

		posts, err := db.AuthorPosts(ctx, author, 0, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{readPosts[1].ID, readPosts[0].ID}, postIDs(posts))
		for _, p := range posts {
			require.Equal(t, "read", p.Body)
		}
	})

	t.Run("FanOutAndFeedReadsReadThePrimary", func(t *testing.T) {
		ids, err := db.FollowerIDRange(ctx, author, 0, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{reader, 101, 102}, ids)
		ids, err = db.FollowerIDs(ctx, author, 0, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{reader, 101, 102}, ids)
		bounds, err := db.ChunkBoundaries(ctx, author, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{101}, bounds)

		posts, err := db.FolloweePosts(ctx, reader, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{primaryPosts[2].ID, primaryPosts[1].ID, primaryPosts[0].ID}, postIDs(posts))
		for _, p := range posts {
			require.Equal(t, "primary", p.Body)
		}
		ids, err = db.AuthorPostIDsSince(ctx, author, 0, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{primaryPosts[2].ID, primaryPosts[1].ID, primaryPosts[0].ID}, ids)

		// Post 3 exists only on the primary.
		facts, err := db.PostFacts(ctx, primaryPosts[2].ID)
		require.NoError(t, err)
		require.True(t, facts.Found)
		require.False(t, facts.Deleted)
		require.Equal(t, int64(author), facts.AuthorID)
		p, err := db.Post(ctx, primaryPosts[2].ID)
		require.NoError(t, err)
		require.Equal(t, "primary", p.Body)
		byID, err := db.PostsByID(ctx, []int64{primaryPosts[0].ID})
		require.NoError(t, err)
		require.Len(t, byID, 1)
		require.Equal(t, "primary", byID[0].Body)

		ok, err := db.IsFollowing(ctx, reader, 11)
		require.NoError(t, err)
		require.True(t, ok, "the primary's edge")
		ok, err = db.IsFollowing(ctx, reader, 12)
		require.NoError(t, err)
		require.False(t, ok, "the read database's edge")
		n, err := db.FollowerCount(ctx, author)
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		followees, _, err := db.Followees(ctx, reader)
		require.NoError(t, err)
		slices.Sort(followees)
		require.Equal(t, []int64{author, 11}, followees, "a rebuild's following hash comes from the primary")
	})

	t.Run("WritesGoToThePrimary", func(t *testing.T) {
		_, err := db.Follow(ctx, 301, author)
		require.NoError(t, err)
		p, _, err := db.CreatePost(ctx, author, "written", "")
		require.NoError(t, err)
		require.NoError(t, db.MarkPulled(ctx, 55))

		for _, pool := range []*pgxpool.Pool{primaryPool, readPool} {
			want := 0
			if pool == primaryPool {
				want = 1
			}
			require.Equal(t, want, countRows(t, pool, "SELECT count(*) FROM follows WHERE follower_id = 301"))
			require.Equal(t, want, countRows(t, pool, "SELECT count(*) FROM posts WHERE body = 'written'"))
			require.Equal(t, want, countRows(t, pool, "SELECT count(*) FROM follower_counts WHERE user_id = 55 AND pulled"))
		}
		// And the listings do not see them until the read database does.
		followers, err := db.Followers(ctx, author, nil, 10)
		require.NoError(t, err)
		require.Equal(t, []int64{201}, followUsers(followers))
		posts, err := db.AuthorPosts(ctx, author, 0, 10)
		require.NoError(t, err)
		require.NotContains(t, postIDs(posts), p.ID)
	})

	t.Run("WithoutAReadPoolListingsReadThePrimary", func(t *testing.T) {
		followers, err := onPrimary.Followers(ctx, author, nil, 10)
		require.NoError(t, err)
		require.Subset(t, followUsers(followers), []int64{101, 102, reader})
		require.NotContains(t, followUsers(followers), int64(201))
		posts, err := onPrimary.AuthorPosts(ctx, author, 0, 10)
		require.NoError(t, err)
		for _, p := range posts {
			require.NotEqual(t, "read", p.Body)
		}
	})

	t.Run("AReadPoolThatFailsFailsOnlyTheListings", func(t *testing.T) {
		t.Parallel()
		closed := testenv.NewPool(t)
		closed.Close()
		db := store.New(primaryPool, closed)

		_, err := db.Followers(ctx, author, nil, 10)
		require.ErrorContains(t, err, "list follows")
		_, err = db.Following(ctx, reader, nil, 10)
		require.ErrorContains(t, err, "list follows")
		_, err = db.AuthorPosts(ctx, author, 0, 10)
		require.ErrorContains(t, err, "author posts")

		ids, err := db.FollowerIDRange(ctx, author, 0, math.MaxInt64, 10)
		require.NoError(t, err)
		require.Contains(t, ids, int64(101))
		_, err = db.FolloweePosts(ctx, reader, math.MaxInt64, 10)
		require.NoError(t, err)
		require.NoError(t, db.Ping(ctx), "Ping checks the primary")
	})
}

// createPostsWithBody creates n posts by author with body and returns them oldest first.
func createPostsWithBody(t *testing.T, db *store.DB, author int64, body string, n int) []domain.Post {
	t.Helper()
	posts := make([]domain.Post, n)
	for i := range posts {
		p, created, err := db.CreatePost(t.Context(), author, body, "")
		require.NoError(t, err)
		require.True(t, created)
		posts[i] = p
	}
	return posts
}
