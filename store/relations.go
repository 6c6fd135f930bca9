package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/traceparent"
)

// hidesSQL is true when the home feed of user hides the entries of other
// (two SQL expressions): user mutes other, or either blocks the other.
func hidesSQL(user, other string) string {
	return `(EXISTS (SELECT 1 FROM mutes WHERE user_id = ` + user + ` AND muted_id = ` + other + `)
    OR EXISTS (SELECT 1 FROM blocks WHERE (blocker_id = ` + user + ` AND blocked_id = ` + other + `)
                                    OR (blocker_id = ` + other + ` AND blocked_id = ` + user + `)))`
}

// hiddenSQL is hidesSQL of $1 and $2.
var hiddenSQL = hidesSQL("$1", "$2")

// relationChangedSQL writes relation.changed for the pair.
const relationChangedSQL = `
INSERT INTO outbox (event_type, payload, trace_context)
VALUES ('` + domain.RelationChanged + `', jsonb_build_object('user_id', $1::bigint, 'other_id', $2::bigint), NULLIF($3, ''))`

// Mute makes user mute other; muting twice is not an error.
func (db *DB) Mute(ctx context.Context, user, other int64) (domain.RelationChange, error) {
	return db.changeRelation(ctx, user, other, domain.Mute,
		`INSERT INTO mutes (user_id, muted_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`)
}

// Unmute undoes Mute.
func (db *DB) Unmute(ctx context.Context, user, other int64) (domain.RelationChange, error) {
	return db.changeRelation(ctx, user, other, domain.Mute, `DELETE FROM mutes WHERE user_id = $1 AND muted_id = $2`)
}

// Block makes user block other, and removes the follows between the two,
// both ways, in the same transaction.
func (db *DB) Block(ctx context.Context, user, other int64) (domain.RelationChange, error) {
	return db.changeRelation(ctx, user, other, domain.Block,
		`INSERT INTO blocks (blocker_id, blocked_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`)
}

// Unblock undoes Block; the follows it removed stay removed.
func (db *DB) Unblock(ctx context.Context, user, other int64) (domain.RelationChange, error) {
	return db.changeRelation(ctx, user, other, domain.Block, `DELETE FROM blocks WHERE blocker_id = $1 AND blocked_id = $2`)
}

// changeRelation runs change (a mute's or a block's) in a transaction that
// first takes the next graph version of each user whose feed it changes —
// user's; for a block, other's too, in id order so that two blocks never
// wait on each other —, and returns the hide states it left with those
// versions. The row locks order the changes of a pair, as they order
// follows: each statement after them sees every change committed before.
func (db *DB) changeRelation(ctx context.Context, user, other int64, rel domain.Relation, change string) (domain.RelationChange, error) {
	if user == other {
		return domain.RelationChange{}, domain.ErrSelfRelation
	}
	readers := []int64{user}
	if rel == domain.Block {
		readers = []int64{min(user, other), max(user, other)}
	}
	var out domain.RelationChange
	err := pgx.BeginFunc(ctx, db.primary, func(tx pgx.Tx) error {
		versions := make(map[int64]int64, 2)
		for _, r := range readers {
			var v int64
			if err := tx.QueryRow(ctx, bumpGraphSQL, r).Scan(&v); err != nil {
				return err
			}
			versions[r] = v
		}
		tag, err := tx.Exec(ctx, change, user, other)
		if err != nil {
			return err
		}
		out.Changed = tag.RowsAffected() > 0
		if out.Changed && rel == domain.Block {
			// The follows between the two go, each with its follow.deleted.
			for _, e := range [][2]int64{{user, other}, {other, user}} {
				var n int
				if err := tx.QueryRow(ctx, unfollowSQL, e[0], e[1], traceparent.From(ctx)).Scan(&n, new(bool)); err != nil {
					return err
				}
				if n == 1 {
					out.Unfollow = append(out.Unfollow, domain.EdgeChange{Changed: true,
						EdgeState: domain.EdgeState{Follower: e[0], Followee: e[1], Version: versions[e[0]]}})
				}
			}
		}
		for _, r := range readers {
			st := domain.HideState{Reader: r, Other: user + other - r, Version: versions[r]}
			if err := tx.QueryRow(ctx, `SELECT `+hiddenSQL, st.Reader, st.Other).Scan(&st.Hidden); err != nil {
				return err
			}
			out.Hides = append(out.Hides, st)
		}
		if out.Changed {
			_, err = tx.Exec(ctx, relationChangedSQL, user, other, traceparent.From(ctx))
		}
		return err
	})
	if err != nil {
		return domain.RelationChange{}, fmt.Errorf("%s %d: %w", rel, other, err)
	}
	return out, nil
}

