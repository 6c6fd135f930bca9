package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/store"
)

func eventIDs(events []domain.Event) []int64 {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// requireClaim claims with a long lease and requires exactly the given rows.
func requireClaim(t *testing.T, db *store.DB, want ...int64) []domain.Event {
	t.Helper()
	events, err := db.Claim(t.Context(), 100, time.Minute)
	require.NoError(t, err)
	got := eventIDs(events)
	slices.Sort(got)
	if want == nil {
		want = []int64{}
	}
	require.Equal(t, want, got, "claimed rows")
	return events
}

// claimEventually claims until a claim returns rows: leases, redelivery
// deadlines and backoffs run out on the database clock.
func claimEventually(t *testing.T, db *store.DB) []domain.Event {
	t.Helper()
	var events []domain.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := db.Claim(t.Context(), 10, time.Minute)
		require.NoError(c, err)
		require.NotEmpty(c, got)
		events = got
	}, 10*time.Second, 20*time.Millisecond)
	return events
}

func TestClaim(t *testing.T) {
	t.Parallel()

	t.Run("LeasesDueRowsAndCountsTheAttempt", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ctx := t.Context()
		p, _, err := db.CreatePost(ctx, 11, "hi", "")
		require.NoError(t, err)
		_, err = db.Follow(ctx, 12, 11)
		require.NoError(t, err)
		rows := outboxRows(t, bundle.pool)
		require.Len(t, rows, 2)

		events, err := db.Claim(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, events, 2)
		slices.SortFunc(events, func(a, b domain.Event) int { return int(a.ID - b.ID) })

		require.Equal(t, rows[0].ID, events[0].ID)
		require.Equal(t, domain.PostCreated, events[0].Type)
		require.Equal(t, domain.PostPayload{PostID: p.ID, AuthorID: 11}, decodeJSON[domain.PostPayload](t, events[0].Payload))
		require.Equal(t, 1, events[0].Attempt)
		require.True(t, p.CreatedAt.Equal(events[0].CreatedAt), "event created_at is the post's")

		require.Equal(t, rows[1].ID, events[1].ID)
		require.Equal(t, domain.FollowCreated, events[1].Type)
		require.Equal(t, domain.FollowPayload{FollowerID: 12, FolloweeID: 11}, decodeJSON[domain.FollowPayload](t, events[1].Payload))
		require.Equal(t, 1, events[1].Attempt)

		for _, r := range outboxRows(t, bundle.pool) {
			require.Equal(t, "publishing", r.Status)
			require.Equal(t, 1, r.Attempts)
			require.Greater(t, r.DueIn, 50*time.Second, "due_at is the lease expiry")
			require.LessOrEqual(t, r.DueIn, time.Minute)
		}
		requireClaim(t, db) // leased: nothing left to claim
	})

	t.Run("TakesAtMostLimitOldestFirst", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 5)

		events, err := db.Claim(t.Context(), 3, time.Minute)
		require.NoError(t, err)
		got := eventIDs(events)
		slices.Sort(got)
		require.Equal(t, ids[:3], got)
		requireClaim(t, db, ids[3:]...)
	})

	t.Run("SkipsRowsNotDueYetAndFinishedOrDeadRows", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 4)
		exec(t, bundle.pool, "UPDATE outbox SET due_at = now() + interval '1 hour' WHERE id = $1", ids[0])
		exec(t, bundle.pool, "UPDATE outbox SET status = 'done', finished_at = now() WHERE id = $1", ids[1])
		exec(t, bundle.pool, "UPDATE outbox SET status = 'dead' WHERE id = $1", ids[2])

		requireClaim(t, db, ids[3])
		requireClaim(t, db)
	})

	t.Run("AClaimedRowIsClaimableAgainWhenItsLeaseExpires", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)

		events, err := db.Claim(t.Context(), 10, 50*time.Millisecond)
		require.NoError(t, err)
		require.Len(t, events, 1)
		require.Equal(t, 1, events[0].Attempt)

		again := claimEventually(t, db)
		require.Equal(t, ids, eventIDs(again))
		require.Equal(t, 2, again[0].Attempt)
		require.Equal(t, 2, getOutboxRow(t, bundle.pool, ids[0]).Attempts)
	})

	t.Run("ConcurrentClaimsTakeDisjointRowsCoveringAll", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1000)

		const claimers = 2
		claimed := make([][]int64, claimers)
		errs := make([]error, claimers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for c := range claimers {
			wg.Go(func() {
				<-start
				for {
					events, err := db.Claim(t.Context(), 100, time.Minute)
					if err != nil {
						errs[c] = err
						return
					}
					if len(events) == 0 {
						return
					}
					claimed[c] = append(claimed[c], eventIDs(events)...)
				}
			})
		}
		close(start)
		wg.Wait()

		seen := make(map[int64]int, len(ids))
		for c := range claimers {
			require.NoError(t, errs[c])
			for _, id := range claimed[c] {
				seen[id]++
			}
		}
		for _, id := range ids {
			require.Equal(t, 1, seen[id], "row %d claimed once", id)
		}
		require.Len(t, seen, len(ids))
		for _, r := range outboxRows(t, bundle.pool) {
			require.Equal(t, "publishing", r.Status)
			require.Equal(t, 1, r.Attempts, "row %d", r.ID)
		}
	})
}

