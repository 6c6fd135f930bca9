package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/traceparent"
)

// followSQL adds the edge, bumps the followee's follower count and writes
// follow.created, all in one statement; an existing edge, or a block
// between the two (the second column), changes nothing.
const followSQL = `
WITH b AS (
    SELECT EXISTS (SELECT 1 FROM blocks WHERE (blocker_id = $1 AND blocked_id = $2)
                                           OR (blocker_id = $2 AND blocked_id = $1)) AS blocked
), f AS (
    INSERT INTO follows (follower_id, followee_id) SELECT $1, $2 FROM b WHERE NOT b.blocked
    ON CONFLICT DO NOTHING
    RETURNING follower_id, followee_id
), c AS (
    INSERT INTO follower_counts (user_id, followers) SELECT followee_id, 1 FROM f
    ON CONFLICT (user_id) DO UPDATE SET followers = follower_counts.followers + 1
), o AS (
    INSERT INTO outbox (event_type, payload, trace_context)
    SELECT '` + domain.FollowCreated + `', jsonb_build_object('follower_id', follower_id, 'followee_id', followee_id), NULLIF($3, '') FROM f
)
SELECT count(*), (SELECT blocked FROM b) FROM f`

// unfollowSQL is followSQL undone.
const unfollowSQL = `
WITH f AS (
    DELETE FROM follows WHERE follower_id = $1 AND followee_id = $2
    RETURNING follower_id, followee_id
), c AS (
    UPDATE follower_counts SET followers = followers - 1
    WHERE user_id = (SELECT followee_id FROM f)
), o AS (
    INSERT INTO outbox (event_type, payload, trace_context)
    SELECT '` + domain.FollowDeleted + `', jsonb_build_object('follower_id', follower_id, 'followee_id', followee_id), NULLIF($3, '') FROM f
)
SELECT count(*), false FROM f`

// bumpGraphSQL takes the next version of a user's graph. Its row lock,
// held to the commit, orders the changes of one user's graph.
const bumpGraphSQL = `
INSERT INTO graph_versions (user_id, version) VALUES ($1, 1)
ON CONFLICT (user_id) DO UPDATE SET version = graph_versions.version + 1
RETURNING version`

// Follow makes follower follow followee and returns the state with the
// version it took; following twice is not an error, following while a
// block stands between the two is domain.ErrBlocked.
func (db *DB) Follow(ctx context.Context, follower, followee int64) (domain.EdgeChange, error) {
	if follower == followee {
		return domain.EdgeChange{}, domain.ErrSelfFollow
	}
	ch, blocked, err := db.changeEdge(ctx, followSQL, follower, followee)
	if err != nil {
		return ch, fmt.Errorf("follow: %w", err)
	}
	if blocked {
		return ch, domain.ErrBlocked
	}
	ch.Following = true
	return ch, nil
}

// Unfollow removes the edge, if there is one, and returns the state with the
// version it took.
func (db *DB) Unfollow(ctx context.Context, follower, followee int64) (domain.EdgeChange, error) {
	ch, _, err := db.changeEdge(ctx, unfollowSQL, follower, followee)
	if err != nil {
		return ch, fmt.Errorf("unfollow: %w", err)
	}
	return ch, nil
}

// changeEdge takes the follower's next graph version, then runs change (a
// statement of its own, so that it sees every change of the same graph
// committed while the first waited for the row lock) and counts whom the
// follower follows now, in one transaction and one round trip: a batch is
// one implicit transaction.
func (db *DB) changeEdge(ctx context.Context, change string, follower, followee int64) (ch domain.EdgeChange, blocked bool, err error) {
	ch = domain.EdgeChange{EdgeState: domain.EdgeState{Follower: follower, Followee: followee}}
	b := &pgx.Batch{}
	b.Queue(bumpGraphSQL, follower).QueryRow(func(row pgx.Row) error { return row.Scan(&ch.Version) })
	b.Queue(change, follower, followee, traceparent.From(ctx)).QueryRow(func(row pgx.Row) error {
		var n int
		err := row.Scan(&n, &blocked)
		ch.Changed = n == 1
		return err
	})
	b.Queue(followeesSQL, follower).QueryRow(func(row pgx.Row) error { return row.Scan(&ch.Followees) })
	if err := db.primary.SendBatch(ctx, b).Close(); err != nil {
		return domain.EdgeChange{}, false, err
	}
	return ch, blocked, nil
}

// followeesSQL counts whom a user follows, by the index of their follows
// (an index-only scan). Counted, not kept: a count kept beside the edges
// would drift under a binary that does not keep it, during an upgrade.
const followeesSQL = `SELECT count(*) FROM follows WHERE follower_id = $1`