// HideStates returns whether each of the two users' feeds hides the other
// now, with the version of its graph it was read at (one statement each:
// one snapshot).
func (db *DB) HideStates(ctx context.Context, a, b int64) ([]domain.HideState, error) {
	out := make([]domain.HideState, 0, 2)
	for _, r := range []int64{a, b} {
		st := domain.HideState{Reader: r, Other: a + b - r}
		err := db.primary.QueryRow(ctx, `
SELECT COALESCE((SELECT version FROM graph_versions WHERE user_id = $1), 0), `+hiddenSQL, st.Reader, st.Other).
			Scan(&st.Version, &st.Hidden)
		if err != nil {
			return nil, fmt.Errorf("hide state: %w", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// Hidden returns the users whose entries userID's feed hides: muted by
// them, blocked by them or blocking them, ascending.
func (db *DB) Hidden(ctx context.Context, userID int64) ([]int64, error) {
	ids, err := db.queryIDs(ctx, "hidden users", `
SELECT muted_id FROM mutes WHERE user_id = $1
UNION SELECT blocked_id FROM blocks WHERE blocker_id = $1
UNION SELECT blocker_id FROM blocks WHERE blocked_id = $1`, userID)
	slices.Sort(ids)
	return ids, err
}

// Blocked reports whether a block stands between a and b, either way.
func (db *DB) Blocked(ctx context.Context, a, b int64) (bool, error) {
	var blocked bool
	err := db.primary.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM blocks
    WHERE (blocker_id = $1 AND blocked_id = $2) OR (blocker_id = $2 AND blocked_id = $1))`, a, b).Scan(&blocked)
	if err != nil {
		return false, fmt.Errorf("block between %d and %d: %w", a, b, err)
	}
	return blocked, nil
}

// onPrimary is db with its reads on the primary too: the lists of a
// caller's own mutes and blocks, which docs/API.md has read the primary
// (only the followers, following and posts listings read a replica), so
// that a mute or a block shows in them at once.
func (db *DB) onPrimary() *DB { return &DB{primary: db.primary, read: db.primary} }

// Mutes lists whom userID mutes, newest first, after the cursor, from the
// primary.
func (db *DB) Mutes(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
	return db.onPrimary().listFollows(ctx, `
SELECT muted_id, created_at FROM mutes
WHERE user_id = $1 AND ($2::timestamptz IS NULL OR (created_at, muted_id) < ($2, $3))
ORDER BY created_at DESC, muted_id DESC LIMIT $4`, userID, after, limit)
}

// Blocks lists whom userID blocks, newest first, after the cursor, from
// the primary.
func (db *DB) Blocks(ctx context.Context, userID int64, after *domain.FollowCursor, limit int) ([]domain.Follow, error) {
	return db.onPrimary().listFollows(ctx, `
SELECT blocked_id, created_at FROM blocks
WHERE blocker_id = $1 AND ($2::timestamptz IS NULL OR (created_at, blocked_id) < ($2, $3))
ORDER BY created_at DESC, blocked_id DESC LIMIT $4`, userID, after, limit)
}
