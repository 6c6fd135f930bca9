package feed_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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

// On a Redis Cluster, a push makes one script call per primary for a page
// of followers, not one per follower: the keys of many slots go to their
// primary as arguments (callKeys in lua/common.lua). A primary refuses such a
// call when a slot of its keys moved since the client read the slot map
// (here: the whole move, and a map reloaded only on a redirection); the
// push runs again set by set, routed by each set's keys, and every feed
// holds the post once — its head's bytes say so, as reads keep one of each.
func TestPushByPrimaryFollowsAMovedSlot(t *testing.T) {
	testenv.SkipWithoutRedisCluster(t)
	ctx := t.Context()
	_, prefix, _ := testenv.NewUniversalRedis(t) // a prefix whose keys are deleted at the end
	opts, err := redis.ParseClusterURL(testenv.RedisClusterURL())
	require.NoError(t, err)
	opts.ClusterStateReloadInterval = time.Hour
	calls := &scriptCalls{}
	opts.NewClient = func(o *redis.Options) *redis.Client {
		node := redis.NewClient(o)
		node.AddHook(calls)
		return node
	}
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	f := newFeeds(t, rdb, store.New(testenv.NewPool(t), nil), feed.Config{Prefix: prefix, Cluster: true})

	const author = 1
	followers := seedSpreadReaders(t, f, author)
	const asOf = 1    // after the seeded feeds' last change: no following hash is asked
	var mu sync.Mutex // ForEachMaster calls its function side by side
	primaries := 0
	require.NoError(t, rdb.ForEachMaster(ctx, func(context.Context, *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		primaries++
		return nil
	}))
	_, err = f.Push(ctx, domain.Entry{PostID: 10, AuthorID: author}, followers, asOf, true) // loads the scripts
	require.NoError(t, err)

	calls.reset()
	n, err := pushCount(f.Push(ctx, domain.Entry{PostID: 11, AuthorID: author}, followers, asOf, true))
	require.NoError(t, err)
	require.Equal(t, len(followers), n)
	require.Equal(t, primaries, calls.count(), "script calls to push to %d followers on %d primaries", len(followers), primaries)

	moved := followers[0]
	key := feed.Key(prefix, moved)
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	owner, err := rdb.MasterForKey(ctx, key)
	require.NoError(t, err)
	m := testenv.NewSlotMove(t, int(slot), owner.Options().Addr)
	m.Begin()
	m.Finish()

	calls.reset()
	_, err = f.Push(ctx, domain.Entry{PostID: 12, AuthorID: author}, followers, asOf, true)
	require.NoError(t, err)
	require.Positive(t, calls.refused(), "no call was refused for a key of slot %d, moved from %s", slot, owner.Options().Addr)
	sets, err := feed.InspectMany(ctx, rdb, prefix, followers)
	require.NoError(t, err)
	for i, u := range followers {
		require.Equal(t, []int64{10, 11, 12}, sets[i].IDs, "feed of %d", u)
		head, err := rdb.StrLen(ctx, feed.StorageKeys(prefix, u)[1]).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1+8*3, head, "the head of %d's feed holds 3 entries, each once", u)
	}
	t.Logf("slot %d moved from %s: %d script calls refused, then every feed took the post set by set", slot, owner.Options().Addr, calls.refused())
}

// scriptCalls is a hook that counts the script calls its client's nodes
// ran, and those a node refused for a key it does not serve.
type scriptCalls struct {
	mu              sync.Mutex
	calls, nonLocal int
}

func (s *scriptCalls) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls, s.nonLocal = 0, 0
}

func (s *scriptCalls) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *scriptCalls) refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nonLocal
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range cmds {
			if name := c.Name(); name != "evalsha" && name != "eval" {
				continue
			}
			s.calls++
			if c.Err() != nil && strings.Contains(c.Err().Error(), "non local key") {
				s.nonLocal++
			}
		}
		return err
	}
}
