package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Followees returns everyone followerID follows, in no particular order:
// what a feed rebuild writes into the reader's following hash.
func (db *DB) Followees(ctx context.Context, followerID int64) ([]int64, error) {
	rows, err := db.primary.Query(ctx, `SELECT followee_id FROM follows WHERE follower_id = $1`, followerID)
	if err != nil {
		return nil, fmt.Errorf("followees: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("followees: %w", err)
	}
	return ids, nil
}

// PulledAuthors returns the authors whose posts were ever pulled into feeds
// at read time instead of fanned out (celebrities, now or before).
func (db *DB) PulledAuthors(ctx context.Context) ([]int64, error) {
	rows, err := db.primary.Query(ctx, `SELECT user_id FROM follower_counts WHERE pulled`)
	if err != nil {
		return nil, fmt.Errorf("pulled authors: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("pulled authors: %w", err)
	}
	return ids, nil
}
