package feed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
	"github.com/newsfeed/newsfeed/store"
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

// failingLoadStore fails the read of a rebuild (max_len posts from the
// top) once the test lets it go, as a database that went away would.
type failingLoadStore struct {
	*store.DB
	entered, release chan struct{}
}

func (s *failingLoadStore) FeedEntries(ctx context.Context, user int64, limit int) ([]domain.Post, error) {
	if limit == rebuildLimit {
		s.entered <- struct{}{}
		<-s.release
		return nil, errors.New("the database went away")
	}
	return s.DB.FeedEntries(ctx, user, limit)
}

// TestFailedRebuild: a rebuild that fails leaves no set behind, and reads
// of the set while it is being rebuilt do not keep it: a set under rebuild
// that stayed would take every push for feed.active_days, never trimmed.
func TestFailedRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &failingLoadStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	b := setupOn(t, feed.Config{RebuildWait: 100 * time.Millisecond}, func(db *store.DB) feed.Store {
		st.DB = db
		return st
	})
	b.follow(t, 10, 1)
	b.post(t, 1)

	failed := make(chan error, 1)
	go func() {
		_, err := b.feeds.Read(ctx, 10, 0, 20)
		failed <- err
	}()
	<-st.entered // the rebuild's token set is in Redis, its read held

	// Another reader waits for the rebuild, gives up and reads PostgreSQL.
	_, err := b.feeds.Read(ctx, 10, 0, 20)
	require.NoError(t, err)
	ttl, err := b.rdb.TTL(ctx, b.feedKey(10)).Result()
	require.NoError(t, err)
	require.Positive(t, ttl, "the set under rebuild is there")
	require.LessOrEqual(t, ttl, 2*feed.DefaultRebuildLock, "a read kept a set under rebuild alive for feed.active_days")

	close(st.release)
	require.ErrorContains(t, <-failed, "the database went away")
	for _, k := range feed.StorageKeys(b.prefix, 10) {
		n, err := b.rdb.Exists(ctx, k).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the failed rebuild left %s behind", k)
	}
}
