package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/newsfeed/newsfeed/outbox"
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
func (db *DB) Claim(ctx context.Context, limit int, lease time.Duration) ([]outbox.Event, error) {
	rows, err := db.primary.Query(ctx, claimSQL, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim outbox batch: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Event, error) {
		var e outbox.Event
		err := row.Scan(&e.ID, &e.Type, &e.Payload, &e.Attempt, &e.Failures, &e.Ticket, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox batch: %w", err)
	}
	return events, nil
}

// MarkPublished records that the queue holds tickets[i] for row ids[i]. A row
// that a fast worker already finished stays finished. If no worker reports
// the fan-out finished within redeliverAfter, the row is due again.
func (db *DB) MarkPublished(ctx context.Context, ids []int64, tickets []string, redeliverAfter time.Duration) error {
	_, err := db.primary.Exec(ctx, `
UPDATE outbox o SET status = 'published', published_at = now(), due_at = now() + $3::interval, ticket = t.ticket
FROM unnest($1::bigint[], $2::text[]) AS t(id, ticket)
WHERE o.id = t.id AND o.status = 'publishing'`, ids, tickets, redeliverAfter)
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
// parked dead meanwhile, changes nothing.
func (db *DB) Finish(ctx context.Context, id int64) error {
	_, err := db.primary.Exec(ctx, `
UPDATE outbox SET status = 'done', finished_at = now(), last_error = NULL
WHERE id = $1 AND status IN ('pending', 'publishing', 'published')`, id)
	if err != nil {
		return fmt.Errorf("finish outbox row %d: %w", id, err)
	}
	return nil
}

// Fail records a failed attempt: the row is due again after retryIn, or is
// parked dead when this was its maxAttempts-th failure. It reports whether
// the row is now dead. A row finished meanwhile stays finished.
func (db *DB) Fail(ctx context.Context, id int64, maxAttempts int, retryIn time.Duration, cause string) (dead bool, err error) {
	var status string
	err = db.primary.QueryRow(ctx, `
UPDATE outbox
SET failures = failures + 1,
    status = CASE WHEN failures + 1 >= $2 THEN 'dead' ELSE 'pending' END,
    due_at = now() + $3::interval,
    ticket = NULL,
    last_error = left($4, 2000)
WHERE id = $1 AND status IN ('pending', 'publishing', 'published')
RETURNING status`, id, maxAttempts, retryIn, cause).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fail outbox row %d: %w", id, err)
	}
	return status == "dead", nil
}

// Bury parks the row as dead at once, whatever its attempts.
func (db *DB) Bury(ctx context.Context, id int64, cause string) error {
	_, err := db.primary.Exec(ctx, `
UPDATE outbox SET status = 'dead', failures = failures + 1, last_error = left($2, 2000)
WHERE id = $1 AND status IN ('pending', 'publishing', 'published')`, id, cause)
	if err != nil {
		return fmt.Errorf("bury outbox row %d: %w", id, err)
	}
	return nil
}

// RetryDead makes dead rows pending again with fresh counts: all of them
// when id is 0, else only that one. It returns how many it revived.
func (db *DB) RetryDead(ctx context.Context, id int64) (int64, error) {
	tag, err := db.primary.Exec(ctx, `
UPDATE outbox SET status = 'pending', attempts = 0, failures = 0, ticket = NULL, due_at = now()
WHERE status = 'dead' AND ($1::bigint = 0 OR id = $1::bigint)`, id)
	if err != nil {
		return 0, fmt.Errorf("retry dead outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
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
func (db *DB) OutboxStats(ctx context.Context) (outbox.Stats, error) {
	var s outbox.Stats
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
		return outbox.Stats{}, fmt.Errorf("outbox stats: %w", err)
	}
	s.OldestPendingAge = time.Duration(oldest * float64(time.Second))
	return s, nil
}