func TestMarkPublished(t *testing.T) {
	t.Parallel()

	t.Run("RecordsPublishedAndRedeliversAfterTheDeadline", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 2)
		requireClaim(t, db, ids...)

		require.NoError(t, db.MarkPublished(t.Context(), ids[:1], ticketsFor(ids[:1]), 50*time.Millisecond))
		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "published", r.Status)
		require.NotNil(t, r.PublishedAt)
		require.Equal(t, "publishing", getOutboxRow(t, bundle.pool, ids[1]).Status, "other rows untouched")

		// No worker finished it: it is due again, as a lost ticket.
		again := claimEventually(t, db)
		require.Equal(t, ids[:1], eventIDs(again))
		require.Equal(t, 2, again[0].Attempt)
	})

	t.Run("NotDueBeforeTheDeadline", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		require.NoError(t, db.MarkPublished(t.Context(), ids, ticketsFor(ids), time.Hour))
		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Greater(t, r.DueIn, 59*time.Minute)
		requireClaim(t, db)
	})

	t.Run("LeavesAFinishedRowFinished", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		// A fast worker finished the fan-out before the dispatcher recorded the publish.
		require.NoError(t, db.Finish(t.Context(), ids[0]))
		require.NoError(t, db.MarkPublished(t.Context(), ids, ticketsFor(ids), 50*time.Millisecond))

		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "done", r.Status)
		require.Nil(t, r.PublishedAt)
		require.NotNil(t, r.FinishedAt)
	})
}

func TestExtend(t *testing.T) {
	t.Parallel()

	t.Run("PushesBackTheDeadlineOfARunningFanOut", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		require.NoError(t, db.MarkPublished(t.Context(), ids, ticketsFor(ids), time.Second))

		require.NoError(t, db.Extend(t.Context(), ids[0], time.Hour))
		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "published", r.Status)
		require.Greater(t, r.DueIn, 59*time.Minute)
	})

	t.Run("NeverBringsTheDeadlineForward", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		require.NoError(t, db.MarkPublished(t.Context(), ids, ticketsFor(ids), time.Hour))

		require.NoError(t, db.Extend(t.Context(), ids[0], time.Second))
		require.Greater(t, getOutboxRow(t, bundle.pool, ids[0]).DueIn, 59*time.Minute)
	})

	t.Run("LeavesPendingAndFinishedRowsAlone", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 2)
		requireClaim(t, db, ids...)
		require.NoError(t, db.Finish(t.Context(), ids[1]))
		exec(t, bundle.pool, "UPDATE outbox SET status = 'pending', due_at = now() - interval '1 second' WHERE id = $1", ids[0])

		require.NoError(t, db.Extend(t.Context(), ids[0], time.Hour))
		require.NoError(t, db.Extend(t.Context(), ids[1], time.Hour))
		require.Less(t, getOutboxRow(t, bundle.pool, ids[0]).DueIn, time.Duration(0), "the pending row stays due")
		require.Equal(t, "done", getOutboxRow(t, bundle.pool, ids[1]).Status)
		requireClaim(t, db, ids[0])
	})
}