// FollowState returns whether follower follows followee now, with the
// version of the follower's graph it was read at and how many they follow
// (one statement: one snapshot).
func (db *DB) FollowState(ctx context.Context, follower, followee int64) (domain.EdgeState, error) {
	st := domain.EdgeState{Follower: follower, Followee: followee}
	err := db.primary.QueryRow(ctx, `
SELECT COALESCE((SELECT version FROM graph_versions WHERE user_id = $1), 0),
       EXISTS (SELECT 1 FROM follows WHERE follower_id = $1 AND followee_id = $2),
       (`+followeesSQL+`)`,
		follower, followee).Scan(&st.Version, &st.Following, &st.Followees)
	if err != nil {
		return st, fmt.Errorf("follow state: %w", err)
	}
	return st, nil
}

// IsFollowing reports whether follower follows followee.
func (db *DB) IsFollowing(ctx context.Context, follower, followee int64) (bool, error) {
	st, err := db.FollowState(ctx, follower, followee)
	return st.Following, err
}

// Followers lists who follows userID, newest first, after the cursor (nil for
// the first page).
func (db *DB) Followers(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
	return db.listFollows(ctx, `
SELECT follower_id, created_at FROM follows
WHERE followee_id = $1 AND ($2::timestamptz IS NULL OR (created_at, follower_id) < ($2, $3))
ORDER BY created_at DESC, follower_id DESC LIMIT $4`, userID, after, limit)
}

// Following lists whom userID follows, newest first, after the cursor.
func (db *DB) Following(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
	return db.listFollows(ctx, `
SELECT followee_id, created_at FROM follows
WHERE follower_id = $1 AND ($2::timestamptz IS NULL OR (created_at, followee_id) < ($2, $3))
ORDER BY created_at DESC, followee_id DESC LIMIT $4`, userID, after, limit)
}

func (db *DB) listFollows(ctx context.Context, sql string, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
	var since *time.Time
	var id int64
	if after != nil {
		since, id = &after.Since, after.UserID
	}
	rows, err := db.read.Query(ctx, sql, userID, since, id, limit)
	if err != nil {
		return nil, fmt.Errorf("list follows: %w", err)
	}
	follows, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.Follow, error) {
		var f domain.Follow
		err := row.Scan(&f.UserID, &f.Since)
		f.Since = f.Since.UTC()
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("list follows: %w", err)
	}
	return follows, nil
}

// FollowerIDs returns up to limit follower ids of authorID greater than after,
// ascending: one keyset page of a fan-out, served by the primary key.
func (db *DB) FollowerIDs(ctx context.Context, authorID, after int64, limit int) ([]int64, error) {
	return db.FollowerIDRange(ctx, authorID, after, math.MaxInt64, limit)
}

// FollowerIDRange is FollowerIDs for the followers up to until (a chunk).
// It reads the primary: a replica that lags could miss a follower whose
// follow event already ran, and their feed would never get the post.
func (db *DB) FollowerIDRange(ctx context.Context, authorID, after, until int64, limit int) ([]int64, error) {
	return db.queryIDs(ctx, "follower ids", `
SELECT follower_id FROM follows WHERE followee_id = $1 AND follower_id > $2 AND follower_id <= $3
ORDER BY follower_id LIMIT $4`, authorID, after, until, limit)
}

// FollowerCount returns how many followers userID has, from the maintained count.
func (db *DB) FollowerCount(ctx context.Context, userID int64) (int64, error) {
	n, _, err := db.Reach(ctx, userID)
	return n, err
}

// Reach returns how many followers userID has, and whether their posts were
// ever pulled into feeds at read time instead of fanned out (a celebrity,
// now or before).
func (db *DB) Reach(ctx context.Context, userID int64) (followers int64, pulled bool, err error) {
	err = db.primary.QueryRow(ctx,
		`SELECT COALESCE(max(followers), 0), COALESCE(bool_or(pulled), false) FROM follower_counts WHERE user_id = $1`,
		userID).Scan(&followers, &pulled)
	if err != nil {
		return 0, false, fmt.Errorf("follower count: %w", err)
	}
	return followers, pulled, nil
}

// MarkPulled records that userID's posts are pulled at read time. It is
// never undone: readers keep merging the timeline of a former celebrity,
// since the posts pulled then are in nobody's feed.
func (db *DB) MarkPulled(ctx context.Context, userID int64) error {
	_, err := db.primary.Exec(ctx, `INSERT INTO follower_counts (user_id, followers, pulled) VALUES ($1, 0, true)
		ON CONFLICT (user_id) DO UPDATE SET pulled = true`, userID)
	if err != nil {
		return fmt.Errorf("mark pulled: %w", err)
	}
	return nil
}
