package fanout_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
)

// followRow returns the outbox row of the follow event typ of reader.
func (b *testBundle) followRow(t *testing.T, typ string, reader int64) outboxRow {
	t.Helper()
	return b.rowOf(t, typ, fmt.Sprintf(`{"follower_id": %d}`, reader))
}

func TestFollowState(t *testing.T) {
	t.Parallel()
	const reader, followee = int64(1), int64(10)

	// followed sets up a reader with a feed who followed followee (two
	// posts) through the worker, with the feeds' calls counted.
	followed := func(t *testing.T) (*testBundle, *hookedFeeds, []int64) {
		t.Helper()
		_, b := setup(t, fanout.Config{}, feed.Config{Backfill: 50})
		counted := &hookedFeeds{Feeds: b.feeds}
		run(t, b.newWorker(t, counted, fanout.Config{}))
		posts := []int64{b.post(t, followee), b.post(t, followee)}
		b.deliver(t)
		b.buildFeeds(t, []int64{reader})
		_, err := b.db.Follow(t.Context(), reader, followee)
		require.NoError(t, err)
		b.deliver(t)
		require.Equal(t, posts, b.feedPosts(t, reader))
		return b, counted, posts
	}
	t.Run("RedeliveredFollowAfterUnfollowWritesNothing", func(t *testing.T) {
		t.Parallel()
		b, counted, _ := followed(t)
		_, err := b.db.Unfollow(t.Context(), reader, followee)
		require.NoError(t, err)
		b.deliver(t)
		require.Empty(t, b.feedPosts(t, reader))
		entries := b.metric(t, "newsfeed_fanout_entries_total")
		merges := counted.followed.Load()

		b.redeliver(t, b.followRow(t, domain.FollowCreated, reader), 2)
		b.waitTickets(t, domain.FollowCreated, "done", 2)

		require.Equal(t, merges, counted.followed.Load(), "the unfollowed author's posts were merged into the feed")
		require.Equal(t, entries, b.metric(t, "newsfeed_fanout_entries_total"))
		require.Empty(t, b.feedPosts(t, reader))
		require.Empty(t, b.readFeed(t, reader))
	})

	t.Run("RedeliveredUnfollowAfterFollowingAgainRemovesNothing", func(t *testing.T) {
		t.Parallel()
		b, counted, posts := followed(t)
		_, err := b.db.Unfollow(t.Context(), reader, followee)
		require.NoError(t, err)
		b.deliver(t)
		_, err = b.db.Follow(t.Context(), reader, followee)
		require.NoError(t, err)
		b.deliver(t)
		require.Equal(t, posts, b.feedPosts(t, reader))
		removals := counted.unfollowed.Load()

		b.redeliver(t, b.followRow(t, domain.FollowDeleted, reader), 2)
		b.waitTickets(t, domain.FollowDeleted, "done", 2)

		require.Equal(t, removals, counted.unfollowed.Load(), "the followed author's posts were taken out of the feed")
		require.Equal(t, posts, b.feedPosts(t, reader))
	})

	t.Run("AFollowStateOvertakenByAnUnfollowChangesNothing", func(t *testing.T) {
		t.Parallel()
		// The follow.created event read "following" and, before it applies
		// it, the reader unfollows and the API applies that: the event's
		// state is stale and merges nothing, not even for a moment.
		_, b := setup(t, fanout.Config{}, feed.Config{Backfill: 50})
		var once sync.Once
		hooked := &hookedFeeds{Feeds: b.feeds, beforeFollowed: func(ctx context.Context, follower, followee int64) error {
			var err error
			once.Do(func() {
				var ch domain.EdgeChange
				if ch, err = b.db.Unfollow(ctx, follower, followee); err == nil {
					_, _, err = b.feeds.ApplyFollow(ctx, ch.EdgeState) // what the API does
				}
			})
			return err
		}}
		run(t, b.newWorker(t, hooked, fanout.Config{}))
		b.post(t, followee)
		b.deliver(t)
		b.buildFeeds(t, []int64{reader})
		_, err := b.db.Follow(t.Context(), reader, followee)
		require.NoError(t, err)
		b.dispatchN(t, 1) // the follow.created only: the unfollow's event is written later
		b.waitTickets(t, domain.FollowCreated, "done", 1)

		require.EqualValues(t, 1, hooked.followed.Load())
		require.Empty(t, b.feedPosts(t, reader), "a stale follow merged the unfollowed author's posts")
		b.deliver(t) // the follow.deleted, which finds the same state
		require.Empty(t, b.feedPosts(t, reader))
	})

	t.Run("AnUnfollowStateOvertakenByAFollowRemovesNothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t, fanout.Config{}, feed.Config{Backfill: 50})
		var once sync.Once
		hooked := &hookedFeeds{Feeds: b.feeds}
		hooked.beforeUnfollowed = func(ctx context.Context, follower, followee int64) error {
			var err error
			once.Do(func() {
				var ch domain.EdgeChange
				if ch, err = b.db.Follow(ctx, follower, followee); err == nil {
					_, _, err = b.feeds.ApplyFollow(ctx, ch.EdgeState) // what the API does
				}
			})
			return err
		}
		run(t, b.newWorker(t, hooked, fanout.Config{}))
		posts := []int64{b.post(t, followee), b.post(t, followee)}
		b.deliver(t)
		b.buildFeeds(t, []int64{reader})
		_, err := b.db.Follow(t.Context(), reader, followee)
		require.NoError(t, err)
		_, err = b.db.Unfollow(t.Context(), reader, followee)
		require.NoError(t, err)
		// follow.created finds "not following" and applies it; before it
		// lands, a new follow is committed and applied: the event's state
		// is stale and removes nothing.
		b.dispatchN(t, 2)
		eventually(t, func(c *assert.CollectT) {
			require.EqualValues(c, 1, b.tickets(c, domain.FollowCreated, "done"))
			require.EqualValues(c, 1, b.tickets(c, domain.FollowDeleted, "done"))
		})
		require.Equal(t, posts, b.feedPosts(t, reader), "the new follow was undone")
		b.deliver(t)
		require.Equal(t, posts, b.feedPosts(t, reader))
	})
}

