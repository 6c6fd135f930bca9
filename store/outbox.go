package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/newsfeed/newsfeed/domain"
)

// claimSQL takes up to $1 rows that need a dispatcher — pending and due, or
// whose lease or redelivery deadline passed — in one statement. SKIP LOCKED
// lets several dispatchers claim side by side without waiting on each other;
// the lease (database clock) hands a row to another dispatcher if this one
// dies. "id = ANY(ARRAY(…))" makes the update find its rows by primary key:
// as a join, the planner chose to read the whole table once it grew.
const claimSQL = `
UPDATE outbox
SET status = 'publishing', attempts = attempts + 1, due_at = now() + $2::interval
WHERE id = ANY(ARRAY(
    SELECT id FROM outbox
    WHERE status IN ('pending', 'publishing', 'published') AND due_at <= now()
    ORDER BY due_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED))
RETURNING id, event_type, payload, attempts, failures, COALESCE(ticket, ''), created_at`

// Claim leases up to limit due outbox rows to the caller for lease.
func (db *DB) Claim(ctx context.Context, limit int, lease time.Duration) ([]domain.Event, error) {
	rows, err := db.primary.Query(ctx, claimSQL, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim outbox batch: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.Event, error) {
		var e domain.Event
		err := row.Scan(&e.ID, &e.Type, &e.Payload, &e.Attempt, &e.Failures, &e.Ticket, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox batch: %w", err)
	}
	return events, nil
}

// MarkPublished records that the queue holds tickets[i] for row ids[i]. A row
// that a fast worker already finished, or split into chunks, stays so. If no worker reports
// the fan-out finished within redeliverAfter, the row is due again.
func (db *DB) MarkPublished(ctx context.Context, ids []int64, tickets []string, redeliverAfter time.Duration) error {
	_, err := db.primary.Exec(ctx, `
UPDATE outbox o SET status = 'published', published_at = now(), due_at = now() + $3::interval, ticket = t.ticket
FROM unnest($1::bigint[], $2::text[]) AS t(id, ticket)
WHERE o.id = t.id AND o.status = 'publishing' AND o.chunks_left IS NULL`, ids, tickets, redeliverAfter)
	if err != nil {
		return fmt.Errorf("mark outbox rows published: %w", err)
	}
	return nil
}

// Extend pushes back the redelivery deadline of a row whose fan-out is still
// running, so that a long fan-out is not published a second time.
func (db *DB) Extend(ctx context.Context, id int64, by time.Duration) error {
	_, err := db.primary.Exec(ctx, `
UPDATE outbox SET due_at = greatest(due_at, now() + $2::interval)
WHERE id = $1 AND status IN ('publishing', 'published')`, id, by)
	if err != nil {
		return fmt.Errorf("extend outbox row %d: %w", id, err)
	}
	return nil
}

// Finish marks the row's fan-out finished. Finishing twice, or a row that was
// parked dead meanwhile, changes nothing. FinishEvent also says whether this
// call finished it.
func (db *DB) Finish(ctx context.Context, id int64) error {
	_, _, err := db.FinishEvent(ctx, id)
	return err
}

// FinishEvent marks the row's fan-out finished and reports whether this call
// did (false: finished before, parked dead, or missing) and, if it did, the
// delivery latency: the row's age on the database clock, which also stamped
// created_at, so no other clock enters it. A redelivered ticket finishes
// nothing, and its latency is not observed twice.
func (db *DB) FinishEvent(ctx context.Context, id int64) (finished bool, latency time.Duration, err error) {
	var seconds float64
	err = db.primary.QueryRow(ctx, `
UPDATE outbox SET status = 'done', finished_at = now(), last_error = NULL
WHERE id = $1 AND status IN ('pending', 'publishing', 'published')
RETURNING extract(epoch FROM now() - created_at)::float8`, id).Scan(&seconds)
	if isNoRows(err) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("finish outbox row %d: %w", id, err)
	}
	return true, secondsToDuration(seconds), nil
}

