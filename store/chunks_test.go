package store_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// addFollowers makes every id in followers follow author, directly in the
// table (in the order given), as ChunkBoundaries reads only the edges.
func addFollowers(t *testing.T, pool *pgxpool.Pool, author int64, followers []int64) {
	t.Helper()
	exec(t, pool, `INSERT INTO follows (follower_id, followee_id) SELECT f, $1 FROM unnest($2::bigint[]) AS f`, author, followers)
}

// spacedIDs returns n follower ids, ascending, with gaps between them.
func spacedIDs(n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(1000 + 7*i + i*i%5)
	}
	return ids
}

// shuffled returns ids in an order that is not ascending.
func shuffled(ids []int64) []int64 {
	out := slices.Clone(ids)
	slices.Reverse(out)
	for i := 0; i+1 < len(out); i += 3 {
		out[i], out[i+1] = out[i+1], out[i]
	}
	return out
}

// chunkSizes reads, through FollowerIDRange as a chunk's fan-out does, the
// followers of each chunk that the boundaries make: (0, b1], (b1, b2], …,
// (bk, ∞). It requires the chunks to cover want exactly once, in order.
func chunkSizes(t *testing.T, db *store.DB, author int64, bounds []int64, want []int64) []int {
	t.Helper()
	var sizes []int
	var all []int64
	after := int64(0)
	for _, until := range append(slices.Clone(bounds), math.MaxInt64) {
		ids, err := db.FollowerIDRange(t.Context(), author, after, until, 1_000_000)
		require.NoError(t, err)
		sizes = append(sizes, len(ids))
		all = append(all, ids...)
		after = until
	}
	require.Equal(t, want, all, "the chunks cover every follower once")
	return sizes
}

func TestChunkBoundaries(t *testing.T) {
	t.Parallel()

	t.Run("EachFullChunkEndsAtItsSizethFollowerAndTheRestIsTheLastChunk", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		const author, size = 7, 5
		followers := spacedIDs(23)
		addFollowers(t, bundle.pool, author, shuffled(followers))
		// Another author's followers sit between this one's ids.
		addFollowers(t, bundle.pool, 8, []int64{1001, 1003, 1010, 1050, 1100})

		bounds, err := db.ChunkBoundaries(t.Context(), author, size)
		require.NoError(t, err)
		require.Equal(t, []int64{followers[4], followers[9], followers[14], followers[19]}, bounds)
		require.Equal(t, []int{5, 5, 5, 5, 3}, chunkSizes(t, db, author, bounds, followers))
	})

	t.Run("FewerFollowersThanAChunkHaveNoBoundary", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		followers := spacedIDs(4)
		addFollowers(t, bundle.pool, 7, followers)

		bounds, err := db.ChunkBoundaries(t.Context(), 7, 5)
		require.NoError(t, err)
		require.Empty(t, bounds)
		require.Equal(t, []int{4}, chunkSizes(t, db, 7, bounds, followers))

		none, err := db.ChunkBoundaries(t.Context(), 99, 5)
		require.NoError(t, err)
		require.Empty(t, none, "an author without followers")
	})

	t.Run("ExactlyKChunksEndAtTheLastFollower", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		followers := spacedIDs(15)
		addFollowers(t, bundle.pool, 7, shuffled(followers))

		bounds, err := db.ChunkBoundaries(t.Context(), 7, 5)
		require.NoError(t, err)
		require.Equal(t, []int64{followers[4], followers[9], followers[14]}, bounds)
		// The chunk above the last boundary holds nobody.
		require.Equal(t, []int{5, 5, 5, 0}, chunkSizes(t, db, 7, bounds, followers))

		// As many followers as the size: one full chunk.
		one, err := db.ChunkBoundaries(t.Context(), 7, 15)
		require.NoError(t, err)
		require.Equal(t, []int64{followers[14]}, one)
	})

	t.Run("SizeOneMakesEveryFollowerABoundary", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		followers := spacedIDs(6)
		addFollowers(t, bundle.pool, 7, shuffled(followers))
		bounds, err := db.ChunkBoundaries(t.Context(), 7, 1)
		require.NoError(t, err)
		require.Equal(t, followers, bounds)
	})

	t.Run("FollowsAndUnfollowsMoveTheBoundaries", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		ctx := t.Context()
		for f := int64(1); f <= 6; f++ {
			_, err := db.Follow(ctx, f, 100)
			require.NoError(t, err)
		}
		bounds, err := db.ChunkBoundaries(ctx, 100, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{2, 4, 6}, bounds)

		_, err = db.Unfollow(ctx, 3, 100)
		require.NoError(t, err)
		bounds, err = db.ChunkBoundaries(ctx, 100, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{2, 5}, bounds)
	})

	t.Run("AQueryThatFailsAfterItStartedIsAnError", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		addFollowers(t, bundle.pool, 7, spacedIDs(3))
		// Size 0 divides by zero in PostgreSQL while the rows stream: the
		// caller gets the error, not an empty list that reads "no boundary".
		bounds, err := db.ChunkBoundaries(t.Context(), 7, 0)
		require.ErrorContains(t, err, "chunk boundaries")
		require.ErrorContains(t, err, "division by zero")
		require.Nil(t, bounds)
	})
}

