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

// createPostSQL writes the post and its post.created outbox row in one
// statement, which PostgreSQL runs as one transaction: both or neither, in one
// round trip. With an idempotency key that the author used before, the insert
// does nothing and neither does the outbox insert.
const createPostSQL = `
WITH p AS (
    INSERT INTO posts (author_id, body, idempotency_key)
    VALUES ($1, $2, NULLIF($3, ''))
    ON CONFLICT (author_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, author_id, body, created_at
), o AS (
    INSERT INTO outbox (event_type, payload, created_at, trace_context)
    SELECT '` + domain.PostCreated + `', jsonb_build_object('post_id', id, 'author_id', author_id), created_at, NULLIF($4, '') FROM p
)
SELECT id, author_id, body, created_at, NULL::bigint, NULL::bigint, NULL::text, NULL::timestamptz FROM p`

// postColumns and postsFrom read posts with their originals: a repost's
// row joined to the post it reposts (never deleted while the repost is
// not: DeletePost deletes both). scanPost reads the columns.
const (
	postColumns = `p.id, p.author_id, p.body, p.created_at, o.id, o.author_id, o.body, o.created_at`
	postsFrom   = `posts p LEFT JOIN posts o ON o.id = p.repost_of`
)

// CreatePost stores a post and its delivery intent atomically. When key is not
// empty and the author already created a post with it, that post is returned
// with created false and nothing is written. The outbox row keeps the trace
// context of ctx's span, which the post's delivery continues.
func (db *DB) CreatePost(ctx context.Context, authorID int64, body, key string) (post domain.Post, created bool, err error) {
	post, err = scanPost(db.primary.QueryRow(ctx, createPostSQL, authorID, body, key, traceparent.From(ctx)))
	if err == nil {
		return post, true, nil
	}
	if !isNoRows(err) || key == "" {
		return domain.Post{}, false, fmt.Errorf("create post: %w", err)
	}
	// The key was used before: answer with the first post, deleted or not.
	post, err = scanPost(db.primary.QueryRow(ctx,
		`SELECT `+postColumns+` FROM `+postsFrom+` WHERE p.author_id = $1 AND p.idempotency_key = $2`,
		authorID, key))
	if err != nil {
		return domain.Post{}, false, fmt.Errorf("create post: find by idempotency key: %w", err)
	}
	return post, false, nil
}

// Post returns a post that exists and is not deleted, or domain.ErrNotFound.
func (db *DB) Post(ctx context.Context, id int64) (domain.Post, error) {
	post, err := scanPost(db.primary.QueryRow(ctx,
		`SELECT `+postColumns+` FROM `+postsFrom+` WHERE p.id = $1 AND p.deleted_at IS NULL`, id))
	if isNoRows(err) {
		return domain.Post{}, domain.ErrNotFound
	}
	if err != nil {
		return domain.Post{}, fmt.Errorf("get post %d: %w", id, err)
	}
	return post, nil
}

// PostFacts reads, in one statement, whether post id exists and is
// deleted, its author's reach and the primary's write position: what a
// fan-out asks before its pages, which cost a round trip each when asked
// apart (a post's status, Reach, WritePosition).
func (db *DB) PostFacts(ctx context.Context, id int64) (domain.PostFacts, error) {
	var f domain.PostFacts
	var author *int64
	err := db.primary.QueryRow(ctx, `
SELECT p.author_id, p.deleted_at IS NOT NULL, COALESCE(c.followers, 0), COALESCE(c.pulled, false),
       (pg_current_wal_insert_lsn() - '0/0')::bigint
FROM (SELECT $1::bigint AS id) q
LEFT JOIN posts p ON p.id = q.id
LEFT JOIN follower_counts c ON c.user_id = p.author_id`, id).
		Scan(&author, &f.Deleted, &f.Followers, &f.Pulled, &f.WritePosition)
	if err != nil {
		return domain.PostFacts{}, fmt.Errorf("post %d facts: %w", id, err)
	}
	if author != nil {
		f.Found, f.AuthorID = true, *author
	}
	return f, nil
}

