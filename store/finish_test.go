package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// The tests of this file use helpers of their own (prefixed fin), so that
// they do not depend on the shared ones of store_test.go.

// finSetup returns a store on a database of the test's own, and its pool.
func finSetup(t *testing.T) (*store.DB, *pgxpool.Pool) {
	t.Helper()
	pool := testenv.NewPool(t)
	return store.New(pool, nil), pool
}

// finParent writes a published post.created row, as a worker finds it when
// it takes the ticket, and returns its id.
func finParent(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(t.Context(), `
INSERT INTO outbox (event_type, payload, status, attempts, due_at, published_at)
VALUES ('post.created', '{"post_id": 1, "author_id": 1}', 'published', 1, now() + interval '1 hour', now())
RETURNING id`).Scan(&id))
	return id
}

// finChunks returns n chunk payloads of post 1 with boundaries 10, 20, ….
func finChunks(n int) []domain.ChunkPayload {
	chunks := make([]domain.ChunkPayload, n)
	for i := range chunks {
		chunks[i] = domain.ChunkPayload{PostID: 1, AuthorID: 1, After: int64(10 * i), Until: int64(10 * (i + 1))}
	}
	chunks[n-1].Until = 0
	return chunks
}

// finRow is what these tests read of an outbox row.
type finRow struct {
	Status     string
	ChunksLeft *int
	// DueNever: due_at is infinity.
	DueNever   bool
	FinishedAt *time.Time
}

func finGet(t tbStore, pool *pgxpool.Pool, id int64) finRow {
	t.Helper()
	var r finRow
	err := pool.QueryRow(context.Background(), `
SELECT status, chunks_left, due_at = 'infinity', finished_at FROM outbox WHERE id = $1`, id).
		Scan(&r.Status, &r.ChunksLeft, &r.DueNever, &r.FinishedAt)
	require.NoError(t, err)
	return r
}

type tbStore interface {
	require.TestingT
	Helper()
}

// finChunkRow is a chunk row of a parent.
type finChunkRow struct {
	ID        int64
	No        int
	Payload   domain.ChunkPayload
	Status    string
	CreatedAt time.Time
}

