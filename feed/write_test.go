package feed_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
)

func TestRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a deleted post leaves every feed that holds it", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		b.follow(t, 11, 1)
		keep, gone := b.post(t, 1), b.post(t, 1)
		require.Equal(t, []int64{gone, keep}, b.readAll(t, 10, 20))
		require.Equal(t, []int64{gone, keep}, b.readAll(t, 11, 20))
		_, err := b.pg.Exec(ctx, `UPDATE posts SET deleted_at = now() WHERE id = $1`, gone)
		require.NoError(t, err)
		require.NoError(t, b.feeds.Remove(ctx, []int64{10, 11, 12}, []int64{gone}))
		require.Equal(t, []int64{keep}, b.feedMembers(t, 10))
		require.Equal(t, []int64{keep}, b.feedMembers(t, 11))
		require.Zero(t, b.rdb.Exists(ctx, b.feedKey(12)).Val(), "no feed is made for a reader who has none")
		require.NoError(t, b.feeds.Remove(ctx, []int64{10}, nil), "nothing to remove")
	})

	t.Run("a prefix that loses its last post is dropped and rebuilt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{MaxLen: 2})
		b.follow(t, 10, 1)
		older, old, newer := b.post(t, 1), b.post(t, 1), b.post(t, 1)
		require.Equal(t, []int64{newer, old, older}, b.readAll(t, 10, 20)) // the feed keeps old and newer
		for _, id := range []int64{old, newer} {
			_, err := b.pg.Exec(ctx, `UPDATE posts SET deleted_at = now() WHERE id = $1`, id)
			require.NoError(t, err)
			require.NoError(t, b.feeds.Remove(ctx, []int64{10}, []int64{id}))
		}
		require.Zero(t, b.rdb.Exists(ctx, b.feedKey(10)).Val(), "a prefix of nothing knows no bound")
		require.Equal(t, []int64{older}, b.readAll(t, 10, 20))
		require.Equal(t, []int64{older}, b.feedMembers(t, 10), "rebuilt")
	})

	t.Run("a whole feed that loses its last post stays, whole and empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		only := b.post(t, 1)
		require.Equal(t, []int64{only}, b.readAll(t, 10, 20))
		_, err := b.pg.Exec(ctx, `UPDATE posts SET deleted_at = now() WHERE id = $1`, only)
		require.NoError(t, err)
		require.NoError(t, b.feeds.Remove(ctx, []int64{10}, []int64{only}))
		stored := b.stored(t, 10)
		require.True(t, stored.Complete && stored.Whole, "complete, whole history")
		require.Empty(t, stored.IDs)
		reads := b.store.reads.Load()
		require.Empty(t, b.readAll(t, 10, 20))
		require.Equal(t, reads, b.store.reads.Load(), "read from Redis alone")
	})
}

func TestDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{CelebrityThreshold: 100})
	b.follow(t, 10, 1)
	id := b.post(t, 1)
	require.Equal(t, []int64{id}, b.readAll(t, 10, 20))
	for _, k := range []string{"feed", "follows", "celebs"} {
		require.EqualValues(t, 1, b.rdb.Exists(ctx, b.prefix+k+":{10}").Val(), k)
	}
	require.NoError(t, b.feeds.Drop(ctx, 10))
	for _, k := range []string{"feed", "follows", "celebs"} {
		require.Zero(t, b.rdb.Exists(ctx, b.prefix+k+":{10}").Val(), k)
	}
	require.Equal(t, []int64{id}, b.readAll(t, 10, 20), "rebuilt on the next read")
}

