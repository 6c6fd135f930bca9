package feed_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/replicas"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// With redis.wait_replicas, a write that no replica has is not done: on a
// Redis without replicas every feed write a worker makes fails after the
// timeout with an error that is domain.ErrUnavailable (tried again, not
// counted against the event), and is on the primary all the same, so the
// retry finds it there. Without the wait each would succeed, and a failover
// could take it away after its event was finished.
func TestWritesWaitForReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if n, _ := connectedReplicas(ctx, b.rdb); n > 0 {
		t.Skipf("the test Redis has %d replicas; this test needs one without", n)
	}
	const author, reader, stranger = 1, 2, 3
	b.follow(t, reader, author)
	require.NoError(t, b.feeds.SeedEmpty(ctx, map[int64][]int64{reader: {author}}))
	post := b.post(t, author)

	unavailable := func(what string, err error) {
		t.Helper()
		var re *replicas.Error
		require.True(t, errors.As(err, &re), "%s: want a replicas.Error, got %v", what, err)
		require.ErrorIs(t, err, domain.ErrUnavailable, what)
		require.Equal(t, int64(0), re.Acked, what)
		require.Equal(t, 1, re.Want, what)
	}
	n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: post, AuthorID: author}, []int64{reader}, 0, true))
	unavailable("push", err)
	require.Equal(t, 1, n, "the entry is written and counted; only its durability is in doubt")
	require.True(t, b.stored(t, reader).Has(post), "the entry is on the primary")

	unavailable("remove", b.feeds.Remove(ctx, []int64{reader}, []int64{post}))
	unavailable("forget", b.feeds.ForgetPost(ctx, post))
	for _, u := range []int64{reader, stranger} {
		_, err = b.db.Follow(ctx, u, 4)
		require.NoError(t, err)
	}
	_, err = applyFollowState(ctx, b.db, b.feeds, reader, 4)
	unavailable("follow", err)
	_, err = applyFollowState(ctx, b.db, b.feeds, stranger, 4) // no feed: the script deletes, which must reach a replica too
	unavailable("follow without a feed", err)
	_, err = b.db.Unfollow(ctx, reader, 4)
	require.NoError(t, err)
	unavailable("unfollow", applyUnfollowState(ctx, b.db, b.feeds, reader, 4))
	unavailable("timeline add", b.feeds.AddToTimeline(ctx, domain.Entry{PostID: post, AuthorID: author}))
	unavailable("timeline remove", b.feeds.RemoveFromTimeline(ctx, domain.Entry{PostID: post, AuthorID: author}))
	unavailable("drop", b.feeds.Drop(ctx, reader))

	// Zero replicas asked for: nothing waits.
	plain := newFeeds(t, b.rdb, b.db, feed.Config{Prefix: b.prefix})
	require.NoError(t, plain.SeedEmpty(ctx, map[int64][]int64{reader: {author}}))
	_, err = pushCount(plain.Push(ctx, domain.Entry{PostID: post, AuthorID: author}, []int64{reader}, 0, true))
	require.NoError(t, err)
}

// On the Redis Cluster, a push waits for the replica of every primary it
// wrote to: with the replicas well it succeeds; with the replica of one
// reader's primary stopped (SIGSTOP: alive, silent), the push fails once
// the timeout has passed, and succeeds again when the replica goes on.
func TestPushWaitsForTheReplicaOfEachPrimary(t *testing.T) {
	testenv.SkipWithoutRedisCluster(t)
	testenv.HoldReplicas(t)
	ctx := context.Background()
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	cluster := rdb.(*redis.ClusterClient)
	db := store.New(testenv.NewPool(t), nil)
	f := newFeeds(t, rdb, db, feed.Config{
		Prefix: prefix, Cluster: true, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond,
	})
	const author = 1
	followers := seedSpreadReaders(t, f, author)
	n, err := pushCount(f.Push(ctx, domain.Entry{PostID: 11, AuthorID: author}, followers, 0, true))
	require.NoError(t, err, "every primary has a replica that answers")
	require.Equal(t, len(followers), n)

	// Stop the replica of the primary that holds follower 100's feed.
	primary, err := cluster.MasterForKey(ctx, feed.Key(prefix, followers[0]))
	require.NoError(t, err)
	resume := testenv.StopReplicaOf(t, primary)

	start := time.Now()
	_, err = pushCount(f.Push(ctx, domain.Entry{PostID: 12, AuthorID: author}, followers, 0, true))
	var re *replicas.Error
	require.True(t, errors.As(err, &re), "want a replicas.Error, got %v", err)
	require.Equal(t, primary.Options().Addr, re.Node)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "it waited for the replica")

	// Feeds on the other primaries are not held back.
	var elsewhere []int64
	for _, u := range followers {
		node, err := cluster.MasterForKey(ctx, feed.Key(prefix, u))
		require.NoError(t, err)
		if node.Options().Addr != primary.Options().Addr {
			elsewhere = append(elsewhere, u)
		}
	}
	require.NotEmpty(t, elsewhere)
	n, err = pushCount(f.Push(ctx, domain.Entry{PostID: 13, AuthorID: author}, elsewhere, 0, true))
	require.NoError(t, err, "the other shards' replicas answer")
	require.Equal(t, len(elsewhere), n)

	// Every other write a worker makes to a feed of that shard waits too.
	u := followers[0]
	short := func(what string, err error) {
		t.Helper()
		var re *replicas.Error
		require.True(t, errors.As(err, &re), "%s: want a replicas.Error, got %v", what, err)
		require.Equal(t, primary.Options().Addr, re.Node, what)
	}
	short("remove", f.Remove(ctx, []int64{u}, []int64{11}))
	_, err = db.Follow(ctx, u, 3)
	require.NoError(t, err)
	_, err = applyFollowState(ctx, db, f, u, 3)
	short("follow", err)
	_, err = db.Unfollow(ctx, u, 3)
	require.NoError(t, err)
	short("unfollow", applyUnfollowState(ctx, db, f, u, 3))
	short("drop", f.Drop(ctx, u))
	resume()

	// The retry of a push that failed is not a first one (the worker's
	// next attempt, see fanout's firstDelivery).
	n, err = pushCount(f.Push(ctx, domain.Entry{PostID: 12, AuthorID: author}, followers, 0, false))
	require.NoError(t, err, "the replica answers again")
	require.Zero(t, n, "the first try had written every entry")
}

func connectedReplicas(ctx context.Context, c redis.Cmdable) (int, error) {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no connected_slaves in INFO replication")
}