func TestFinish(t *testing.T) {
	t.Parallel()

	t.Run("MarksDoneAndIsIdempotent", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 2)
		requireClaim(t, db, ids...)
		require.NoError(t, db.MarkPublished(t.Context(), ids, ticketsFor(ids), time.Hour))
		_, err := db.Fail(t.Context(), ids[0], 10, time.Hour, "transient")
		require.NoError(t, err)
		exec(t, bundle.pool, "UPDATE outbox SET due_at = now() WHERE id = $1", ids[0])
		requireClaim(t, db, ids[0])

		require.NoError(t, db.Finish(t.Context(), ids[0]))
		first := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "done", first.Status)
		require.NotNil(t, first.FinishedAt)
		require.Nil(t, first.LastError, "a finished row has no error")

		require.NoError(t, db.Finish(t.Context(), ids[0]))
		second := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "done", second.Status)
		require.True(t, first.FinishedAt.Equal(*second.FinishedAt), "finishing again changes nothing")
		require.Equal(t, "published", getOutboxRow(t, bundle.pool, ids[1]).Status)

		// A finished row is never claimed again, even past its redelivery deadline.
		exec(t, bundle.pool, "UPDATE outbox SET due_at = now() - interval '1 second'")
		requireClaim(t, db, ids[1])
	})

	t.Run("LeavesADeadRowDead", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		require.NoError(t, db.Bury(t.Context(), ids[0], "poison"))
		require.NoError(t, db.Finish(t.Context(), ids[0]))
		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "dead", r.Status)
		require.Nil(t, r.FinishedAt)
	})

	t.Run("MissingRowIsNotAnError", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		require.NoError(t, db.Finish(t.Context(), 424242))
	})
}

func TestFail(t *testing.T) {
	t.Parallel()

	t.Run("SchedulesARetryThenParksDeadAtMaxAttempts", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		const maxAttempts = 3

		for attempt := 1; attempt <= maxAttempts; attempt++ {
			events := requireClaim(t, db, ids...)
			require.Equal(t, attempt, events[0].Attempt)

			dead, err := db.Fail(t.Context(), ids[0], maxAttempts, time.Hour, "boom "+string(rune('0'+attempt)))
			require.NoError(t, err)
			r := getOutboxRow(t, bundle.pool, ids[0])
			require.Equal(t, attempt, r.Attempts)
			require.NotNil(t, r.LastError)
			require.Equal(t, "boom "+string(rune('0'+attempt)), *r.LastError)
			if attempt < maxAttempts {
				require.False(t, dead, "attempt %d", attempt)
				require.Equal(t, "pending", r.Status)
				require.Greater(t, r.DueIn, 59*time.Minute, "due after the backoff")
				requireClaim(t, db) // not due yet
				exec(t, bundle.pool, "UPDATE outbox SET due_at = now() WHERE id = $1", ids[0])
				continue
			}
			require.True(t, dead, "attempt %d", attempt)
			require.Equal(t, "dead", r.Status)
		}
		exec(t, bundle.pool, "UPDATE outbox SET due_at = now() - interval '1 hour'")
		requireClaim(t, db) // dead rows are never claimed
	})

	t.Run("RetryIsClaimableAfterTheBackoff", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		dead, err := db.Fail(t.Context(), ids[0], 5, 50*time.Millisecond, "later")
		require.NoError(t, err)
		require.False(t, dead)

		again := claimEventually(t, db)
		require.Equal(t, ids, eventIDs(again))
		require.Equal(t, 2, again[0].Attempt)
	})

	t.Run("KeepsAtMost2000CharactersOfTheCause", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		_, err := db.Fail(t.Context(), ids[0], 5, time.Minute, strings.Repeat("é", 3000))
		require.NoError(t, err)
		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, strings.Repeat("é", 2000), *r.LastError)
	})

	t.Run("LeavesAFinishedRowFinished", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		require.NoError(t, db.Finish(t.Context(), ids[0]))

		dead, err := db.Fail(t.Context(), ids[0], 1, time.Minute, "late failure")
		require.NoError(t, err)
		require.False(t, dead)
		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "done", r.Status)
		require.Nil(t, r.LastError)
	})
}

func TestBury(t *testing.T) {
	t.Parallel()

	t.Run("ParksDeadWhateverTheAttempts", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 2)
		requireClaim(t, db, ids...)

		require.NoError(t, db.Bury(t.Context(), ids[0], "malformed payload"))
		r := getOutboxRow(t, bundle.pool, ids[0])
		require.Equal(t, "dead", r.Status)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, "malformed payload", *r.LastError)
		require.Equal(t, "publishing", getOutboxRow(t, bundle.pool, ids[1]).Status)
	})

	t.Run("LeavesAFinishedRowFinished", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		require.NoError(t, db.Finish(t.Context(), ids[0]))
		require.NoError(t, db.Bury(t.Context(), ids[0], "too late"))
		require.Equal(t, "done", getOutboxRow(t, bundle.pool, ids[0]).Status)
	})
}