// finChunkRows returns the chunk rows of parent, by chunk number.
func finChunkRows(t *testing.T, pool *pgxpool.Pool, parent int64) []finChunkRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
SELECT id, chunk_no, payload, status, created_at FROM outbox
WHERE parent_id = $1 AND event_type = 'fanout.chunk' ORDER BY chunk_no`, parent)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (finChunkRow, error) {
		var r finChunkRow
		var payload []byte
		if err := row.Scan(&r.ID, &r.No, &payload, &r.Status, &r.CreatedAt); err != nil {
			return r, err
		}
		return r, json.Unmarshal(payload, &r.Payload)
	})
	require.NoError(t, err)
	return out
}

func finExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

// finLockWaiters counts the sessions of the test's database that wait for a lock.
func finLockWaiters(t tbStore, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
	return n
}

func TestSplitFanout(t *testing.T) {
	t.Parallel()

	t.Run("WritesOneChunkPerPayloadAndParksTheParent", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		parent := finParent(t, pool)
		var created time.Time
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT created_at FROM outbox WHERE id = $1`, parent).Scan(&created))

		n, err := db.SplitFanout(t.Context(), parent, finChunks(3))
		require.NoError(t, err)
		require.Equal(t, 3, n)

		p := finGet(t, pool, parent)
		require.Equal(t, "published", p.Status, "the parent waits for its chunks")
		require.NotNil(t, p.ChunksLeft)
		require.Equal(t, 3, *p.ChunksLeft)
		require.True(t, p.DueNever, "a split parent is never published again")
		chunks := finChunkRows(t, pool, parent)
		require.Len(t, chunks, 3)
		for i, c := range chunks {
			require.Equal(t, i+1, c.No)
			require.Equal(t, finChunks(3)[i], c.Payload)
			require.Equal(t, "pending", c.Status)
			require.True(t, created.Equal(c.CreatedAt), "a chunk is as old as its post")
		}
		// The chunks are due at once: a claim takes them, and not the parent.
		events, err := db.Claim(t.Context(), 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, events, 3)
		for _, e := range events {
			require.Equal(t, domain.FanoutChunk, e.Type)
		}
	})

	t.Run("SplittingAgainWritesNothingAndKeepsTheCount", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		parent := finParent(t, pool)
		_, err := db.SplitFanout(t.Context(), parent, finChunks(2))
		require.NoError(t, err)
		chunks := finChunkRows(t, pool, parent)
		done, _, err := db.FinishChunk(t.Context(), chunks[0].ID)
		require.NoError(t, err)
		require.False(t, done)

		// The parent's ticket is delivered again; its author has more followers now.
		n, err := db.SplitFanout(t.Context(), parent, finChunks(5))
		require.NoError(t, err)
		require.Equal(t, 1, n, "the chunks left of the first split")
		require.Len(t, finChunkRows(t, pool, parent), 2)
		require.Equal(t, 1, *finGet(t, pool, parent).ChunksLeft)
	})

	t.Run("ParentNotInFlightIsNotSplit", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		parent := finParent(t, pool)
		require.NoError(t, db.Finish(t.Context(), parent))
		n, err := db.SplitFanout(t.Context(), parent, finChunks(2))
		require.NoError(t, err)
		require.Zero(t, n)
		require.Empty(t, finChunkRows(t, pool, parent))
		require.Nil(t, finGet(t, pool, parent).ChunksLeft)

		n, err = db.SplitFanout(t.Context(), 424242, finChunks(2))
		require.NoError(t, err)
		require.Zero(t, n, "a missing parent")
	})

	t.Run("ConcurrentSplitsOfDifferentSizesAgreeOnTheChunks", func(t *testing.T) {
		t.Parallel()
		// Two workers hold the parent's ticket (a takeover, a republication)
		// and split it side by side; the author gained followers between
		// their ChunkBoundaries reads, so the second has one chunk more.
		// Both statements start before either commits.
		db, pool := finSetup(t)
		parent := finParent(t, pool)
		lock, err := pool.Begin(t.Context())
		require.NoError(t, err)
		defer lock.Rollback(context.Background()) //nolint:errcheck
		_, err = lock.Exec(t.Context(), `SELECT 1 FROM outbox WHERE id = $1 FOR UPDATE`, parent)
		require.NoError(t, err)

		type result struct {
			n   int
			err error
		}
		split := func(chunks int) chan result {
			ch := make(chan result, 1)
			go func() {
				n, err := db.SplitFanout(context.Background(), parent, finChunks(chunks))
				ch <- result{n, err}
			}()
			return ch
		}
		first := split(3)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.Equal(c, 1, finLockWaiters(c, pool))
		}, 10*time.Second, 5*time.Millisecond, "the first split waits for the parent")
		second := split(4)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.Equal(c, 2, finLockWaiters(c, pool))
		}, 10*time.Second, 5*time.Millisecond, "the second split waits for the parent")
		require.NoError(t, lock.Rollback(t.Context()))
		r1, r2 := <-first, <-second
		require.NoError(t, r1.err)
		require.NoError(t, r2.err)

		// Finishing every chunk finishes the parent once, and the count ends at 0.
		chunks := finChunkRows(t, pool, parent)
		parentDone := 0
		for _, c := range chunks {
			done, _, err := db.FinishChunk(t.Context(), c.ID)
			require.NoError(t, err)
			if done {
				parentDone++
			}
		}
		p := finGet(t, pool, parent)
		require.Equal(t, 0, *p.ChunksLeft, "chunks left after all %d chunks finished", len(chunks))
		require.Equal(t, 1, parentDone, "calls that reported the parent done")
		require.Equal(t, "done", p.Status)
		require.Equal(t, len(chunks), r1.n, "the first split's count")
		require.Equal(t, len(chunks), r2.n, "the second split's count")
	})
}

func TestFinishChunk(t *testing.T) {
	t.Parallel()

	t.Run("ReportsTheParentDoneOnlyOnTheCallThatFinishedIt", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		parent := finParent(t, pool)
		_, err := db.SplitFanout(t.Context(), parent, finChunks(2))
		require.NoError(t, err)
		chunks := finChunkRows(t, pool, parent)

		finish := func(id int64) bool {
			t.Helper()
			done, _, err := db.FinishChunk(t.Context(), id)
			require.NoError(t, err)
			return done
		}
		require.False(t, finish(chunks[0].ID))
		require.Equal(t, 1, *finGet(t, pool, parent).ChunksLeft)
		require.False(t, finish(chunks[0].ID), "a chunk finished twice")
		require.Equal(t, 1, *finGet(t, pool, parent).ChunksLeft, "a chunk finished twice is counted once")
		require.Equal(t, "published", finGet(t, pool, parent).Status)

		require.True(t, finish(chunks[1].ID), "the last chunk finishes the parent")
		p := finGet(t, pool, parent)
		require.Equal(t, "done", p.Status)
		require.NotNil(t, p.FinishedAt)
		require.Equal(t, 0, *p.ChunksLeft)

		require.False(t, finish(chunks[1].ID), "the last chunk finished twice")
		require.False(t, finish(chunks[0].ID))
		require.Equal(t, 0, *finGet(t, pool, parent).ChunksLeft)
	})

	t.Run("ChunkFinishedAfterItsParentReportsNothing", func(t *testing.T) {
		t.Parallel()
		// A redelivered parent whose author fell below the chunk size was
		// fanned out whole and finished; its chunks finish afterwards.
		db, pool := finSetup(t)
		parent := finParent(t, pool)
		_, err := db.SplitFanout(t.Context(), parent, finChunks(2))
		require.NoError(t, err)
		chunks := finChunkRows(t, pool, parent)
		require.NoError(t, db.Finish(t.Context(), parent))
		finishedAt := finGet(t, pool, parent).FinishedAt
		require.NotNil(t, finishedAt)

		for _, c := range chunks {
			done, _, err := db.FinishChunk(t.Context(), c.ID)
			require.NoError(t, err)
			require.False(t, done, "chunk %d reported a parent that was done before", c.No)
		}
		p := finGet(t, pool, parent)
		require.Equal(t, "done", p.Status)
		require.Equal(t, 2, *p.ChunksLeft, "a finished parent counts nothing off")
		require.True(t, finishedAt.Equal(*p.FinishedAt))
		for _, c := range finChunkRows(t, pool, parent) {
			require.Equal(t, "done", c.Status)
		}
	})

	t.Run("MissingChunkAndPlainRowReportNothing", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		done, _, err := db.FinishChunk(t.Context(), 424242)
		require.NoError(t, err)
		require.False(t, done)

		// A row that is not a chunk is not counted off anything.
		plain := finParent(t, pool)
		done, _, err = db.FinishChunk(t.Context(), plain)
		require.NoError(t, err)
		require.False(t, done)
	})
}

