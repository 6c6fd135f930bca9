package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

func TestWritePositionGrowsWithWrites(t *testing.T) {
	t.Parallel()
	db := store.New(testenv.NewPool(t), nil)
	ctx := t.Context()
	before, err := db.WritePosition(ctx)
	require.NoError(t, err)
	require.Positive(t, before)
	_, _, err = db.CreatePost(ctx, 1, "moves the log on", "")
	require.NoError(t, err)
	after, err := db.WritePosition(ctx)
	require.NoError(t, err)
	require.Greater(t, after, before)
}

// A read pool that replays nothing (here the primary itself, as when
// database.read_url names a replica that was promoted) has never replayed a
// position: a caller's own reads go to the primary. That holds too for a
// primary started after a crash, which reports the position it recovered to
// (CI's server once did, and this test failed there).
func TestReplayedIsFalseWithoutRecovery(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t)
	db := store.New(pool, pool)
	ok, err := db.Replayed(t.Context(), 0)
	require.NoError(t, err)
	require.False(t, ok)
}

// On the real replica (NEWSFEED_TEST_REPLICA_URL): once Replayed says the
// replica has replayed a write's position, the replica's listings show the
// write; while the replica lags on purpose, it says it has not.
func TestReplayedOnTheReplica(t *testing.T) {
	t.Parallel()
	testenv.SkipWithoutReplica(t)
	url := testenv.NewDatabaseURL(t)
	primary := testenv.Pool(t, url)
	replica := testenv.Pool(t, testenv.ReplicaDatabaseURL(t, url))
	db := store.New(primary, replica)
	ctx := t.Context()

	_, err := db.Follow(ctx, 1, 7)
	require.NoError(t, err)
	post, _, err := db.CreatePost(ctx, 1, "replayed", "")
	require.NoError(t, err)
	lsn, err := db.WritePosition(ctx)
	require.NoError(t, err)

	if testenv.ReplicaApplyDelay(t) >= time.Second {
		ok, err := db.Replayed(ctx, lsn)
		require.NoError(t, err)
		require.False(t, ok, "a replica that applies commits a second late or more has not replayed a write just made")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := db.Replayed(ctx, lsn)
		require.NoError(t, err)
		if ok {
			break
		}
		require.True(t, time.Now().Before(deadline), "the replica did not replay the position within a minute")
		time.Sleep(20 * time.Millisecond)
	}
	following, err := db.Following(ctx, 1, nil, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{7}, followUsers(following))
	posts, err := db.AuthorPosts(ctx, 1, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{post.ID}, postIDs(posts))
}
