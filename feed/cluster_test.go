package feed_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// A replica promoted by a failover, or a restarted node, has no scripts: a
// pipeline of pushes meets NOSCRIPT on that node only. The calls that failed
// are sent again, and every entry written is counted once — resending the
// whole pipeline would report 0 for the calls that had succeeded.
func TestPushCountsEveryEntryWhenOneNodeForgotItsScripts(t *testing.T) {
	testenv.SkipWithoutRedisCluster(t)
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, _ := testenv.NewUniversalRedis(t)
	cluster := rdb.(*redis.ClusterClient)
	f := newFeeds(t, rdb, store.New(testenv.NewPool(t), nil), feed.Config{Prefix: prefix, Cluster: true})

	const author = 1
	followers := seedSpreadReaders(t, f, author)

	n, err := pushCount(f.Push(ctx, domain.Entry{PostID: 11, AuthorID: author}, followers, 0, true))
	require.NoError(t, err)
	require.Equal(t, len(followers), n)

	flushed := false
	require.NoError(t, cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		if flushed {
			return nil
		}
		flushed = true
		return node.ScriptFlush(ctx).Err()
	}))
	n, err = pushCount(f.Push(ctx, domain.Entry{PostID: 12, AuthorID: author}, followers, 0, true))
	require.NoError(t, err)
	require.Equal(t, len(followers), n, "every entry written is counted, once")
}

// seedSpreadReaders makes users 100–159, whose feeds spread over every
// primary of the test cluster, readers of author with an empty feed, and
// returns them.
func seedSpreadReaders(t *testing.T, f *feed.Feeds, author int64) []int64 {
	t.Helper()
	readers := map[int64][]int64{}
	var followers []int64
	for u := int64(100); u < 160; u++ {
		readers[u] = []int64{author}
		followers = append(followers, u)
	}
	require.NoError(t, f.SeedEmpty(context.Background(), readers))
	return followers
}
