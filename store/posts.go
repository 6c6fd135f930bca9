package store

import (
	"context"
	"fmt"
	"math"

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
SELECT id, author_id, body, created_at FROM p`

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
		`SELECT id, author_id, body, created_at FROM posts WHERE author_id = $1 AND idempotency_key = $2`,
		authorID, key))
	if err != nil {
		return domain.Post{}, false, fmt.Errorf("create post: find by idempotency key: %w", err)
	}
	return post, false, nil
}

// Post returns a post that exists and is not deleted, or domain.ErrNotFound.
func (db *DB) Post(ctx context.Context, id int64) (domain.Post, error) {
	post, err := scanPost(db.primary.QueryRow(ctx,
		`SELECT id, author_id, body, created_at FROM posts WHERE id = $1 AND deleted_at IS NULL`, id))
	if isNoRows(err) {
		return domain.Post{}, domain.ErrNotFound
	}
	if err != nil {
		return domain.Post{}, fmt.Errorf("get post %d: %w", id, err)
	}
	return post, nil
}

// PostStatus tells whether post id exists, who wrote it and whether it is
// deleted.
func (db *DB) PostStatus(ctx context.Context, id int64) (authorID int64, deleted, found bool, err error) {
	err = db.primary.QueryRow(ctx, `SELECT author_id, deleted_at IS NOT NULL FROM posts WHERE id = $1`, id).
		Scan(&authorID, &deleted)
	if isNoRows(err) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("post %d status: %w", id, err)
	}
	return authorID, deleted, true, nil
}

// PostsByID returns the posts with the given ids that exist and are not
// deleted, in no particular order.
func (db *DB) PostsByID(ctx context.Context, ids []int64) ([]domain.Post, error) {
	rows, err := db.primary.Query(ctx,
		`SELECT id, author_id, body, created_at FROM posts WHERE id = ANY($1) AND deleted_at IS NULL`, ids)
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

// DeletePost deletes the post id on behalf of authorID. It returns domain.ErrNotFound
// when the post does not exist or is already deleted, and domain.ErrForbidden when
// somebody else wrote it.
func (db *DB) DeletePost(ctx context.Context, id, authorID int64) error {
	var n int
	if err := db.primary.QueryRow(ctx, deletePostSQL, id, authorID, traceparent.From(ctx)).Scan(&n); err != nil {
		return fmt.Errorf("delete post %d: %w", id, err)
	}
	if n == 1 {
		return nil
	}
	var owner int64
	err := db.primary.QueryRow(ctx, `SELECT author_id FROM posts WHERE id = $1 AND deleted_at IS NULL`, id).Scan(&owner)
	switch {
	case isNoRows(err):
		return domain.ErrNotFound
	case err != nil:
		return fmt.Errorf("delete post %d: %w", id, err)
	case owner != authorID:
		return domain.ErrForbidden
	default: // deleted and recreated in between cannot happen; treat as gone
		return domain.ErrNotFound
	}
}

// AuthorPosts returns up to limit of the author's posts with id < before
// (before <= 0: from the newest), newest first.
func (db *DB) AuthorPosts(ctx context.Context, authorID, before int64, limit int) ([]domain.Post, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := db.read.Query(ctx, `
SELECT id, author_id, body, created_at FROM posts
WHERE author_id = $1 AND id < $2 AND deleted_at IS NULL
ORDER BY id DESC LIMIT $3`, authorID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("author posts: %w", err)
	}
	return collectPosts(rows)
}

// FolloweePosts returns up to limit posts with id < before written by the
// people followerID follows, newest first: the truth that a home feed caches.
// Each followee contributes at most limit posts through the (author_id, id)
// index, so the cost grows with the number of followees, not of their posts.
func (db *DB) FolloweePosts(ctx context.Context, followerID, before int64, limit int) ([]domain.Post, error) {
	rows, err := db.primary.Query(ctx, `
SELECT p.id, p.author_id, p.body, p.created_at
FROM follows f
CROSS JOIN LATERAL (
    SELECT id, author_id, body, created_at FROM posts
    WHERE author_id = f.followee_id AND id < $2 AND deleted_at IS NULL
    ORDER BY id DESC LIMIT $3
) p
WHERE f.follower_id = $1
ORDER BY p.id DESC LIMIT $3`, followerID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("followee posts: %w", err)
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
	err := row.Scan(&p.ID, &p.AuthorID, &p.Body, &p.CreatedAt)
	p.CreatedAt = p.CreatedAt.UTC()
	return p, err
}

func collectPosts(rows pgx.Rows) ([]domain.Post, error) {
	posts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.Post, error) { return scanPost(row) })
	if err != nil {
		return nil, fmt.Errorf("read posts: %w", err)
	}
	return posts, nil
}
