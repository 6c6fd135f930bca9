package store

import (
	"context"
	"fmt"
)

// WritePosition returns how far the primary's write-ahead log goes, in bytes:
// every transaction committed before the call ends at or below it. It is the
// insert position rather than pg_current_wal_lsn (the position written out),
// which can lag behind a commit with synchronous_commit off.
func (db *DB) WritePosition(ctx context.Context) (int64, error) {
	var lsn int64
	err := db.primary.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`).Scan(&lsn)
	if err != nil {
		return 0, fmt.Errorf("write position: %w", err)
	}
	return lsn, nil
}

// Replayed reports whether the read pool has replayed the primary's log up to
// lsn (a WritePosition), so that its listings show every write committed
// before it. A read pool that replays nothing — the primary itself, a replica
// promoted since — never has. pg_last_wal_replay_lsn alone does not say so: a
// primary that went through crash recovery at start keeps answering the last
// position it recovered, so the pool must also still be in recovery.
func (db *DB) Replayed(ctx context.Context, lsn int64) (bool, error) {
	var ok bool
	err := db.read.QueryRow(ctx,
		`SELECT pg_is_in_recovery() AND COALESCE(pg_last_wal_replay_lsn() - '0/0' >= $1::bigint, false)`, lsn).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("replayed: %w", err)
	}
	return ok, nil
}