func TestFollowStateThatKeepsChanging(t *testing.T) {
	t.Parallel()
	const reader, followee = int64(1), int64(10)
	// The reader follows and unfollows again before each application of a
	// state: every event finishes (a stale state is not a failure), and the
	// feed ends as the last change left it.
	_, b := setup(t, fanout.Config{}, feed.Config{Backfill: 50})
	var flips atomic.Int64
	flip := func(ctx context.Context, follower, followee int64) error {
		if flips.Add(1) > 6 {
			return nil
		}
		following, err := b.db.IsFollowing(ctx, follower, followee)
		if err == nil && following {
			_, err = b.db.Unfollow(ctx, follower, followee)
		} else if err == nil {
			_, err = b.db.Follow(ctx, follower, followee)
		}
		return err
	}
	hooked := &hookedFeeds{Feeds: b.feeds, beforeFollowed: flip, beforeUnfollowed: flip}
	run(t, b.newWorker(t, hooked, fanout.Config{}))
	posts := []int64{b.post(t, followee), b.post(t, followee)}
	b.deliver(t)
	b.buildFeeds(t, []int64{reader})
	_, err := b.db.Follow(t.Context(), reader, followee)
	require.NoError(t, err)
	b.deliverAll(t) // the flips write events of their own while these are handled

	following, err := b.db.IsFollowing(t.Context(), reader, followee)
	require.NoError(t, err)
	if following {
		require.Equal(t, posts, b.feedPosts(t, reader))
	} else {
		require.Empty(t, b.feedPosts(t, reader))
	}
	require.Greater(t, flips.Load(), int64(6), "the state kept changing under the events")
}
