package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/admin"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/store"
)

// deadEvent parks an event of a post that does not exist as dead, as the
// dispatcher does after its last failed attempt, and returns its id.
func deadEvent(t *testing.T, pool *pgxpool.Pool, db *store.DB, postID int64) int64 {
	t.Helper()
	ctx := t.Context()
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO outbox (event_type, payload) VALUES
		('post.created', jsonb_build_object('post_id', $1::bigint, 'author_id', 7)) RETURNING id`, postID).Scan(&id))
	claimed, err := db.Claim(ctx, 100, time.Minute)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(claimed, func(e domain.Event) bool { return e.ID == id }))
	dead, err := db.Fail(ctx, id, 1, time.Minute, fmt.Sprintf("post %d does not exist", postID))
	require.NoError(t, err)
	require.True(t, dead)
	return id
}

func statusOf(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var status string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT status FROM outbox WHERE id = $1", id).Scan(&status))
	return status
}

func TestOutboxPanels(t *testing.T) {
	t.Parallel()
	c, b := setup(t)

	var counts admin.OutboxCounts
	call(t, c, "GET", "/admin/api/outbox", token).decode(t, &counts)
	require.Equal(t, admin.OutboxCounts{}, counts)
	var dead admin.DeadEvents
	call(t, c, "GET", "/admin/api/outbox/dead", token).decode(t, &dead)
	require.Zero(t, dead.Total)
	require.NotNil(t, dead.Events, "an empty list, not null")

	id := deadEvent(t, b.pool, b.db, 900_000)
	_, err := b.pool.Exec(t.Context(), `INSERT INTO outbox (event_type, payload, created_at) VALUES
		('follow.created', '{"follower_id": 5, "followee_id": 6}', now() - interval '90 seconds')`)
	require.NoError(t, err)

	call(t, c, "GET", "/admin/api/outbox", token).decode(t, &counts)
	require.EqualValues(t, 1, counts.Dead)
	require.EqualValues(t, 1, counts.Pending)
	require.Zero(t, counts.InFlight)
	require.InDelta(t, 90, counts.OldestPendingAgeSeconds, 30)

	call(t, c, "GET", "/admin/api/outbox/dead", token).decode(t, &dead)
	require.EqualValues(t, 1, dead.Total)
	require.Len(t, dead.Events, 1)
	e := dead.Events[0]
	require.Equal(t, id, e.ID)
	require.Equal(t, domain.PostCreated, e.Type)
	require.Equal(t, &domain.Aggregate{Type: "post", ID: 900_000}, e.Aggregate)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, 1, e.Failures)
	require.Equal(t, "post 900000 does not exist", e.LastError)
	require.NotNil(t, e.DiedAt)
	require.WithinDuration(t, time.Now(), *e.DiedAt, time.Minute)
	require.JSONEq(t, `{"post_id": 900000, "author_id": 7}`, string(e.Payload))

	t.Run("Limit", func(t *testing.T) {
		deadEvent(t, b.pool, b.db, 900_001)
		var page admin.DeadEvents
		call(t, c, "GET", "/admin/api/outbox/dead?limit=1", token).decode(t, &page)
		require.EqualValues(t, 2, page.Total)
		require.Len(t, page.Events, 1)
		for _, bad := range []string{"0", "-1", "501", "x", "1.5"} {
			res := call(t, c, "GET", "/admin/api/outbox/dead?limit="+bad, token)
			require.Equal(t, http.StatusBadRequest, res.status, bad)
			code, _ := res.errorCode(t)
			require.Equal(t, "invalid_argument", code)
		}
	})

	t.Run("Retry", func(t *testing.T) {
		res := call(t, c, "POST", fmt.Sprintf("/admin/api/outbox/dead/%d/retry", id), token)
		var done admin.RetryResult
		res.decode(t, &done)
		require.Equal(t, admin.RetryResult{ID: id, Status: "pending"}, done)
		require.Equal(t, "pending", statusOf(t, b.pool, id), "pending again in the outbox, for a dispatcher to publish")
		var attempts, failures int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT attempts, failures FROM outbox WHERE id = $1", id).
			Scan(&attempts, &failures))
		require.Zero(t, attempts, "fresh attempts")
		require.Zero(t, failures)

		// Not dead any more: refused as `outbox retry-dead --id` refuses it.
		res = call(t, c, "POST", fmt.Sprintf("/admin/api/outbox/dead/%d/retry", id), token)
		require.Equal(t, http.StatusConflict, res.status)
		code, message := res.errorCode(t)
		require.Equal(t, "not_dead", code)
		require.Equal(t, fmt.Sprintf("outbox event %d is pending: only a dead event can be retried", id), message)

		res = call(t, c, "POST", "/admin/api/outbox/dead/999999999/retry", token)
		require.Equal(t, http.StatusNotFound, res.status)
		code, message = res.errorCode(t)
		require.Equal(t, "not_found", code)
		require.Contains(t, message, "no outbox event 999999999")

		for _, bad := range []string{"0", "-3", "abc", "01", "99999999999999999999"} {
			res := call(t, c, "POST", "/admin/api/outbox/dead/"+bad+"/retry", token)
			require.Equal(t, http.StatusBadRequest, res.status, bad)
			code, _ := res.errorCode(t)
			require.Equal(t, "invalid_argument", code, bad)
		}
	})
}