// finAge returns the row's age on the database clock now: an upper bound of
// any latency measured before.
func finAge(t *testing.T, pool *pgxpool.Pool, id int64) time.Duration {
	t.Helper()
	var s float64
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT extract(epoch FROM now() - created_at)::float8 FROM outbox WHERE id = $1`, id).Scan(&s))
	return time.Duration(s * float64(time.Second))
}

func TestFinishEvent(t *testing.T) {
	t.Parallel()

	t.Run("ReportsFinishedOnlyOnTheCallThatFinishedIt", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		id := finParent(t, pool)
		finished, latency, err := db.FinishEvent(t.Context(), id)
		require.NoError(t, err)
		require.True(t, finished)
		require.GreaterOrEqual(t, latency, time.Duration(0))
		r := finGet(t, pool, id)
		require.Equal(t, "done", r.Status)
		require.NotNil(t, r.FinishedAt)

		finished, latency, err = db.FinishEvent(t.Context(), id)
		require.NoError(t, err)
		require.False(t, finished, "a row finished twice")
		require.Zero(t, latency)
		require.True(t, r.FinishedAt.Equal(*finGet(t, pool, id).FinishedAt))
		require.NoError(t, db.Finish(t.Context(), id), "Finish is FinishEvent without the report")
	})

	t.Run("DeadOrMissingRowIsNotFinished", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		id := finParent(t, pool)
		require.NoError(t, db.Bury(t.Context(), id, "poison"))
		finished, _, err := db.FinishEvent(t.Context(), id)
		require.NoError(t, err)
		require.False(t, finished)
		require.Equal(t, "dead", finGet(t, pool, id).Status)

		finished, _, err = db.FinishEvent(t.Context(), 424242)
		require.NoError(t, err)
		require.False(t, finished)
	})

	t.Run("LatencyIsTheRowsAgeOnTheDatabaseClock", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		id := finParent(t, pool)
		finExec(t, pool, `UPDATE outbox SET created_at = now() - interval '1 hour' WHERE id = $1`, id)
		finished, latency, err := db.FinishEvent(t.Context(), id)
		require.NoError(t, err)
		require.True(t, finished)
		require.GreaterOrEqual(t, latency, time.Hour)
		require.LessOrEqual(t, latency, finAge(t, pool, id))
	})
}

func TestFinishChunkLatency(t *testing.T) {
	t.Parallel()

	t.Run("IsTheParentsAgeOnTheDatabaseClock", func(t *testing.T) {
		t.Parallel()
		db, pool := finSetup(t)
		parent := finParent(t, pool)
		finExec(t, pool, `UPDATE outbox SET created_at = now() - interval '1 hour' WHERE id = $1`, parent)
		_, err := db.SplitFanout(t.Context(), parent, finChunks(2))
		require.NoError(t, err)
		chunks := finChunkRows(t, pool, parent)

		done, latency, err := db.FinishChunk(t.Context(), chunks[0].ID)
		require.NoError(t, err)
		require.False(t, done)
		require.Zero(t, latency, "no latency before the post's fan-out finished")
		done, latency, err = db.FinishChunk(t.Context(), chunks[1].ID)
		require.NoError(t, err)
		require.True(t, done)
		require.GreaterOrEqual(t, latency, time.Hour)
		require.LessOrEqual(t, latency, finAge(t, pool, parent))
	})
}