func secondsToDuration(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// Fail records a failed attempt: the row is due again after retryIn, or is
// parked dead when this was its maxAttempts-th failure. It reports whether
// the row is now dead. A row finished meanwhile stays finished, and a parent
// split into chunks waits for its chunks.
func (db *DB) Fail(ctx context.Context, id int64, maxAttempts int, retryIn time.Duration, cause string) (dead bool, err error) {
	var status string
	err = db.primary.QueryRow(ctx, `
UPDATE outbox
SET failures = failures + 1,
    status = CASE WHEN failures + 1 >= $2 THEN 'dead' ELSE 'pending' END,
    died_at = CASE WHEN failures + 1 >= $2 THEN now() END,
    due_at = now() + $3::interval,
    ticket = NULL,
    last_error = left($4, 2000)
WHERE id = $1 AND status IN ('pending', 'publishing', 'published') AND chunks_left IS NULL
RETURNING status`, id, maxAttempts, retryIn, cause).Scan(&status)
	if isNoRows(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fail outbox row %d: %w", id, err)
	}
	return status == "dead", nil
}

// Postpone makes a claimed or published row pending again after retryIn,
// without counting a failure: the work did not fail, a dependency was not
// ready for it (redis.wait_replicas: a replica behind). cause is kept as
// the row's last error. A row that is finished, dead or split is left alone.
func (db *DB) Postpone(ctx context.Context, id int64, retryIn time.Duration, cause string) error {
	_, err := db.primary.Exec(ctx, `
UPDATE outbox
SET status = 'pending', due_at = now() + $2::interval, ticket = NULL, last_error = left($3, 2000)
WHERE id = $1 AND status IN ('pending', 'publishing', 'published') AND chunks_left IS NULL`, id, retryIn, cause)
	if err != nil {
		return fmt.Errorf("postpone outbox row %d: %w", id, err)
	}
	return nil
}

// Bury parks the row as dead at once, whatever its attempts.
func (db *DB) Bury(ctx context.Context, id int64, cause string) error {
	_, err := db.primary.Exec(ctx, `
UPDATE outbox SET status = 'dead', died_at = now(), failures = failures + 1, last_error = left($2, 2000)
WHERE id = $1 AND status IN ('pending', 'publishing', 'published') AND chunks_left IS NULL`, id, cause)
	if err != nil {
		return fmt.Errorf("bury outbox row %d: %w", id, err)
	}
	return nil
}

// RetryDead makes dead rows pending again with fresh counts: all of them
// when id is 0, else only that one. It returns how many it revived.
func (db *DB) RetryDead(ctx context.Context, id int64) (int64, error) {
	tag, err := db.primary.Exec(ctx, `
UPDATE outbox SET status = 'pending', attempts = 0, failures = 0, ticket = NULL, due_at = now(), died_at = NULL
WHERE status = 'dead' AND ($1::bigint = 0 OR id = $1::bigint)`, id)
	if err != nil {
		return 0, fmt.Errorf("retry dead outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// RetryDeadEvent makes the dead row id pending again with fresh counts. A
// row that is not dead is left alone: the error wraps domain.ErrNotDead and
// says its status, or wraps domain.ErrNotFound when there is no such row
// (finished rows are deleted after outbox.retention).
func (db *DB) RetryDeadEvent(ctx context.Context, id int64) error {
	n, err := db.RetryDead(ctx, id)
	if err != nil || n == 1 {
		return err
	}
	var status string
	err = db.primary.QueryRow(ctx, `SELECT status FROM outbox WHERE id = $1`, id).Scan(&status)
	switch {
	case isNoRows(err):
		return fmt.Errorf("outbox event %d: %w", id, domain.ErrNotFound)
	case err != nil:
		return fmt.Errorf("retry dead outbox row %d: %w", id, err)
	}
	return fmt.Errorf("outbox event %d is %s: %w", id, status, domain.ErrNotDead)
}

// DeadEvents returns up to limit dead outbox rows, the last to die first
// (rows parked before died_at was recorded last), and how many are dead in
// all.
func (db *DB) DeadEvents(ctx context.Context, limit int) ([]domain.DeadEvent, int64, error) {
	rows, err := db.primary.Query(ctx, `
SELECT id, event_type, payload, attempts, failures, COALESCE(last_error, ''), created_at, died_at, count(*) OVER ()
FROM outbox WHERE status = 'dead'
ORDER BY died_at DESC NULLS LAST, id DESC
LIMIT $1`, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("list dead outbox rows: %w", err)
	}
	var total int64
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.DeadEvent, error) {
		var e domain.DeadEvent
		var diedAt *time.Time
		err := row.Scan(&e.ID, &e.Type, &e.Payload, &e.Attempt, &e.Failures, &e.LastError, &e.CreatedAt, &diedAt, &total)
		if diedAt != nil {
			e.DiedAt = *diedAt
		}
		return e, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list dead outbox rows: %w", err)
	}
	return events, total, nil
}

// DeleteFinished deletes up to limit rows that finished more than olderThan
// ago, and returns how many it deleted. Called in a loop by the cleaner, so
// that no single statement holds locks for long.
func (db *DB) DeleteFinished(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := db.primary.Exec(ctx, `
DELETE FROM outbox WHERE id IN (
    SELECT id FROM outbox WHERE status = 'done' AND finished_at < now() - $1::interval
    LIMIT $2 FOR UPDATE SKIP LOCKED)`, olderThan, limit)
	if err != nil {
		return 0, fmt.Errorf("delete finished outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// OutboxStats counts outbox rows by state.
func (db *DB) OutboxStats(ctx context.Context) (domain.OutboxStats, error) {
	var s domain.OutboxStats
	var oldest float64
	err := db.primary.QueryRow(ctx, `
SELECT
    count(*) FILTER (WHERE status = 'pending'),
    count(*) FILTER (WHERE status IN ('publishing', 'published')),
    count(*) FILTER (WHERE status = 'dead'),
    COALESCE(extract(epoch FROM now() - min(created_at) FILTER (WHERE status <> 'dead')), 0)
FROM outbox WHERE status IN ('pending', 'publishing', 'published', 'dead')`).
		Scan(&s.Pending, &s.InFlight, &s.Dead, &oldest)
	if err != nil {
		return domain.OutboxStats{}, fmt.Errorf("outbox stats: %w", err)
	}
	s.OldestPendingAge = time.Duration(oldest * float64(time.Second))
	return s, nil
}

// ChunkBoundaries returns the follower ids that end each full chunk of size
// followers of authorID, ascending: chunk k holds the followers above
// boundary k-1 up to boundary k, and the last chunk those above the last
// boundary. One index-only pass over the author's followers.
func (db *DB) ChunkBoundaries(ctx context.Context, authorID int64, size int) ([]int64, error) {
	return db.queryIDs(ctx, "chunk boundaries", `
SELECT follower_id FROM (
    SELECT follower_id, row_number() OVER (ORDER BY follower_id) AS rn
    FROM follows WHERE followee_id = $1
) t WHERE rn % $2 = 0 ORDER BY follower_id`, authorID, size)
}

// SplitFanout writes one fanout.chunk row per chunk of the parent event's
// followers and parks the parent until its chunks are done, in one
// transaction, and wakes the dispatchers. It returns how many chunks the
// parent has left (0 if the parent is not in flight).
//
// Only the first split writes chunks; splitting again (a redelivered
// parent, two workers holding one ticket) changes nothing, whatever chunks
// the later caller computed. The parent row is locked before anything is
// decided: two splits that start together are serialized on it, and the
// second sees the first's chunks (a statement-level snapshot would not, and
// would add its extra chunks to a count that did not include them).
func (db *DB) SplitFanout(ctx context.Context, parentID int64, chunks []domain.ChunkPayload) (int, error) {
	payloads := make([]string, len(chunks))
	for i, c := range chunks {
		b, err := json.Marshal(c)
		if err != nil {
			return 0, fmt.Errorf("split fan-out: %w", err)
		}
		payloads[i] = string(b)
	}
	var n int
	err := pgx.BeginFunc(ctx, db.primary, func(tx pgx.Tx) error {
		var left *int
		var inFlight bool
		err := tx.QueryRow(ctx, `
SELECT chunks_left, status IN ('pending', 'publishing', 'published') FROM outbox WHERE id = $1 FOR UPDATE`,
			parentID).Scan(&left, &inFlight)
		switch {
		case isNoRows(err):
			return nil
		case err != nil:
			return err
		case !inFlight:
			return nil
		case left != nil: // split before
			n = *left
			return nil
		}
		if len(payloads) == 0 {
			return errors.New("no chunks")
		}
		// The count is of the unfinished chunks the parent has, those just
		// written and any there were, so it cannot disagree with them.
		if err := tx.QueryRow(ctx, `
WITH c AS (
    INSERT INTO outbox (event_type, payload, parent_id, chunk_no, created_at)
    SELECT '`+domain.FanoutChunk+`', p.payload::jsonb, o.id, p.no, o.created_at
    FROM outbox o, unnest($2::text[]) WITH ORDINALITY AS p(payload, no)
    WHERE o.id = $1
    ON CONFLICT (parent_id, chunk_no) WHERE parent_id IS NOT NULL DO NOTHING
    RETURNING 1
)
UPDATE outbox SET due_at = 'infinity', chunks_left = (SELECT count(*) FROM c)
    + (SELECT count(*) FROM outbox WHERE parent_id = $1 AND status <> 'done')
WHERE id = $1
RETURNING chunks_left`, parentID, payloads).Scan(&n); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, OutboxChannel)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("split fan-out of outbox row %d: %w", parentID, err)
	}
	return n, nil
}

// FinishChunk marks a chunk finished and counts it off its parent, which is
// done with its last chunk. It reports whether this call finished the parent
// — never for a chunk finished before, nor for one finished after its parent
// (a redelivered parent fanned out whole) — and then the delivery latency,
// the parent's age on the database clock.
func (db *DB) FinishChunk(ctx context.Context, id int64) (parentDone bool, latency time.Duration, err error) {
	var seconds *float64
	err = db.primary.QueryRow(ctx, `
WITH c AS (
    UPDATE outbox SET status = 'done', finished_at = now(), last_error = NULL
    WHERE id = $1 AND status IN ('pending', 'publishing', 'published')
    RETURNING parent_id
), p AS (
    UPDATE outbox SET chunks_left = chunks_left - 1,
        status = CASE WHEN chunks_left = 1 THEN 'done' ELSE status END,
        finished_at = CASE WHEN chunks_left = 1 THEN now() ELSE finished_at END
    WHERE id = (SELECT parent_id FROM c)
      AND status IN ('pending', 'publishing', 'published') AND chunks_left > 0
    RETURNING status, extract(epoch FROM now() - created_at)::float8 AS age
)
SELECT (SELECT age FROM p WHERE status = 'done')`, id).Scan(&seconds)
	if err != nil {
		return false, 0, fmt.Errorf("finish chunk %d: %w", id, err)
	}
	if seconds == nil {
		return false, 0, nil
	}
	return true, secondsToDuration(*seconds), nil
}
