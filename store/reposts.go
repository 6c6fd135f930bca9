package store

import (
	"context"
	"fmt"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/traceparent"
)

// blockedSQL is true when $1 and the author o.author_id block each other,
// either way.
const blockedSQL = `EXISTS (SELECT 1 FROM blocks
    WHERE (blocker_id = $1 AND blocked_id = o.author_id) OR (blocker_id = o.author_id AND blocked_id = $1))`

// createRepostSQL writes the repost of original $2 by $1 and its
// post.created outbox row in one statement, when the original is live, not
// $1's own and no block stands between the two; a live repost of it by $1
// already there makes it insert nothing. The original's row is held FOR
// SHARE: a delete of it waits for this to commit, and then deletes the
// repost too (deleteRepostsSQL); a delete that committed first makes this
// find the original deleted.
const createRepostSQL = `
WITH o AS (
    SELECT id, author_id FROM posts WHERE id = $2 AND deleted_at IS NULL AND repost_of IS NULL FOR SHARE
), r AS (
    INSERT INTO posts (author_id, body, repost_of)
    SELECT $1, '', o.id FROM o WHERE o.author_id <> $1 AND NOT ` + blockedSQL + `
    ON CONFLICT (author_id, repost_of) WHERE repost_of IS NOT NULL AND deleted_at IS NULL DO NOTHING
    RETURNING id, author_id, created_at
), ob AS (
    INSERT INTO outbox (event_type, payload, created_at, trace_context)
    SELECT '` + domain.PostCreated + `', jsonb_build_object('post_id', id, 'author_id', author_id), created_at, NULLIF($3, '') FROM r
)
SELECT id FROM r`

// CreateRepost reposts the post originalID (an original, not a repost) on
// behalf of userID and returns the repost, with created false when userID
// had reposted it already (nothing is written then). The original missing,
// deleted or behind a block is domain.ErrNotFound; one's own,
// domain.ErrOwnPost.
func (db *DB) CreateRepost(ctx context.Context, userID, originalID int64) (domain.Post, bool, error) {
	var id int64
	err := db.primary.QueryRow(ctx, createRepostSQL, userID, originalID, traceparent.From(ctx)).Scan(&id)
	created := err == nil
	if err != nil && !isNoRows(err) {
		return domain.Post{}, false, fmt.Errorf("create repost: %w", err)
	}
	if !created {
		// Why nothing was written: a repost there already, or a refusal.
		var author int64
		var existing *int64
		var blocked bool
		err = db.primary.QueryRow(ctx, `
SELECT o.author_id, `+blockedSQL+`,
       (SELECT id FROM posts WHERE author_id = $1 AND repost_of = $2 AND deleted_at IS NULL)
FROM posts o WHERE o.id = $2 AND o.deleted_at IS NULL AND o.repost_of IS NULL`, userID, originalID).
			Scan(&author, &blocked, &existing)
		switch {
		case isNoRows(err):
			return domain.Post{}, false, domain.ErrNotFound
		case err != nil:
			return domain.Post{}, false, fmt.Errorf("create repost: %w", err)
		case author == userID:
			return domain.Post{}, false, domain.ErrOwnPost
		case blocked || existing == nil:
			return domain.Post{}, false, domain.ErrNotFound
		}
		id = *existing
	}
	post, err := db.Post(ctx, id)
	if err != nil {
		return domain.Post{}, false, fmt.Errorf("create repost: %w", err)
	}
	return post, created, nil
}
