package feed_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/feed"
)

// TestRebuild: the operator's rebuild makes a feed that went wrong (here:
// follows changed in PostgreSQL behind Redis's back) the truth again, at
// once, and says what Redis now holds.
func TestRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a wrong feed is rebuilt from PostgreSQL now", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		b.follow(t, 10, 2)
		kept := b.post(t, 1)
		gone := b.post(t, 2)
		require.Equal(t, []int64{gone, kept}, b.readAll(t, 10, 20))
		// Behind Redis's back: 10 unfollows 2 and follows 3, who posts.
		_, err := b.db.Unfollow(ctx, 10, 2)
		require.NoError(t, err)
		b.follow(t, 10, 3)
		missed := b.post(t, 3)
		require.Equal(t, []int64{gone, kept}, b.readAll(t, 10, 20), "the feed is wrong")
		rebuilds := b.store.rebuilds.Load()

		stored, err := b.feeds.Rebuild(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, rebuilds+1, b.store.rebuilds.Load(), "one rebuild, from PostgreSQL")
		require.True(t, stored.Complete)
		require.True(t, stored.Whole, "fewer posts than max_len: all there are")
		require.Equal(t, []int64{kept, missed}, stored.IDs)
		require.Equal(t, stored, b.stored(t, 10))
		reads := b.store.reads.Load()
		require.Equal(t, []int64{missed, kept}, b.readAll(t, 10, 20))
		require.Equal(t, reads, b.store.reads.Load(), "the next read is served by Redis")
	})

	t.Run("it keeps max_len, the newest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{MaxLen: 3})
		b.follow(t, 10, 1)
		var posts []int64
		for range 5 {
			posts = append(posts, b.post(t, 1))
		}
		stored, err := b.feeds.Rebuild(ctx, 10)
		require.NoError(t, err)
		require.True(t, stored.Complete)
		require.False(t, stored.Whole)
		require.Equal(t, posts[2:], stored.IDs)
		require.Equal(t, reversed(posts), b.readAll(t, 10, 2), "older pages from PostgreSQL")
	})

	t.Run("a user nobody follows and who never read gets an empty feed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		stored, err := b.feeds.Rebuild(ctx, 77)
		require.NoError(t, err)
		require.True(t, stored.Exists && stored.Complete && stored.Whole)
		require.Empty(t, stored.IDs)
	})

	t.Run("a reader's rebuild begun before it gives way, and it completes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		b.follow(t, 10, 1)
		posts := []int64{b.post(t, 1), b.post(t, 1)}
		b.store.gate, b.store.entered = make(chan struct{}), make(chan struct{}, 8)
		read := make(chan []int64)
		go func() {
			page, err := b.feeds.Read(ctx, 10, 0, 20)
			var ids []int64
			if err == nil {
				for _, p := range page.Posts {
					ids = append(ids, p.ID)
				}
			}
			read <- ids
		}()
		<-b.store.entered // the reader's rebuild holds the lock and reads PostgreSQL
		rebuilt := make(chan error)
		var stored feed.Stored
		go func() {
			var err error
			stored, err = b.feeds.Rebuild(ctx, 10)
			rebuilt <- err
		}()
		// The operator's drop took the reader's half-built feed away.
		require.Eventually(t, func() bool { return b.rdb.Exists(ctx, b.feedKey(10)).Val() == 0 }, 10*time.Second, time.Millisecond)
		close(b.store.gate)
		require.NoError(t, <-rebuilt)
		require.Equal(t, reversed(posts), <-read, "the reader is answered all the same")
		require.True(t, stored.Complete)
		require.Equal(t, posts, stored.IDs)
		require.GreaterOrEqual(t, b.store.rebuilds.Load(), int32(2), "the reader's, then the operator's")
		require.Equal(t, reversed(posts), b.readAll(t, 10, 20))
	})
}