// PostsByID returns the posts with the given ids that exist and are not
// deleted, in no particular order.
func (db *DB) PostsByID(ctx context.Context, ids []int64) ([]domain.Post, error) {
	rows, err := db.primary.Query(ctx,
		`SELECT `+postColumns+` FROM `+postsFrom+` WHERE p.id = ANY($1) AND p.deleted_at IS NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("get posts by id: %w", err)
	}
	return collectPosts(rows)
}

// deletePostSQL marks the post deleted and writes post.deleted in the same
// statement, only when the caller is the author and the post is not deleted yet.
const deletePostSQL = `
WITH p AS (
    UPDATE posts SET deleted_at = now()
    WHERE id = $1 AND author_id = $2 AND deleted_at IS NULL
    RETURNING id, author_id
), o AS (
    INSERT INTO outbox (event_type, payload, trace_context)
    SELECT '` + domain.PostDeleted + `', jsonb_build_object('post_id', id, 'author_id', author_id), NULLIF($3, '') FROM p
)
SELECT count(*) FROM p`

// deleteRepostsSQL deletes the reposts of a deleted post, each with its
// post.deleted. It runs as a statement of its own after deletePostSQL: its
// snapshot, taken once the post's row lock was granted, sees every repost
// committed before (CreateRepost holds that row FOR SHARE while it inserts).
const deleteRepostsSQL = `
WITH r AS (
    UPDATE posts SET deleted_at = now()
    WHERE repost_of = $1 AND deleted_at IS NULL
      AND EXISTS (SELECT 1 FROM posts WHERE id = $1 AND deleted_at IS NOT NULL)
    RETURNING id, author_id
), o AS (
    INSERT INTO outbox (event_type, payload, trace_context)
    SELECT '` + domain.PostDeleted + `', jsonb_build_object('post_id', id, 'author_id', author_id), NULLIF($2, '') FROM r
)
SELECT COALESCE(array_agg(id), '{}') FROM r`

// DeletePost deletes the post id on behalf of authorID, and its reposts. It
// returns domain.ErrNotFound when the post does not exist or is already
// deleted, and domain.ErrForbidden when somebody else wrote it.
func (db *DB) DeletePost(ctx context.Context, id, authorID int64) error {
	_, err := db.DeletePostAndReposts(ctx, id, authorID)
	return err
}

// DeletePostAndReposts is DeletePost, and returns the ids of the reposts
// it deleted: a deleted post hides every repost of it, so they go with it,
// in one transaction (a batch is one implicit transaction).
func (db *DB) DeletePostAndReposts(ctx context.Context, id, authorID int64) ([]int64, error) {
	var n int
	var reposts []int64
	tc := traceparent.From(ctx)
	b := &pgx.Batch{}
	b.Queue(deletePostSQL, id, authorID, tc).QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
	b.Queue(deleteRepostsSQL, id, tc).QueryRow(func(row pgx.Row) error { return row.Scan(&reposts) })
	if err := db.primary.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("delete post %d: %w", id, err)
	}
	if n == 1 {
		return reposts, nil
	}
	var owner int64
	err := db.primary.QueryRow(ctx, `SELECT author_id FROM posts WHERE id = $1 AND deleted_at IS NULL`, id).Scan(&owner)
	switch {
	case isNoRows(err):
		return nil, domain.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("delete post %d: %w", id, err)
	case owner != authorID:
		return nil, domain.ErrForbidden
	default: // deleted and recreated in between cannot happen; treat as gone
		return nil, domain.ErrNotFound
	}
}

// AuthorPosts returns up to limit of the author's posts with id < before
// (before <= 0: from the newest), newest first.
func (db *DB) AuthorPosts(ctx context.Context, authorID, before int64, limit int) ([]domain.Post, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := db.read.Query(ctx, `
SELECT `+postColumns+` FROM `+postsFrom+`
WHERE p.author_id = $1 AND p.id < $2 AND p.deleted_at IS NULL
ORDER BY p.id DESC LIMIT $3`, authorID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("author posts: %w", err)
	}
	return collectPosts(rows)
}

// AuthorPostIDsSince returns the ids of the author's live posts with
// id >= since, newest first, at most limit: what a follow or an unfollow must
// add to or remove from one feed.
func (db *DB) AuthorPostIDsSince(ctx context.Context, authorID, since int64, limit int) ([]int64, error) {
	return db.queryIDs(ctx, "author post ids", `
SELECT id FROM posts WHERE author_id = $1 AND id >= $2 AND deleted_at IS NULL
ORDER BY id DESC LIMIT $3`, authorID, since, limit)
}

func scanPost(row pgx.Row) (domain.Post, error) {
	var p domain.Post
	var oID, oAuthor *int64
	var oBody *string
	var oCreated *time.Time
	err := row.Scan(&p.ID, &p.AuthorID, &p.Body, &p.CreatedAt, &oID, &oAuthor, &oBody, &oCreated)
	p.CreatedAt = p.CreatedAt.UTC()
	if err == nil && oID != nil && oAuthor != nil && oBody != nil && oCreated != nil {
		p.RepostOf = &domain.Post{ID: *oID, AuthorID: *oAuthor, Body: *oBody, CreatedAt: oCreated.UTC()}
	}
	return p, err
}

func collectPosts(rows pgx.Rows) ([]domain.Post, error) {
	posts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.Post, error) { return scanPost(row) })
	if err != nil {
		return nil, fmt.Errorf("read posts: %w", err)
	}
	return posts, nil
}