// chunkRow is an outbox row with the columns of chunked fan-out.
type chunkRow struct {
	ID         int64
	Type       string
	Payload    []byte
	Status     string
	ParentID   *int64
	ChunkNo    *int
	ChunksLeft *int
	Parked     bool // due_at = 'infinity'
	Due        bool // due_at <= now()
	CreatedAt  time.Time
}

func chunkRows(t *testing.T, pool *pgxpool.Pool) []chunkRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
SELECT id, event_type, payload, status, parent_id, chunk_no, chunks_left,
       due_at = 'infinity', due_at <= now(), created_at
FROM outbox ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []chunkRow
	for rows.Next() {
		var r chunkRow
		require.NoError(t, rows.Scan(&r.ID, &r.Type, &r.Payload, &r.Status, &r.ParentID, &r.ChunkNo, &r.ChunksLeft,
			&r.Parked, &r.Due, &r.CreatedAt))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// chunksOf makes the chunk payloads of a post for the given boundaries, as
// the fan-out worker does.
func chunksOf(p domain.PostPayload, bounds ...int64) []domain.ChunkPayload {
	var chunks []domain.ChunkPayload
	after := int64(0)
	for _, b := range bounds {
		chunks = append(chunks, domain.ChunkPayload{PostID: p.PostID, AuthorID: p.AuthorID, After: after, Until: b})
		after = b
	}
	return append(chunks, domain.ChunkPayload{PostID: p.PostID, AuthorID: p.AuthorID, After: after})
}

// TestSplitFanout (finish_test.go) covers what a split writes and a second
// split; these are what the rest of the outbox does to a split parent.
func TestSplitParent(t *testing.T) {
	t.Parallel()

	// splitSetup creates a post, claims its row and returns it.
	splitSetup := func(t *testing.T) (*store.DB, *testBundle, int64, domain.PostPayload) {
		t.Helper()
		db, bundle := setup(t)
		p, _, err := db.CreatePost(t.Context(), 3, "to many", "")
		require.NoError(t, err)
		rows := outboxRows(t, bundle.pool)
		require.Len(t, rows, 1)
		requireClaim(t, db, rows[0].ID)
		return db, bundle, rows[0].ID, domain.PostPayload{PostID: p.ID, AuthorID: 3}
	}

	t.Run("TheDispatcherAndLateFailuresLeaveItParked", func(t *testing.T) {
		t.Parallel()
		db, bundle, parent, p := splitSetup(t)
		chunks := chunksOf(p, 10)
		n, err := db.SplitFanout(t.Context(), parent, chunks)
		require.NoError(t, err)
		require.Equal(t, 2, n)

		// The dispatcher records the publication after a fast worker split
		// it, the worker's heartbeat extends it, a failure or a poison
		// verdict arrives late: none brings the parent back.
		require.NoError(t, db.MarkPublished(t.Context(), []int64{parent}, ticketsFor([]int64{parent}), time.Millisecond))
		require.NoError(t, db.Extend(t.Context(), parent, time.Millisecond))
		dead, err := db.Fail(t.Context(), parent, 1, 0, "late failure")
		require.NoError(t, err)
		require.False(t, dead)
		require.NoError(t, db.Bury(t.Context(), parent, "late poison"))

		rows := chunkRows(t, bundle.pool)
		require.Len(t, rows, 3)
		r := rows[0]
		require.Equal(t, "publishing", r.Status)
		require.True(t, r.Parked, "due_at stays infinity")
		require.Equal(t, 2, *r.ChunksLeft)
		var lastError *string
		require.NoError(t, bundle.pool.QueryRow(t.Context(), "SELECT last_error FROM outbox WHERE id = $1", parent).Scan(&lastError))
		require.Nil(t, lastError)
		for i, c := range rows[1:] {
			require.Equal(t, parent, *c.ParentID)
			require.Equal(t, i+1, *c.ChunkNo)
			require.Equal(t, chunks[i], decodeJSON[domain.ChunkPayload](t, c.Payload))
		}
		requireClaim(t, db, rows[1].ID, rows[2].ID) // only the chunks
		requireClaim(t, db)
	})

	t.Run("CountsAsInFlightWhileItsChunksRun", func(t *testing.T) {
		t.Parallel()
		db, bundle, parent, p := splitSetup(t)
		exec(t, bundle.pool, "UPDATE outbox SET created_at = now() - interval '1 hour' WHERE id = $1", parent)
		_, err := db.SplitFanout(t.Context(), parent, chunksOf(p, 10, 20))
		require.NoError(t, err)

		s, err := db.OutboxStats(t.Context())
		require.NoError(t, err)
		require.Equal(t, int64(3), s.Pending, "the chunks wait to be published")
		require.Equal(t, int64(1), s.InFlight, "the parent is not delivered yet")
		require.GreaterOrEqual(t, s.OldestPendingAge, time.Hour, "the chunks are as old as the post")
	})

	t.Run("ADeadParentIsNotSplit", func(t *testing.T) {
		t.Parallel()
		db, bundle, parent, p := splitSetup(t)
		require.NoError(t, db.Bury(t.Context(), parent, "poison"))

		n, err := db.SplitFanout(t.Context(), parent, chunksOf(p, 10))
		require.NoError(t, err)
		require.Zero(t, n)
		rows := chunkRows(t, bundle.pool)
		require.Len(t, rows, 1, "no chunk of a dead parent")
		require.Equal(t, "dead", rows[0].Status)
		require.Nil(t, rows[0].ChunksLeft)
		require.False(t, rows[0].Parked)
	})

	t.Run("NoChunksIsAnErrorAndLeavesTheParentAsItWas", func(t *testing.T) {
		t.Parallel()
		db, bundle, parent, _ := splitSetup(t)
		before := chunkRows(t, bundle.pool)

		// A parent parked with no chunk to finish it would wait forever.
		n, err := db.SplitFanout(t.Context(), parent, nil)
		require.Error(t, err)
		require.Zero(t, n)
		require.Equal(t, before, chunkRows(t, bundle.pool))
	})

	t.Run("WakesTheDispatchers", func(t *testing.T) {
		t.Parallel()
		url := testenv.NewDatabaseURL(t)
		pool := testenv.Pool(t, url)
		db := store.New(pool, nil)
		p, _, err := db.CreatePost(t.Context(), 3, "to many", "")
		require.NoError(t, err)
		parent := outboxRows(t, pool)[0].ID

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		wake := listen(t, ctx, url, zap.NewNop())
		waitSignal(t, wake) // the one every (re)connection sends
		requireNoSignal(t, wake)

		_, err = db.SplitFanout(t.Context(), parent, chunksOf(domain.PostPayload{PostID: p.ID, AuthorID: 3}, 10))
		require.NoError(t, err)
		waitSignal(t, wake)
	})
}
