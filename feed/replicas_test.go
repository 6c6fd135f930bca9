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

	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/replicas"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// A primary that lists no replica has none that a failover could promote:
// writes to it do not wait (a shard whose replica took over from its dead
// primary goes on taking fan-out), though WaitReplicas asks for one. They
// still write the replication marker, so the wait did run.
func TestWritesDoNotWaitOnAPrimaryWithoutReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if n, _ := connectedReplicas(ctx, b.rdb); n > 0 {
		t.Skipf("the test Redis has %d replicas; this test needs one without", n)
	}
	const author, reader = 1, 2
	b.follow(t, reader, author)
	require.NoError(t, b.feeds.SeedEmpty(ctx, map[int64][]int64{reader: {author}}))
	post := b.post(t, author)
	n, err := b.feeds.Push(ctx, author, post, []int64{reader})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	markers, err := b.rdb.Keys(ctx, b.prefix+"replicated:*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, markers, "the wait ran")
}

// On the Redis Cluster, a push waits for the replica of every primary it
// wrote to: with the replicas well it succeeds; with the replica of one
// reader's primary stopped (SIGSTOP: alive, silent), the push fails once
// the timeout has passed, and succeeds again when the replica goes on.
func TestPushWaitsForTheReplicaOfEachPrimary(t *testing.T) {
	if testenv.RedisClusterURL() == "" {
		t.Skip("needs the Redis Cluster: make cluster-up; NEWSFEED_TEST_REDIS_CLUSTER_URL")
	}
	testenv.HoldReplicas(t)
	ctx := context.Background()
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	cluster := rdb.(*redis.ClusterClient)
	f := feed.New(rdb, store.New(testenv.NewPool(t), nil), feed.Config{
		Prefix: prefix, Cluster: true, WaitReplicas: 1, WaitTimeout: 150 * time.Millisecond,
	})
	const author = 1
	readers := map[int64][]int64{}
	var followers []int64
	for u := int64(100); u < 160; u++ { // spread over every primary
		readers[u] = []int64{author}
		followers = append(followers, u)
	}
	require.NoError(t, f.SeedEmpty(ctx, readers))
	n, err := f.Push(ctx, author, 11, followers)
	require.NoError(t, err, "every primary has a replica that answers")
	require.Equal(t, len(followers), n)

	// Stop the replica of the primary that holds follower 100's feed.
	primary, err := cluster.MasterForKey(ctx, feed.Key(prefix, followers[0]))
	require.NoError(t, err)
	resume := testenv.StopReplicaOf(t, primary)

	start := time.Now()
	_, err = f.Push(ctx, author, 12, followers)
	var se *replicas.ShortError
	require.True(t, errors.As(err, &se), "want a ShortError, got %v", err)
	require.Equal(t, primary.Options().Addr, se.Node)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "it waited for the replica")

	// Every other write a worker makes to a feed of that shard waits too.
	u := followers[0]
	short := func(what string, err error) {
		t.Helper()
		var se *replicas.ShortError
		require.True(t, errors.As(err, &se), "%s: want a ShortError, got %v", what, err)
	}
	short("remove", f.Remove(ctx, []int64{u}, []int64{11}))
	_, err = f.Followed(ctx, u, 3)
	short("follow", err)
	short("unfollow", f.Unfollowed(ctx, u, 3))
	short("drop", f.Drop(ctx, u))
	resume()

	n, err = f.Push(ctx, author, 12, followers)
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
