package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/traceparent"
)

// createRepostSQL writes the repost by $1 of post $2 — of its original,
// when $2 is itself a repost — and its post.created outbox row in one
// statement, when both are live, the original is not $1's own and neither
// author is one $1 hides (a mute, a block either way: hidesSQL); a live
// repost of the original by $1 already there makes it insert nothing.
// Both rows are held FOR SHARE: a delete of either waits for this to
// commit, and a delete of the original then deletes the repost too
// (deleteRepostsSQL); a delete, a mute or a block that committed first
// refuses it. It returns the repost as it wrote it (postColumns' order):
// read again, it might be gone already, taken by that delete.
var createRepostSQL = `
WITH t AS (
    SELECT author_id, COALESCE(repost_of, id) AS original FROM posts
    WHERE id = $2 AND deleted_at IS NULL FOR SHARE
), o AS (
    SELECT p.id, p.author_id, p.body, p.created_at FROM posts p, t
    WHERE p.id = t.original AND p.deleted_at IS NULL AND p.repost_of IS NULL FOR SHARE OF p
), r AS (
    INSERT INTO posts (author_id, body, repost_of)
    SELECT $1, '', o.id FROM o, t
    WHERE o.author_id <> $1 AND NOT ` + hidesSQL("$1", "o.author_id") + ` AND NOT ` + hidesSQL("$1", "t.author_id") + `
    ON CONFLICT (author_id, repost_of) WHERE repost_of IS NOT NULL AND deleted_at IS NULL DO NOTHING
    RETURNING id, author_id, body, created_at
), ob AS (
    INSERT INTO outbox (event_type, payload, created_at, trace_context)
    SELECT '` + domain.PostCreated + `', jsonb_build_object('post_id', id, 'author_id', author_id), created_at, NULLIF($3, '') FROM r
)
SELECT r.id, r.author_id, r.body, r.created_at, o.id, o.author_id, o.body, o.created_at FROM r, o`

// whyNoRepostSQL tells, in one snapshot, why createRepostSQL wrote nothing:
// the original's id and author (no row: the post or its original missing
// or deleted), whether $1 hides either author, the live repost of
// it by $1 there already (a NULL id when there is none), and the
// original's body and time.
var whyNoRepostSQL = `
SELECT o.id, o.author_id, ` + hidesSQL("$1", "o.author_id") + ` OR ` + hidesSQL("$1", "t.author_id") + `,
       e.id, COALESCE(e.author_id, 0), COALESCE(e.body, ''), COALESCE(e.created_at, now()), o.body, o.created_at
FROM posts t
JOIN posts o ON o.id = COALESCE(t.repost_of, t.id)
LEFT JOIN posts e ON e.author_id = $1 AND e.repost_of = o.id AND e.deleted_at IS NULL
WHERE t.id = $2 AND t.deleted_at IS NULL AND o.deleted_at IS NULL AND o.repost_of IS NULL`

// repostTries bounds how often CreateRepost inserts again after a repost in
// its way was deleted before it could return it.
const repostTries = 3

// holdGraphSQL makes sure the user's graph_versions row exists (waiting
// for a change that is creating it), and holdGraphLockSQL holds it FOR
// SHARE to the commit: every mute and block that could hide an author from
// the user takes the next version of that row (bumpGraphSQL), so one in
// flight is waited for and then seen, and one that comes later waits for
// this commit.
const (
	holdGraphSQL     = `INSERT INTO graph_versions (user_id, version) VALUES ($1, 0) ON CONFLICT (user_id) DO NOTHING`
	holdGraphLockSQL = `SELECT version FROM graph_versions WHERE user_id = $1 FOR SHARE`
)

// holdPostsSQL holds the post $1 and its original FOR SHARE in the order a
// delete locks them — the original (the lower id) first, then its reposts
// — so that a repost of a repost and the delete of its original never wait
// for each other. (A post's repost_of never changes: it is read unlocked.)
const holdPostsSQL = `
SELECT id FROM posts
WHERE id IN ((SELECT COALESCE(repost_of, id) FROM posts WHERE id = $1), $1)
ORDER BY id FOR SHARE`

// CreateRepost reposts the post postID on behalf of userID — its original,
// when postID is a repost — and returns the repost, with created false
// when userID had reposted the original already (nothing is written then).
// The post or its original missing or deleted, or by someone userID hides
// (a mute, a block either way), is domain.ErrNotFound; one's own original,
// domain.ErrOwnPost. Which original, and the answer, are decided in one
// statement, in a transaction that holds userID's graph still: a delete
// that commits right after (of the post, the original or the repost there
// already) does not turn the answer into a not found, and a delete, a mute
// or a block that committed before, or is in flight, is a not found.
func (db *DB) CreateRepost(ctx context.Context, userID, postID int64) (domain.Post, bool, error) {
	for range repostTries {
		var post domain.Post
		var created, retry bool
		err := pgx.BeginFunc(ctx, db.primary, func(tx pgx.Tx) (err error) {
			post, created, retry, err = repostIn(ctx, tx, userID, postID)
			return err
		})
		switch {
		case errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrOwnPost):
			return domain.Post{}, false, err
		case err != nil:
			return domain.Post{}, false, fmt.Errorf("create repost: %w", err)
		case !retry:
			return post, created, nil
		}
	}
	return domain.Post{}, false, fmt.Errorf("create repost: the repost of %d by %d was deleted under it %d times", postID, userID, repostTries)
}

// repostIn is one try of CreateRepost in tx; retry says that the repost in
// the way was deleted between its statements.
func repostIn(ctx context.Context, tx pgx.Tx, userID, postID int64) (post domain.Post, created, retry bool, err error) {
	// The holds in one round trip, in their order.
	var holds pgx.Batch
	holds.Queue(holdGraphSQL, userID)
	holds.Queue(holdGraphLockSQL, userID)
	holds.Queue(holdPostsSQL, postID)
	if err := tx.SendBatch(ctx, &holds).Close(); err != nil {
		return post, false, false, err
	}
	post, err = scanPost(tx.QueryRow(ctx, createRepostSQL, userID, postID, traceparent.From(ctx)))
	if err == nil {
		return post, true, false, nil
	}
	if !isNoRows(err) {
		return post, false, false, err
	}
	// Why nothing was written: a repost there already, or a refusal.
	var hidden bool
	var first domain.Post
	var firstID *int64 // NULL: no live repost
	var firstAuthor int64
	var firstCreated time.Time
	var orig domain.Post
	err = tx.QueryRow(ctx, whyNoRepostSQL, userID, postID).Scan(
		&orig.ID, &orig.AuthorID, &hidden, &firstID, &firstAuthor, &first.Body, &firstCreated, &orig.Body, &orig.CreatedAt)
	switch {
	case isNoRows(err):
		return post, false, false, domain.ErrNotFound
	case err != nil:
		return post, false, false, err
	case hidden: // not there for userID, even a repost of their own post
		return post, false, false, domain.ErrNotFound
	case orig.AuthorID == userID:
		return post, false, false, domain.ErrOwnPost
	case firstID != nil:
		orig.CreatedAt = orig.CreatedAt.UTC()
		first.ID, first.AuthorID, first.CreatedAt, first.RepostOf = *firstID, firstAuthor, firstCreated.UTC(), &orig
		return first, false, false, nil
	}
	return post, false, true, nil // the repost in the way was deleted since the insert
}
