package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Followees returns everyone followerID follows, in no particular order,
// and the version of their graph this is (one statement: one snapshot):
// what a feed rebuild writes into the reader's following hash.
func (db *DB) Followees(ctx context.Context, followerID int64) ([]int64, int64, error) {
	var ids []int64
	var version int64
	err := db.primary.QueryRow(ctx, `
SELECT COALESCE((SELECT version FROM graph_versions WHERE user_id = $1), 0),
       array(SELECT followee_id FROM follows WHERE follower_id = $1)`, followerID).Scan(&version, &ids)
	if err != nil {
		return nil, 0, fmt.Errorf("followees: %w", err)
	}
	return ids, version, nil
}

// PulledAuthors returns the authors whose posts were ever pulled into feeds
// at read time instead of fanned out (celebrities, now or before).
func (db *DB) PulledAuthors(ctx context.Context) ([]int64, error) {
	return db.queryIDs(ctx, "pulled authors", `SELECT user_id FROM follower_counts WHERE pulled`)
}

// AuthorPostIDsBetween returns the ids of the author's posts with since <=
// id < before, deleted ones too, newest first, at most limit: one page of
// what an unfollow removes from a feed. (A post deleted in PostgreSQL stays
// in feeds, and shows, until its delete reaches Redis: an unfollow in
// between must take it out as well.) Each half reads its own partial index.
func (db *DB) AuthorPostIDsBetween(ctx context.Context, authorID, since, before int64, limit int) ([]int64, error) {
	return db.queryIDs(ctx, "author post ids", `
(SELECT id FROM posts WHERE author_id = $1 AND id >= $2 AND id < $3 AND deleted_at IS NULL
 ORDER BY id DESC LIMIT $4)
UNION ALL
(SELECT id FROM posts WHERE author_id = $1 AND id >= $2 AND id < $3 AND deleted_at IS NOT NULL
 ORDER BY id DESC LIMIT $4)
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

// FeedGraph returns what a rebuild of userID's feed writes beside it, read
// in one statement (one snapshot): whom they follow, whom their feed hides
// (Hidden), and the version of their graph it was read at.
func (db *DB) FeedGraph(ctx context.Context, userID int64) (followees, hidden []int64, version int64, err error) {
	err = db.primary.QueryRow(ctx, `
SELECT COALESCE((SELECT version FROM graph_versions WHERE user_id = $1), 0),
       array(SELECT followee_id FROM follows WHERE follower_id = $1),
       array(SELECT muted_id FROM mutes WHERE user_id = $1
             UNION SELECT blocked_id FROM blocks WHERE blocker_id = $1
             UNION SELECT blocker_id FROM blocks WHERE blocked_id = $1)`, userID).Scan(&version, &followees, &hidden)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("feed graph: %w", err)
	}
	return followees, hidden, version, nil
}
