package fanout_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/fanout"
	"github.com/newsfeed/newsfeed/feed"
)

// deliverAll is deliver for events that running workers write themselves
// (chunks): it publishes what is due until everything is finished.
func (b *testBundle) deliverAll(t *testing.T) {
	t.Helper()
	eventually(t, func(c *assert.CollectT) {
		_, err := b.disp.DispatchOnce(context.Background())
		require.NoError(c, err)
		require.Zero(c, b.unfinished(c))
		require.Zero(c, b.pending(c))
	})
}

// dispatchN publishes the n outbox rows that are due, in one claim, and
// nothing that a running worker writes meanwhile (chunks, or the events of
// follows that a test's hook makes).
func (b *testBundle) dispatchN(t *testing.T, n int) {
	t.Helper()
	got, err := b.disp.DispatchOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, n, got)
}

// chunkRow is a fanout.chunk row.
type chunkRow struct {
	ID      int64
	Payload domain.ChunkPayload
	Status  string
}

// chunksOf returns the chunk rows of the parent row, by chunk number.
func (b *testBundle) chunksOf(t *testing.T, parent int64) []chunkRow {
	t.Helper()
	rows, err := b.pool.Query(t.Context(),
		`SELECT id, payload, status FROM outbox WHERE parent_id = $1 ORDER BY chunk_no`, parent)
	require.NoError(t, err)
	chunks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (chunkRow, error) {
		var c chunkRow
		var payload []byte
		if err := row.Scan(&c.ID, &payload, &c.Status); err != nil {
			return c, err
		}
		return c, json.Unmarshal(payload, &c.Payload)
	})
	require.NoError(t, err)
	return chunks
}

func TestChunkedFanout(t *testing.T) {
	t.Parallel()
	const author = int64(1)

	// big sets up an author with 25 followers with feeds, over chunks of
	// 10 followers written in pages of 4, and a running worker whose pushes
	// are counted.
	big := func(t *testing.T) (*testBundle, *hookedFeeds, []int64) {
		t.Helper()
		_, b := setup(t, fanout.Config{}, feed.Config{})
		followers := userRange(2, 26)
		b.follow(t, author, followers)
		b.setFollowers(t, author, int64(len(followers)))
		b.buildFeeds(t, followers)
		feeds := &hookedFeeds{Feeds: b.feeds}
		run(t, b.newWorker(t, feeds, fanout.Config{ChunkSize: 10, PageSize: 4}))
		return b, feeds, followers
	}

	t.Run("SplitsIntoChunksThatReachEveryFollowerOnce", func(t *testing.T) {
		t.Parallel()
		b, _, followers := big(t)
		postID := b.post(t, author)
		b.deliverAll(t)

		b.requireOncePerFollower(t, followers, postID)
		parent := b.postRow(t, postID)
		require.Equal(t, "done", parent.Status)
		chunks := b.chunksOf(t, parent.ID)
		require.Equal(t, []domain.ChunkPayload{
			{PostID: postID, AuthorID: author, After: 0, Until: 11},
			{PostID: postID, AuthorID: author, After: 11, Until: 21},
			{PostID: postID, AuthorID: author, After: 21, Until: 0},
		}, []domain.ChunkPayload{chunks[0].Payload, chunks[1].Payload, chunks[2].Payload})
		require.Len(t, chunks, 3)
		for _, c := range chunks {
			require.Equal(t, "done", c.Status)
		}
		require.EqualValues(t, 1, b.tickets(t, domain.PostCreated, "split"))
		require.EqualValues(t, 3, b.tickets(t, domain.FanoutChunk, "done"))
		require.EqualValues(t, len(followers), b.metric(t, "newsfeed_fanout_entries_total"))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"), "one post delivered")
		b.requireQueueEmpty(t)
	})

	t.Run("RedeliveredParentSplitsNothingTwice", func(t *testing.T) {
		t.Parallel()
		b, _, followers := big(t)
		postID := b.post(t, author)
		b.dispatchN(t, 1)
		b.waitTickets(t, domain.PostCreated, "split", 1)
		parent := b.postRow(t, postID)
		require.Len(t, b.chunksOf(t, parent.ID), 3)

		// Its ticket again, before any chunk ran.
		b.redeliver(t, parent, 2)
		b.waitTickets(t, domain.PostCreated, "split", 2)
		require.Len(t, b.chunksOf(t, parent.ID), 3)

		b.deliverAll(t)
		b.requireOncePerFollower(t, followers, postID)
		require.EqualValues(t, 3, b.tickets(t, domain.FanoutChunk, "done"))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"))

		// And after they all ran.
		b.redeliver(t, parent, 3)
		b.waitTickets(t, domain.PostCreated, "split", 3)
		require.Len(t, b.chunksOf(t, parent.ID), 3)
		require.Zero(t, b.unfinished(t))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"))
		b.requireQueueEmpty(t)
	})

	t.Run("ChunkFinishedTwiceChangesNothing", func(t *testing.T) {
		t.Parallel()
		b, feeds, followers := big(t)
		postID := b.post(t, author)
		b.deliverAll(t)
		pushes := feeds.pushes.Load()
		chunks := b.chunksOf(t, b.postRow(t, postID).ID)

		for i, c := range chunks {
			b.redeliver(t, b.row(t, c.ID), 2)
			b.waitTickets(t, domain.FanoutChunk, "done", 3+i+1)
		}
		require.Greater(t, feeds.pushes.Load(), pushes, "the chunks ran again")
		b.requireOncePerFollower(t, followers, postID)
		require.EqualValues(t, len(followers), b.metric(t, "newsfeed_fanout_entries_total"))
		require.EqualValues(t, 1, b.metric(t, "newsfeed_delivery_seconds"), "a chunk finished twice finished its post again")
		b.requireQueueEmpty(t)
	})

	t.Run("ChunksOfAPostDeletedMeanwhilePushNothing", func(t *testing.T) {
		t.Parallel()
		b, feeds, followers := big(t)
		postID := b.post(t, author)
		b.dispatchN(t, 1)
		b.waitTickets(t, domain.PostCreated, "split", 1)
		require.NoError(t, b.db.DeletePost(t.Context(), postID, author))

		b.deliverAll(t)
		require.Zero(t, feeds.pushes.Load())
		for _, u := range followers {
			require.Empty(t, b.feedPosts(t, u), "follower %d", u)
		}
		require.EqualValues(t, 3, b.tickets(t, domain.FanoutChunk, "done"))
		require.Equal(t, "done", b.postRow(t, postID).Status)
		b.requireQueueEmpty(t)
	})
}