func TestRetryDead(t *testing.T) {
	t.Parallel()

	// deadRows makes three rows dead after some attempts, and one pending row.
	deadRows := func(t *testing.T) (*store.DB, *testBundle, []int64) {
		t.Helper()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 4)
		requireClaim(t, db, ids...)
		for _, id := range ids[:3] {
			dead, err := db.Fail(t.Context(), id, 1, time.Minute, "poison")
			require.NoError(t, err)
			require.True(t, dead)
		}
		exec(t, bundle.pool, "UPDATE outbox SET status = 'pending', due_at = now() + interval '1 hour' WHERE id = $1", ids[3])
		return db, bundle, ids
	}

	t.Run("OneByIDResetsItsAttempts", func(t *testing.T) {
		t.Parallel()
		db, bundle, ids := deadRows(t)

		n, err := db.RetryDead(t.Context(), ids[1])
		require.NoError(t, err)
		require.Equal(t, int64(1), n)

		r := getOutboxRow(t, bundle.pool, ids[1])
		require.Equal(t, "pending", r.Status)
		require.Zero(t, r.Attempts)
		require.LessOrEqual(t, r.DueIn, time.Duration(0))
		require.Equal(t, "dead", getOutboxRow(t, bundle.pool, ids[0]).Status)
		require.Equal(t, "dead", getOutboxRow(t, bundle.pool, ids[2]).Status)

		events := requireClaim(t, db, ids[1])
		require.Equal(t, 1, events[0].Attempt, "a fresh attempt count")

		n, err = db.RetryDead(t.Context(), ids[1])
		require.NoError(t, err)
		require.Zero(t, n, "no longer dead")
		n, err = db.RetryDead(t.Context(), ids[3])
		require.NoError(t, err)
		require.Zero(t, n, "a pending row is not dead")
	})

	t.Run("ARevivedRowHasItsFailuresForgivenAndNoTicket", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 1)
		requireClaim(t, db, ids...)
		require.NoError(t, db.MarkPublished(t.Context(), ids, ticketsFor(ids), time.Hour))
		dead, err := db.Fail(t.Context(), ids[0], 5, time.Hour, "transient")
		require.NoError(t, err)
		require.False(t, dead)
		// A poison verdict parks it with its ticket still recorded.
		exec(t, bundle.pool, "UPDATE outbox SET ticket = '42-0' WHERE id = $1", ids[0])
		require.NoError(t, db.Bury(t.Context(), ids[0], "poison"))

		n, err := db.RetryDead(t.Context(), ids[0])
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		events := requireClaim(t, db, ids...)
		require.Empty(t, events[0].Ticket, "published afresh, not taken for a ticket still queued")
		require.Zero(t, events[0].Failures, "its earlier failures are forgiven")
		require.Equal(t, 1, events[0].Attempt)

		// Its full budget again: with max 2, one failure is not death.
		dead, err = db.Fail(t.Context(), ids[0], 2, time.Hour, "again")
		require.NoError(t, err)
		require.False(t, dead)
	})

	t.Run("AllWithZero", func(t *testing.T) {
		t.Parallel()
		db, bundle, ids := deadRows(t)

		n, err := db.RetryDead(t.Context(), 0)
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		for _, id := range ids[:3] {
			r := getOutboxRow(t, bundle.pool, id)
			require.Equal(t, "pending", r.Status)
			require.Zero(t, r.Attempts)
		}
		require.Greater(t, getOutboxRow(t, bundle.pool, ids[3]).DueIn, 59*time.Minute, "the pending row is untouched")
		requireClaim(t, db, ids[:3]...)

		n, err = db.RetryDead(t.Context(), 0)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// TestRetryDeadEvent: one dead event is made pending; an event that is not
// dead, or does not exist, is left alone with an error that says which.
func TestRetryDeadEvent(t *testing.T) {
	t.Parallel()
	db, bundle := setup(t)
	ids := insertEvents(t, bundle.pool, 2)
	requireClaim(t, db, ids...)
	require.NoError(t, db.Bury(t.Context(), ids[0], "poison"))

	require.NoError(t, db.RetryDeadEvent(t.Context(), ids[0]))
	require.Equal(t, "pending", getOutboxRow(t, bundle.pool, ids[0]).Status)

	err := db.RetryDeadEvent(t.Context(), ids[0])
	require.ErrorIs(t, err, domain.ErrNotDead)
	require.EqualError(t, err, fmt.Sprintf("outbox event %d is pending: only a dead event can be retried", ids[0]))
	err = db.RetryDeadEvent(t.Context(), ids[1])
	require.ErrorIs(t, err, domain.ErrNotDead)
	require.ErrorContains(t, err, "is publishing")
	require.Equal(t, "publishing", getOutboxRow(t, bundle.pool, ids[1]).Status, "left alone")

	err = db.RetryDeadEvent(t.Context(), ids[1]+1000)
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.ErrorContains(t, err, fmt.Sprint(ids[1]+1000))
}

// TestDeadEvents: the dead rows with what an operator needs to judge them —
// type, payload, attempts, failures, last error, when they died — the last
// to die first, and how many there are in all.
func TestDeadEvents(t *testing.T) {
	t.Parallel()
	db, bundle := setup(t)
	ctx := t.Context()
	ids := insertEvents(t, bundle.pool, 4)
	requireClaim(t, db, ids...)
	dead, err := db.Fail(ctx, ids[0], 1, time.Minute, "post 1 does not exist")
	require.NoError(t, err)
	require.True(t, dead)
	exec(t, bundle.pool, "UPDATE outbox SET died_at = died_at - interval '1 hour' WHERE id = $1", ids[0])
	require.NoError(t, db.Bury(ctx, ids[1], "delivered 6 times"))
	notDead, err := db.Fail(ctx, ids[2], 5, time.Minute, "transient")
	require.NoError(t, err)
	require.False(t, notDead)
	// Parked dead by a version before died_at.
	exec(t, bundle.pool, "UPDATE outbox SET status = 'dead', died_at = NULL, last_error = NULL WHERE id = $1", ids[3])

	events, total, err := db.DeadEvents(ctx, 10)
	require.NoError(t, err)
	require.EqualValues(t, 3, total)
	require.Equal(t, []int64{ids[1], ids[0], ids[3]}, []int64{events[0].ID, events[1].ID, events[2].ID},
		"the last to die first, the undated last")

	e := events[1]
	require.Equal(t, domain.PostCreated, e.Type)
	require.Equal(t, 1, e.Attempt)
	require.Equal(t, 1, e.Failures)
	require.Equal(t, "post 1 does not exist", e.LastError)
	require.JSONEq(t, `{"post_id": 1, "author_id": 1}`, string(e.Payload))
	require.WithinDuration(t, time.Now().Add(-time.Hour), e.DiedAt, time.Minute)
	require.False(t, e.CreatedAt.IsZero())
	a, ok := e.Aggregate()
	require.True(t, ok)
	require.Equal(t, domain.Aggregate{Type: "post", ID: 1}, a)
	require.WithinDuration(t, time.Now(), events[0].DiedAt, time.Minute)
	require.True(t, events[2].DiedAt.IsZero())
	require.Empty(t, events[2].LastError)

	events, total, err = db.DeadEvents(ctx, 1)
	require.NoError(t, err)
	require.EqualValues(t, 3, total, "the total, whatever the limit")
	require.Len(t, events, 1)

	// Revived, it leaves the list and forgets when it died.
	require.NoError(t, db.RetryDeadEvent(ctx, ids[1]))
	events, total, err = db.DeadEvents(ctx, 10)
	require.NoError(t, err)
	require.EqualValues(t, 2, total)
	require.Equal(t, ids[0], events[0].ID)
	var diedAt *time.Time
	require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT died_at FROM outbox WHERE id = $1", ids[1]).Scan(&diedAt))
	require.Nil(t, diedAt)

	require.NoError(t, db.RetryDeadEvent(ctx, ids[0]))
	require.NoError(t, db.RetryDeadEvent(ctx, ids[3]))
	events, total, err = db.DeadEvents(ctx, 10)
	require.NoError(t, err)
	require.Zero(t, total)
	require.Empty(t, events)
}

func TestDeleteFinished(t *testing.T) {
	t.Parallel()

	t.Run("DeletesOnlyDoneRowsFinishedBeforeTheRetentionInBatches", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 11)
		old, recent, pending, dead, lateDone := ids[:5], ids[5:7], ids[7], ids[8:10], ids[10]
		exec(t, bundle.pool, "UPDATE outbox SET status = 'done', finished_at = now() - interval '2 hours' WHERE id = ANY($1)", old)
		exec(t, bundle.pool, "UPDATE outbox SET status = 'done', finished_at = now() - interval '10 minutes' WHERE id = ANY($1)", recent)
		// Not done rows are kept whatever their times say.
		exec(t, bundle.pool, "UPDATE outbox SET status = 'dead', finished_at = now() - interval '3 hours', created_at = now() - interval '3 hours' WHERE id = ANY($1)", dead)
		exec(t, bundle.pool, "UPDATE outbox SET created_at = now() - interval '3 hours' WHERE id = $1", pending)
		// The retention counts from the finish, not from the creation.
		exec(t, bundle.pool, "UPDATE outbox SET status = 'done', created_at = now() - interval '3 hours', finished_at = now() - interval '59 minutes' WHERE id = $1", lateDone)

		for _, want := range []int64{2, 2, 1, 0} {
			n, err := db.DeleteFinished(t.Context(), time.Hour, 2)
			require.NoError(t, err)
			require.Equal(t, want, n, "batches of at most the limit")
		}

		var left []int64
		for _, r := range outboxRows(t, bundle.pool) {
			left = append(left, r.ID)
		}
		require.Equal(t, append(append(append(slices.Clone(recent), pending), dead...), lateDone), left)
	})

	t.Run("SkipsRowsAnotherSessionHoldsInsteadOfWaiting", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 4)
		exec(t, bundle.pool, "UPDATE outbox SET status = 'done', finished_at = now() - interval '2 hours'")
		// Another cleaner (or anything else) holds two of them.
		tx, err := bundle.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.Background()) //nolint:errcheck
		_, err = tx.Exec(t.Context(), "SELECT 1 FROM outbox WHERE id = ANY($1) FOR UPDATE", ids[:2])
		require.NoError(t, err)

		// Bounded only so that a wait shows as a failure rather than a hang.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		n, err := db.DeleteFinished(ctx, time.Hour, 10)
		require.NoError(t, err, "the cleaner does not wait for locked rows")
		require.Equal(t, int64(2), n)
		require.Len(t, outboxRows(t, bundle.pool), 2)

		require.NoError(t, tx.Rollback(t.Context()))
		n, err = db.DeleteFinished(t.Context(), time.Hour, 10)
		require.NoError(t, err)
		require.Equal(t, int64(2), n, "the next pass takes them")
		require.Empty(t, outboxRows(t, bundle.pool))
	})
}

