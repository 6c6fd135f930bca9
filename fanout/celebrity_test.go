package fanout_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
)

// setFollowers sets the maintained follower count of author (the bulk
// follows of the tests do not maintain it).
func (b *testBundle) setFollowers(t *testing.T, author, n int64) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `
INSERT INTO follower_counts (user_id, followers) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET followers = EXCLUDED.followers`, author, n)
	require.NoError(t, err)
}

// inTimeline reports whether the author's timeline holds the post.
func (b *testBundle) inTimeline(t *testing.T, authorID, postID int64) bool {
	t.Helper()
	stored, err := feed.InspectTimeline(t.Context(), b.rdb, b.prefix, authorID)
	require.NoError(t, err)
	return stored.Has(postID)
}

// feedCommands counts the home feed keys (of its prefix) that Redis
// commands name, alone, in pipelines or as the keys of a script: one per
// feed a command touches.
type feedCommands struct {
	prefix string
	own    string // the hash tag of the author's own feed, which holds their posts: not counted
	n      atomic.Int64
}

func (c *feedCommands) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, c.prefix) && (c.own == "" || !strings.Contains(s, c.own)) {
				c.n.Add(1)
			}
		}
	}
}

func (c *feedCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *feedCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *feedCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds...)
		return next(ctx, cmds)
	}
}

// countedFeeds returns feeds like the bundle's on a Redis client of their own
// that counts the commands naming a home feed.
func (b *testBundle) countedFeeds(t *testing.T, cfg feed.Config) (*feed.Feeds, *feedCommands) {
	t.Helper()
	rdb := redis.NewClient(b.rdb.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	counter := &feedCommands{prefix: feed.KeyPrefix(b.prefix)}
	rdb.AddHook(counter)
	cfg.Prefix = b.prefix
	feeds, err := feed.New(rdb, b.db, cfg)
	require.NoError(t, err)
	return feeds, counter
}

// feedsHolding counts the users whose feed holds the post, in one round trip.
func (b *testBundle) feedsHolding(t *testing.T, users []int64, postID int64) int {
	t.Helper()
	feeds, err := feed.InspectMany(t.Context(), b.rdb, b.prefix, users)
	require.NoError(t, err)
	n := 0
	for _, f := range feeds {
		if f.Has(postID) {
			n++
		}
	}
	return n
}

func TestCelebrity(t *testing.T) {
	t.Parallel()
	const threshold = 100
	feedCfg := feed.Config{CelebrityThreshold: threshold}
	const author = int64(1)

	// celebrity sets up an author with followers, each with a feed, and a
	// worker whose feed commands are counted. An author pulled once is
	// marked so before the feeds are read (which then merge the timeline).
	celebrity := func(t *testing.T, followers int64, pulledOnce ...bool) (*testBundle, *feedCommands, []int64) {
		t.Helper()
		_, b := setup(t, fanout.Config{}, feedCfg)
		feeds, counter := b.countedFeeds(t, feedCfg)
		counter.own = "{" + strconv.FormatInt(author, 10) + "}"
		users := userRange(2, followers+1)
		b.follow(t, author, users)
		b.setFollowers(t, author, followers)
		if len(pulledOnce) > 0 && pulledOnce[0] {
			require.NoError(t, b.db.MarkPulled(t.Context(), author))
		}
		b.buildFeeds(t, users)
		run(t, b.newWorker(t, feeds, fanout.Config{PageSize: 100}))
		return b, counter, users
	}

	t.Run("DeleteOfAPulledPostTouchesNoFollowersFeed", func(t *testing.T) {
		t.Parallel()
		b, counter, followers := celebrity(t, 3*threshold)
		postID := b.post(t, author)
		b.deliver(t)
		require.Zero(t, b.feedsHolding(t, followers, postID), "no fan-out for a celebrity")
		require.Zero(t, counter.n.Load(), "the fan-out wrote feeds")

		require.NoError(t, b.db.DeletePost(t.Context(), postID, author))
		b.deliver(t)
		require.Zero(t, counter.n.Load(), "the delete of a post that no feed got sent commands to feeds")
		require.False(t, b.inTimeline(t, author, postID))
		cached, err := b.rdb.Get(t.Context(), b.prefix+"post:"+strconv.FormatInt(postID, 10)).Result()
		require.NoError(t, err)
		require.Equal(t, "-", cached, "the post is tombstoned")
		for _, u := range followers[:3] {
			require.Empty(t, b.readFeed(t, u))
		}
		b.requireQueueEmpty(t)
	})

	t.Run("DeleteOfAPushedPostCleansEveryFeed", func(t *testing.T) {
		t.Parallel()
		b, counter, followers := celebrity(t, threshold/2)
		postID := b.post(t, author)
		b.deliver(t)
		require.Equal(t, len(followers), b.feedsHolding(t, followers, postID))

		before := counter.n.Load()
		require.NoError(t, b.db.DeletePost(t.Context(), postID, author))
		b.deliver(t)
		require.GreaterOrEqual(t, counter.n.Load()-before, int64(len(followers)), "every follower's feed is cleaned")
		require.Zero(t, b.feedsHolding(t, followers, postID))
	})

	t.Run("PulledPostPushedOnRedeliveryAfterAllIsCleanedOnDelete", func(t *testing.T) {
		t.Parallel()
		// Pulled at first; redelivered once its author fell below the
		// threshold again (a former celebrity): pushed, and so cleaned.
		b, _, followers := celebrity(t, 2*threshold)
		postID := b.post(t, author)
		b.deliver(t)
		require.Zero(t, b.feedsHolding(t, followers, postID))

		b.setFollowers(t, author, threshold)
		b.redeliver(t, b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID)), 2)
		b.waitTickets(t, domain.PostCreated, "done", 2)
		require.Equal(t, len(followers), b.feedsHolding(t, followers, postID))

		require.NoError(t, b.db.DeletePost(t.Context(), postID, author))
		b.deliver(t)
		require.Zero(t, b.feedsHolding(t, followers, postID))
	})

	t.Run("PostPushedBeforeItsAuthorBecameACelebrityIsCleanedOnDelete", func(t *testing.T) {
		t.Parallel()
		// Pushed at first; redelivered once its author crossed the
		// threshold: pulled this time, but the feeds hold it.
		b, _, followers := celebrity(t, threshold)
		postID := b.post(t, author)
		b.deliver(t)
		require.Equal(t, len(followers), b.feedsHolding(t, followers, postID))

		b.setFollowers(t, author, 2*threshold)
		b.redeliver(t, b.rowOf(t, domain.PostCreated, fmt.Sprintf(`{"post_id": %d}`, postID)), 2)
		b.waitTickets(t, domain.PostCreated, "done", 2)

		require.NoError(t, b.db.DeletePost(t.Context(), postID, author))
		b.deliver(t)
		require.Zero(t, b.feedsHolding(t, followers, postID))
	})

	t.Run("FormerCelebrityIsPushedAndKeepsItsTimeline", func(t *testing.T) {
		t.Parallel()
		// Pulled once, below the threshold now: readers still merge the
		// timeline, so a new post goes there and into every feed.
		b, _, followers := celebrity(t, threshold, true)
		postID := b.post(t, author)
		b.deliver(t)

		require.Equal(t, len(followers), b.feedsHolding(t, followers, postID), "pushed")
		require.True(t, b.inTimeline(t, author, postID), "and in the timeline")
		_, pulled, err := b.db.Reach(t.Context(), author)
		require.NoError(t, err)
		require.True(t, pulled, "a former celebrity stays pulled")
		require.Equal(t, []int64{postID}, b.readFeed(t, followers[0]), "once in the feed")
	})
}