// On a Redis Cluster a script may only touch keys of one slot: every script
// that changes many feeds runs once per feed. Cluster: true on a single
// Redis takes the same path.
func TestClusterPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{Cluster: true, MaxLen: 3, Backfill: 1})
	for _, u := range []int64{10, 11} {
		b.follow(t, u, 1)
		require.Empty(t, b.readAll(t, u, 20))
	}
	var posts []int64
	for range 5 {
		id := b.post(t, 1)
		posts = append([]int64{id}, posts...)
		n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10, 11, 12}, b.now(t), true))
		require.NoError(t, err)
		require.Equal(t, 2, n, "the two feeds that exist")
	}
	for _, u := range []int64{10, 11} {
		require.Equal(t, posts, b.readAll(t, u, 2))
		require.LessOrEqual(t, len(b.feedMembers(t, u)), 3)
	}
	require.NoError(t, b.feeds.Remove(ctx, []int64{10, 11}, []int64{posts[0]}))
	require.NotContains(t, b.feedMembers(t, 10), posts[0])
	require.NotContains(t, b.feedMembers(t, 11), posts[0])
}

func TestTimelines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a post goes only into a timeline that exists, and its author is pulled from then on", func(t *testing.T) {
		t.Parallel()
		b, posts := celebrityBundle(t, 1)
		timeline := b.prefix + "timeline:{1001}"
		require.Zero(t, b.rdb.Exists(ctx, timeline).Val(), "no read has built it yet")
		require.True(t, b.rdb.SIsMember(ctx, b.prefix+"pulled", "1001").Val())
		require.Equal(t, posts, b.readAll(t, 10, 20))
		require.EqualValues(t, 1, b.rdb.Exists(ctx, timeline).Val(), "the read built it")

		id := b.post(t, 1001)
		require.NoError(t, b.feeds.AddToTimeline(ctx, domain.Entry{PostID: id, AuthorID: 1001}))
		require.Equal(t, append([]int64{id}, posts...), b.readAll(t, 10, 20))
		_, err := b.pg.Exec(ctx, `UPDATE posts SET deleted_at = now() WHERE id = $1`, id)
		require.NoError(t, err)
		require.NoError(t, b.feeds.RemoveFromTimeline(ctx, domain.Entry{PostID: id, AuthorID: 1001}))
		require.Equal(t, posts, b.readAll(t, 10, 20))
		stored, err := feed.InspectTimeline(ctx, b.rdb, b.prefix, 1001)
		require.NoError(t, err)
		require.True(t, stored.Complete)
		require.False(t, stored.Has(id), "the post left the timeline")
	})

	t.Run("the set of pulled authors lost with Redis comes back from PostgreSQL", func(t *testing.T) {
		t.Parallel()
		b, posts := celebrityBundle(t, 2)
		require.Equal(t, posts, b.readAll(t, 10, 20))
		// Everything but the reader's feed: the pulled set, the cached
		// list, the timelines.
		keys, err := b.rdb.Keys(ctx, b.prefix+"*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			if k != b.feedKey(10) && k != b.prefix+"following:{10}" {
				require.NoError(t, b.rdb.Del(ctx, k).Err())
			}
		}
		// A new celebrity post, written only to the (missing) timeline.
		id := b.post(t, 1002)
		require.NoError(t, b.feeds.AddToTimeline(ctx, domain.Entry{PostID: id, AuthorID: 1002}))
		require.Equal(t, append([]int64{id}, posts...), b.readAll(t, 10, 20))
		require.True(t, b.rdb.SIsMember(ctx, b.prefix+"pulled", "0").Val(), "complete again")
	})

	t.Run("a new celebrity is merged from the first read after their first pulled post", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{CelebrityThreshold: 1})
		b.follow(t, 10, 1)
		b.follow(t, 11, 1)
		pushed := b.post(t, 1)
		_, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: pushed, AuthorID: 1}, []int64{10, 11}, b.now(t), true))
		require.NoError(t, err)
		require.Equal(t, []int64{pushed}, b.readAll(t, 10, 20)) // caches "no celebrities"
		// Author 1 is a celebrity now: the worker marks them pulled and
		// writes their post to the timeline alone.
		require.NoError(t, b.db.MarkPulled(ctx, 1))
		pulled := b.post(t, 1)
		require.NoError(t, b.feeds.AddToTimeline(ctx, domain.Entry{PostID: pulled, AuthorID: 1}))
		require.Equal(t, []int64{pulled, pushed}, b.readAll(t, 10, 20))
	})
}

func TestHydrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("an unreadable post cache entry is read again from PostgreSQL", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		id := b.post(t, 1)
		require.Equal(t, []int64{id}, b.readAll(t, 10, 20))
		for _, junk := range []string{"not json", ""} {
			require.NoError(t, b.rdb.Set(ctx, b.prefix+"post:"+strconv.FormatInt(id, 10), junk, time.Hour).Err())
			page, err := b.feeds.Read(ctx, 10, 0, 20)
			require.NoError(t, err)
			require.Len(t, page.Posts, 1, junk)
			raw, err := json.Marshal(page.Posts[0])
			require.NoError(t, err)
			var p struct {
				ID       int64 `json:"id"`
				AuthorID int64 `json:"author_id"`
				Body     string
			}
			require.NoError(t, json.Unmarshal(raw, &p))
			require.Equal(t, id, p.ID)
			require.EqualValues(t, 1, p.AuthorID)
			require.Equal(t, "post by 1", p.Body)
		}
	})
}

func TestIsCelebrity(t *testing.T) {
	t.Parallel()
	f := newFeeds(t, nil, nil, feed.Config{CelebrityThreshold: 10})
	require.False(t, f.IsCelebrity(10))
	require.True(t, f.IsCelebrity(11))
	require.False(t, newFeeds(t, nil, nil, feed.Config{}).IsCelebrity(1_000_000), "0 turns pulling off")
}

// Redis unreachable: every operation says so, with what it was doing; none
// answers as if it had succeeded.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{CelebrityThreshold: 1, Backfill: 2})
	b.follow(t, 10, 1)
	b.post(t, 1)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	f := newFeeds(t, dead, b.db, feed.Config{CelebrityThreshold: 1, Backfill: 2})
	_, err := f.Read(ctx, 10, 0, 20)
	require.ErrorContains(t, err, "read feed")
	_, err = pushCount(f.Push(ctx, domain.Entry{PostID: 1, AuthorID: 1}, []int64{10}, 0, true))
	require.ErrorContains(t, err, "push post 1")
	_, err = applyFollowState(ctx, b.db, f, 10, 1)
	require.ErrorContains(t, err, "apply follow state to feed 10")
	require.ErrorContains(t, applyUnfollowState(ctx, b.db, f, 10, 1), "apply follow state to feed 10")
	require.ErrorContains(t, f.Remove(ctx, []int64{10}, []int64{1}), "remove posts")
	require.ErrorContains(t, f.Drop(ctx, 10), "drop feed 10")
	require.ErrorContains(t, f.ForgetPost(ctx, 1), "forget post 1")
	require.ErrorContains(t, f.AddToTimeline(ctx, domain.Entry{PostID: 1, AuthorID: 1}), "timeline 1")
	require.ErrorContains(t, f.RemoveFromTimeline(ctx, domain.Entry{PostID: 1, AuthorID: 1}), "timeline 1")
}

// SeedEmpty leaves readers as their first read would: complete, whole, empty
// feeds that take their followees' posts and no one else's.
func TestSeedEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, feed.Config{})
	b.follow(t, 10, 1)
	b.follow(t, 11, 2)
	readers, err := b.db.FolloweesOf(ctx, []int64{10, 11, 12})
	require.NoError(t, err)
	require.Equal(t, []int64{1}, readers[10])
	require.Equal(t, []int64{2}, readers[11])
	require.Contains(t, readers, int64(12))
	require.Empty(t, readers[12])
	require.NoError(t, b.feeds.SeedEmpty(ctx, readers))
	reads := b.store.reads.Load()
	require.Empty(t, b.readAll(t, 12, 20))
	require.Equal(t, reads, b.store.reads.Load(), "a seeded feed is read from Redis alone")
	id := b.post(t, 1)
	// Readers 11 and 12 are in no page of author 1's followers; pushed to
	// all the same, with no position (0), the following hashes decide.
	n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{10, 11, 12}, 0, true))
	require.NoError(t, err)
	require.Equal(t, 1, n, "only reader 10 follows author 1")
	require.Equal(t, []int64{id}, b.readAll(t, 10, 20))
}