func TestOutboxStats(t *testing.T) {
	t.Parallel()

	t.Run("EmptyOutbox", func(t *testing.T) {
		t.Parallel()
		db, _ := setup(t)
		s, err := db.OutboxStats(t.Context())
		require.NoError(t, err)
		require.Equal(t, domain.OutboxStats{}, s)
	})

	t.Run("CountsRowsByState", func(t *testing.T) {
		t.Parallel()
		db, bundle := setup(t)
		ids := insertEvents(t, bundle.pool, 12)
		set := func(status string, ids []int64, age string) {
			exec(t, bundle.pool, "UPDATE outbox SET status = $1, created_at = now() - $3::interval WHERE id = ANY($2)", status, ids, age)
		}
		set("pending", ids[0:3], "0")
		set("pending", ids[3:4], "1 hour") // the oldest unfinished row
		set("publishing", ids[4:6], "10 minutes")
		set("published", ids[6:7], "10 minutes")
		set("dead", ids[7:9], "5 hours") // older, but given up
		set("done", ids[9:12], "6 hours")

		s, err := db.OutboxStats(t.Context())
		require.NoError(t, err)
		require.Equal(t, int64(4), s.Pending)
		require.Equal(t, int64(3), s.InFlight)
		require.Equal(t, int64(2), s.Dead)
		require.GreaterOrEqual(t, s.OldestPendingAge, time.Hour)
		require.Less(t, s.OldestPendingAge, time.Hour+time.Minute)
	})
}

// ticketsFor makes up a stream entry id per row, as a queue would give.
func ticketsFor(ids []int64) []string {
	tickets := make([]string, len(ids))
	for i, id := range ids {
		tickets[i] = fmt.Sprintf("%d-0", id)
	}
	return tickets
}
