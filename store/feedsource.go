package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Followees returns everyone followerID follows, in no particular order:
// what a feed rebuild writes into the reader's following hash.
func (db *DB) Followees(ctx context.Context, followerID int64) ([]int64, error) {
	return db.queryIDs(ctx, "followees", `SELECT followee_id FROM follows WHERE follower_id = $1`, followerID)
}

// PulledAuthors returns the authors whose posts were ever pulled into feeds
// at read time instead of fanned out (celebrities, now or before).
func (db *DB) PulledAuthors(ctx context.Context) ([]int64, error) {
	return db.queryIDs(ctx, "pulled authors", `SELECT user_id FROM follower_counts WHERE pulled`)
}

// AuthorPostIDsBetween returns the ids of the author's live posts with
// since <= id < before, newest first, at most limit: one page of what an
// unfollow removes from a feed.
func (db *DB) AuthorPostIDsBetween(ctx context.Context, authorID, since, before int64, limit int) ([]int64, error) {
	return db.queryIDs(ctx, "author post ids", `
SELECT id FROM posts WHERE author_id = $1 AND id >= $2 AND id < $3 AND deleted_at IS NULL
ORDER BY id DESC LIMIT $4`, authorID, since, before, limit)
}

// FolloweesOf returns whom each of users follows (an empty list for those who
// follow nobody), in one query: what seeding many readers' feeds needs.
func (db *DB) FolloweesOf(ctx context.Context, users []int64) (map[int64][]int64, error) {
	rows, err := db.primary.Query(ctx, `
SELECT u, COALESCE(array_agg(f.followee_id) FILTER (WHERE f.followee_id IS NOT NULL), '{}')
FROM unnest($1::bigint[]) AS u LEFT JOIN follows f ON f.follower_id = u
GROUP BY u`, users)
	if err != nil {
		return nil, fmt.Errorf("followees of users: %w", err)
	}
	out := make(map[int64][]int64, len(users))
	var u int64
	var followees []int64
	if _, err := pgx.ForEachRow(rows, []any{&u, &followees}, func() error {
		out[u] = append([]int64(nil), followees...)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("followees of users: %w", err)
	}
	return out, nil
}
