package feed_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/feed"
)

// TestReadersWhoFollowMany: a reader who follows more accounts than
// FollowingThreshold keeps no feed in Redis — a push writes nothing for
// them — and reads the truth from PostgreSQL; crossing the threshold either
// way, by a follow, an unfollow or while a rebuild reads, never leaves a
// feed in Redis that pushes would not keep.
func TestReadersWhoFollowMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const reader = 10
	// followN makes reader follow authors 1..n, each with a post.
	followN := func(t *testing.T, b *bundle, n int64) {
		t.Helper()
		for a := int64(1); a <= n; a++ {
			b.follow(t, reader, a)
			b.post(t, a)
		}
	}
	// requireNoFeed: Redis holds no key of the reader's but, when marked,
	// the mark of one who follows many.
	requireNoFeed := func(t *testing.T, b *bundle, marked bool) {
		t.Helper()
		keys, err := b.rdb.Keys(ctx, b.prefix+"*{10}").Result()
		require.NoError(t, err)
		var want []string
		if marked {
			want = []string{b.prefix + "followsmany:{10}"}
		}
		require.ElementsMatch(t, want, keys, "the reader's keys in Redis")
	}
	// readAcross reads the reader's first page while their rebuild is held
	// (entered, then gate: fields of b.store the caller set), makes change
	// meanwhile, and requires the page to be the feed before the change or
	// after it.
	readAcross := func(t *testing.T, b *bundle, entered <-chan struct{}, gate chan struct{}, change func()) {
		t.Helper()
		before := b.truth(t, reader)
		done := make(chan []int64)
		go func() {
			page, err := b.feeds.Read(ctx, reader, 0, 20)
			if err != nil {
				t.Error(err)
			}
			ids := make([]int64, len(page.Posts))
			for i, p := range page.Posts {
				ids[i] = p.ID
			}
			done <- ids
		}()
		<-entered
		change()
		after := b.truth(t, reader)
		close(gate)
		got := <-done
		require.True(t, slices.Equal(got, before) || slices.Equal(got, after),
			"the page %v is the feed before the change %v or after %v", got, before, after)
	}

	t.Run("a reader over it keeps no feed and reads the truth", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{FollowingThreshold: 3})
		followN(t, b, 4)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 2))
		requireNoFeed(t, b, true)
		require.Zero(t, b.store.rebuilds.Load(), "no posts read to fill a feed")
		require.EqualValues(t, 1, b.store.graphs.Load(), "one count of whom they follow")

		id := b.post(t, 2)
		res, err := b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 2}, []int64{reader}, b.now(t), true)
		require.NoError(t, err)
		require.Zero(t, res.Added, "the fan-out writes nothing for them")
		require.Equal(t, []int64{reader}, res.Missing, "their streams are told to read again")
		requireNoFeed(t, b, true)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		require.Zero(t, b.store.rebuilds.Load())
		require.EqualValues(t, 1, b.store.graphs.Load(), "while the mark stands, reads ask no rebuild")
	})

	t.Run("a follow that takes them over it drops their feed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{FollowingThreshold: 3})
		followN(t, b, 3)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		require.True(t, b.stored(t, reader).Complete, "at the threshold: a feed in Redis")

		b.follow(t, reader, 4)
		_, err := applyFollowState(ctx, b.db, b.feeds, reader, 4)
		require.NoError(t, err)
		requireNoFeed(t, b, false)
		b.post(t, 4)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		requireNoFeed(t, b, true)
	})

	t.Run("an unfollow that takes them under it gives them a feed again", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{FollowingThreshold: 3})
		followN(t, b, 5)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		requireNoFeed(t, b, true)

		b.unfollow(t, reader, 5) // and applies it
		requireNoFeed(t, b, true)
		b.unfollow(t, reader, 4)
		requireNoFeed(t, b, false)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		require.True(t, b.stored(t, reader).Complete, "rebuilt: a feed in Redis again")
		id := b.post(t, 1)
		n, err := pushCount(b.feeds.Push(ctx, domain.Entry{PostID: id, AuthorID: 1}, []int64{reader}, b.now(t), true))
		require.NoError(t, err)
		require.Equal(t, 1, n, "pushed to again")
		reads := b.store.reads.Load()
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		require.Equal(t, reads, b.store.reads.Load(), "served by Redis")
	})

	t.Run("a follow over it while a rebuild reads leaves no feed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{FollowingThreshold: 3})
		followN(t, b, 3)
		b.post(t, 4)
		b.store.gate, b.store.entered = make(chan struct{}), make(chan struct{}, 8)
		// The rebuild counted 3 followees and reads their posts.
		readAcross(t, b, b.store.entered, b.store.gate, func() {
			b.follow(t, reader, 4)
			_, err := applyFollowState(ctx, b.db, b.feeds, reader, 4)
			require.NoError(t, err)
		})
		requireNoFeed(t, b, false)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		requireNoFeed(t, b, true)
	})

	t.Run("an unfollow under it while a rebuild counts leaves no mark", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{FollowingThreshold: 3})
		followN(t, b, 4)
		b.store.graphGate, b.store.graphEntered = make(chan struct{}), make(chan struct{}, 8)
		// The rebuild counted 4 followees.
		readAcross(t, b, b.store.graphEntered, b.store.graphGate, func() { b.unfollow(t, reader, 4) })
		requireNoFeed(t, b, false)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		require.True(t, b.stored(t, reader).Complete, "under it: a feed in Redis")
	})

	t.Run("the operator's rebuild says they are read from PostgreSQL", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{FollowingThreshold: 3})
		followN(t, b, 4)
		stored, err := b.feeds.Rebuild(ctx, reader)
		require.NoError(t, err)
		require.Equal(t, feed.Stored{FollowsMany: true}, stored)
		requireNoFeed(t, b, true)
	})

	t.Run("0 keeps a feed for every reader", func(t *testing.T) {
		t.Parallel()
		b := setup(t, feed.Config{})
		followN(t, b, 4)
		require.Equal(t, b.truth(t, reader), b.readAll(t, reader, 20))
		require.True(t, b.stored(t, reader).Complete)
	})
}
